"""A plain LoRA run under mixed precision loads its frozen base in that half precision:
half the weight memory, adapters still fp32, and generation (evaluation) still works."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fitwhisper.config import ModelConfig
from fitwhisper.train.method_loading import load_kwargs


@pytest.mark.parametrize(
    ("flags", "precision", "expected"),
    [
        ({"use_lora": True}, "bf16", torch.bfloat16),
        ({"use_lora": True}, "fp16", torch.float16),
        ({"use_lora": True}, "fp32", None),
        ({}, "bf16", None),  # full fine-tuning needs fp32 master weights
    ],
)
def test_which_runs_load_a_half_precision_base(flags, precision, expected) -> None:
    assert load_kwargs(ModelConfig(model="m", **flags), precision).get("dtype") == expected


def test_quantised_base_is_not_also_cast(monkeypatch) -> None:
    from fitwhisper.train import method_loading as methods

    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: True)
    kwargs = load_kwargs(ModelConfig(model="m", use_8bit=True), "bf16")
    assert "dtype" not in kwargs and "quantization_config" in kwargs


def test_bf16_lora_trains_on_a_bf16_base_and_scores_by_generation(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import TrainerCallback

    from fitwhisper.config import DataConfig, TrainConfig
    from fitwhisper.train import train

    seen: dict[tuple, int] = {}

    class Dtypes(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            for p in model.parameters():
                key = (p.dtype, p.requires_grad)
                seen[key] = seen.get(key, 0) + p.numel()

    result = train(
        ModelConfig(model=str(tiny_whisper_dir), use_lora=True, lora_r=4),
        DataConfig(),
        TrainConfig(
            train_manifest=str(tone_manifest), eval_manifest=str(tone_manifest),
            output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=2,
            learning_rate=1e-3, bf16=True, generation_max_length=8, report_to="none",
        ),
        callbacks=(Dtypes(),),
    )  # fmt: skip
    assert set(seen) == {(torch.bfloat16, False), (torch.float32, True)}
    assert seen[(torch.bfloat16, False)] > 10 * seen[(torch.float32, True)]
    assert result.global_step == 2
    assert result.eval_metrics  # the final model was scored by generation
    assert all(v == v for v in result.eval_metrics.values())  # no NaN
