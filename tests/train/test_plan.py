"""`train()` called as a library applies `--plan` and `--auto_fit` as the command does."""

from __future__ import annotations

import pytest

from fitwhisper.cli import main
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.train import train


class _Planned(Exception):
    """Raised in place of validation: the options as train() would run them."""


@pytest.fixture
def planned_options(monkeypatch: pytest.MonkeyPatch) -> list:
    """An Ampere GPU of 1 GiB, and train() stopped right after it applied the plan."""
    import fitwhisper.memory.search as search_module
    import fitwhisper.precision as precision
    import fitwhisper.train.validation as validation

    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(search_module, "detected_gpu_memory", lambda: 2**30)
    seen: list = []

    def capture(model_cfg, data_cfg, train_cfg, **kwargs) -> None:
        seen.append((model_cfg, train_cfg))
        raise _Planned

    monkeypatch.setattr(validation, "validate", capture)
    return seen


def test_auto_fit_in_a_library_call_plans_like_the_command(
    tiny_whisper_dir, tmp_path, planned_options
) -> None:
    out = str(tmp_path / "run")
    with pytest.raises(_Planned):
        train(
            ModelConfig(model=str(tiny_whisper_dir), use_lora=True),
            DataConfig(max_label_tokens=16),
            TrainConfig(auto_fit=True, train_manifest="t.jsonl", output_dir=out,
                        per_device_train_batch_size=4, gradient_accumulation_steps=4),
        )  # fmt: skip
    with pytest.raises(_Planned):
        main(["train", "--auto_fit", "--model", str(tiny_whisper_dir), "--use_lora",
              "--max_label_tokens", "16", "--train_manifest", "t.jsonl", "--output_dir", out,
              "--per_device_train_batch_size", "4",
              "--gradient_accumulation_steps", "4"])  # fmt: skip
    (lib_model, lib_train), (cli_model, cli_train) = planned_options
    assert (lib_model, lib_train) == (cli_model, cli_train)
    # The search ran: the named method and the effective batch are kept, precision chosen.
    assert lib_model.use_lora and not (lib_model.use_8bit or lib_model.use_4bit)
    assert lib_train.per_device_train_batch_size * lib_train.gradient_accumulation_steps == 16
    assert lib_train.bf16 is True


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the message without a GPU"
)
def test_auto_fit_in_a_library_call_without_a_gpu_is_refused(tmp_path) -> None:
    cfg = TrainConfig(auto_fit=True, train_manifest="t.jsonl", output_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="--auto_fit plans GPU memory, and no CUDA GPU"):
        train(ModelConfig(), DataConfig(), cfg)
    assert not (tmp_path / "r").exists()
