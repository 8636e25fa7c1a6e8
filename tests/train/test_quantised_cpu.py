"""8-bit and 4-bit bases (bitsandbytes' CPU backend), --optim adamw_8bit and bf16 mixed
precision, trained end to end on the CPU with the tiny random Whisper."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from fitwhisper.cli import main
from fitwhisper.train.method_loading import _bitsandbytes_installed

pytestmark = pytest.mark.skipif(
    not _bitsandbytes_installed(), reason="bitsandbytes is a dependency; this install lacks it"
)


class _Probe:
    """A TrainerCallback recording what trained: the parameters before and after, the
    classes of the adapted layers' base layers, and the dtypes the output projection
    computed in during training (bf16 under mixed precision, whatever the weights)."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}
        self.base_layers: set[str] = set()
        self.trainable: set[str] = set()
        self.dtypes: set[torch.dtype] = set()
        self.mixed_precision = ""
        self.optimizer = ""
        outer = self

        class _CB(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kwargs):
                from accelerate.state import AcceleratorState

                outer.mixed_precision = AcceleratorState().mixed_precision
                opt = kwargs["optimizer"]
                opt = getattr(opt, "optimizer", opt)  # inside accelerate's wrapper
                outer.optimizer = f"{type(opt).__module__}.{type(opt).__name__}"
                outer.before = {k: v.detach().clone() for k, v in model.named_parameters()}
                outer.trainable = {k for k, v in model.named_parameters() if v.requires_grad}
                outer.base_layers = {
                    type(m.base_layer).__module__ + "." + type(m.base_layer).__name__
                    for m in model.modules()
                    if hasattr(m, "lora_A") and hasattr(m, "base_layer")
                }
                head = model.get_output_embeddings()
                self.hook = head.register_forward_hook(
                    lambda _m, _i, out: outer.dtypes.add(out.dtype)
                )

            def on_train_end(self, args, state, control, model=None, **kwargs):
                self.hook.remove()
                outer.after = {k: v.detach().clone() for k, v in model.named_parameters()}

        self.callback = _CB()

    def moved(self) -> set[str]:
        return {k for k, v in self.before.items() if not torch.equal(v, self.after[k])}


def _watch(monkeypatch: pytest.MonkeyPatch) -> _Probe:
    """The CLI's next run, watched from inside by a Trainer callback."""
    import fitwhisper.train as lib

    probe = _Probe()
    real_train = lib.train
    monkeypatch.setattr(
        lib, "train", lambda *a, **k: real_train(*a, **k, callbacks=(probe.callback,))
    )
    return probe


def _argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model", str(model),
        "--train_manifest", str(manifest),
        "--output_dir", str(out),
        "--per_device_train_batch_size", "2",
        "--max_train_samples", "2",  # each step is two 30 s windows
        "--logging_steps", "1",
        "--learning_rate", "1e-2",
        "--lora_r", "4",
        "--seed", "0",
        "-q",
        *extra,
    ]  # fmt: skip


def _losses(run: Path) -> dict[int, float]:
    state = json.loads((run / "trainer_state.json").read_text())
    return {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}


@pytest.mark.parametrize(
    ("flag", "layer"),
    [("--use_8bit", "bitsandbytes.nn.modules.Linear8bitLt"),
     ("--use_4bit", "bitsandbytes.nn.modules.Linear4bit")],
)  # fmt: skip
def test_quantised_base_trains_lora_on_cpu_with_8bit_adamw(
    flag: str,
    layer: str,
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fitwhisper.models.resolve import load_model, load_processor

    probe = _watch(monkeypatch)
    out = tmp_path / "run"
    argv = _argv(tiny_whisper_dir, tone_manifest, out, flag, "--optim", "adamw_8bit")
    argv += ["--max_steps", "3", "--save_strategy", "steps", "--save_steps", "2"]
    argv += ["--save_total_limit", "none"]
    assert main(argv) == 0

    # Every adapted layer sits on a bitsandbytes layer; only adapters trained, all of them.
    assert probe.base_layers == {layer}
    assert probe.trainable and all("lora_" in k for k in probe.trainable)
    moved = probe.moved()
    assert moved and moved <= probe.trainable
    assert probe.dtypes == {torch.float32} and probe.mixed_precision == "no"
    assert probe.optimizer == "bitsandbytes.optim.adamw.AdamW"  # its 8-bit AdamW
    assert {k for k in probe.trainable if "lora_B" in k} <= moved
    losses = _losses(out)
    assert sorted(losses) == [1, 2, 3] and all(math.isfinite(v) for v in losses.values())
    assert losses[3] < losses[1]  # lr 1e-2 on two clips: it learns them

    # final/ is an adapter (no base weights, no quantisation) that loads on the
    # full-precision base and transcribes.
    final = out / "final"
    assert (final / "adapter_model.safetensors").is_file()
    assert not (final / "model.safetensors").exists()
    assert "quantization_config" not in (final / "adapter_config.json").read_text()
    adapted = load_model(final)
    assert type(adapted).__name__.startswith("Peft")
    argv_eval = ["evaluate", str(out), str(tone_manifest), "--max_samples", "2"]
    assert main([*argv_eval, "--generation_max_length", "8"]) == 0
    assert load_processor(final).tokenizer.eos_token == "<|endoftext|>"

    # A quantised run stopped after checkpoint-2 resumes from it to the same loss.
    import shutil

    shutil.rmtree(out / "checkpoint-3")
    shutil.rmtree(final)
    assert main([*argv, "--resume"]) == 0
    resumed = _losses(out)
    assert sorted(resumed) == [1, 2, 3]
    assert resumed[3] == pytest.approx(losses[3], rel=1e-6)
    assert (final / "adapter_config.json").is_file()


@pytest.mark.parametrize(
    "method", [(), ("--use_lora", "--regression_manifest", "REGRESSION"), ("--use_4bit",)]
)
def test_bf16_mixed_precision_trains_and_evaluates_on_cpu(
    method: tuple[str, ...],
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Scoring the regression set before training once switched the run's bf16 off.
    method = tuple(str(tone_manifest) if m == "REGRESSION" else m for m in method)
    probe = _watch(monkeypatch)
    out = tmp_path / "run"
    argv = _argv(tiny_whisper_dir, tone_manifest, out, "--bf16", *method, "--max_steps", "2")
    argv += ["--eval_manifest", str(tone_manifest), "--max_eval_samples", "2"]
    argv += ["--generation_max_length", "8"]
    assert main(argv) == 0

    # Trained under bf16 autocast (the weights, and so the saved model, stay fp32).
    assert probe.dtypes == {torch.bfloat16} and probe.mixed_precision == "bf16"
    assert probe.moved() and {probe.after[k].dtype for k in probe.trainable} == {torch.float32}
    losses = _losses(out)
    assert sorted(losses) == [1, 2] and all(math.isfinite(v) for v in losses.values())
    # The final model was scored by generation on the held-out clips.
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    assert metrics["n_utterances"] == 2 and math.isfinite(metrics["wer"])
