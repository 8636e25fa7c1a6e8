"""The divergence guard on a tiny random Whisper: a NaN clip or a diverging learning rate
stops the run at the step (naming its clips) with the last good checkpoint kept, or, with
--on_nonfinite skip, costs only that step's update; NaN weights are never saved."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from fitwhisper.cli import main
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import DataError, DivergenceError
from fitwhisper.train import train
from fitwhisper.train.guard import check_weights


@pytest.fixture
def nan_manifest(tone_manifest: Path) -> Path:
    """The six tone clips and, as the fourth row, a float WAV with NaN samples."""
    folder = tone_manifest.parent
    x = 0.3 * np.sin(np.arange(16_000) / 10).astype(np.float32)
    x[4000:4010] = np.nan
    sf.write(folder / "clips" / "nan.wav", x, 16_000, subtype="FLOAT")
    rows = [json.loads(line) for line in tone_manifest.read_text().splitlines()]
    rows.insert(3, {"audio_path": "clips/nan.wav", "text": "a broken clip"})
    path = folder / "with_nan.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _cfg(out: Path, manifest: Path, **kw) -> TrainConfig:
    base = dict(output_dir=str(out), train_manifest=str(manifest), per_device_train_batch_size=1,
                learning_rate=1e-4, max_steps=7, logging_steps=1, save_strategy="no",
                report_to="none", seed=0)  # fmt: skip
    return TrainConfig(**{**base, **kw})


@pytest.fixture
def check_passes_nan(monkeypatch):
    """The data check blind to NaN samples, as before it looked: training's own guard."""
    from fitwhisper.data import check

    inspect = check._inspect_audio

    def blind(row):
        facts = inspect(row)
        facts.nonfinite = 0
        return facts

    monkeypatch.setattr(check, "_inspect_audio", blind)


def test_the_data_check_refuses_a_nan_clip_before_training(
    tiny_whisper_dir: Path, nan_manifest: Path, tmp_path: Path
) -> None:
    with pytest.raises(DataError) as e:
        train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(),
              _cfg(tmp_path / "run", nan_manifest))  # fmt: skip
    assert "with_nan.jsonl:4: nonfinite_audio (10 NaN or Inf samples)" in e.value.message
    assert not (tmp_path / "run" / "final").exists()


def test_a_nan_clip_stops_training_at_its_step_naming_it(
    tiny_whisper_dir: Path, nan_manifest: Path, tmp_path: Path, check_passes_nan
) -> None:
    out = tmp_path / "run"
    with pytest.raises(DivergenceError) as e:
        train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(),
              _cfg(out, nan_manifest, save_strategy="steps", save_steps=1,
                   save_total_limit=None))  # fmt: skip

    message = e.value.message
    step = int(re.search(r"training diverged at step (\d+): the loss is not finite", message)[1])
    # One clip per step: the step names the NaN clip and no other.
    clips = re.search(r"the step's clips: (.*)\. Nothing of this step was saved", message)[1]
    assert clips == f"clips/nan.wav ({nan_manifest.parent / 'clips' / 'nan.wav'})"
    # Seed 0 draws the NaN clip fourth: earlier steps were saved, and are finite; nothing of
    # the failing step or after it is.
    assert step > 1
    kept = out / f"checkpoint-{step - 1}"
    assert f"the last good checkpoint is {kept}" in message
    assert not (out / f"checkpoint-{step}").exists() and not (out / "final").exists()
    from transformers import WhisperForConditionalGeneration

    check_weights(WhisperForConditionalGeneration.from_pretrained(kept), "the kept checkpoint")


def test_skip_drops_the_nan_step_counts_it_and_finishes_finite(
    tiny_whisper_dir: Path, nan_manifest: Path, tmp_path: Path, check_passes_nan, caplog
) -> None:
    with caplog.at_level("WARNING", logger="fitwhisper"):
        result = train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(),
                       _cfg(tmp_path / "run", nan_manifest, on_nonfinite="skip"))  # fmt: skip

    # Seven clips, seven steps of one clip: the NaN clip is drawn exactly once.
    assert result.global_step == 7 and result.skipped_steps == 1
    assert re.search(
        r"step \d+: non-finite loss, update skipped \(clips: clips/nan.wav", caplog.text
    )
    assert "1 optimizer steps skipped for a non-finite loss or gradient" in caplog.text
    from transformers import WhisperForConditionalGeneration

    check_weights(WhisperForConditionalGeneration.from_pretrained(result.final_dir), "final/")


def test_a_diverging_learning_rate_exits_1_at_the_step_keeping_the_last_checkpoint(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    code = main(["train", "--model", str(tiny_whisper_dir), "--train_manifest",
                 str(tone_manifest), "--output_dir", str(out), "--learning_rate", "1000",
                 "--max_steps", "8", "--per_device_train_batch_size", "2",
                 "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "none",
                 "--report_to", "none", "--logging_steps", "1"])  # fmt: skip

    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    found = re.search(r"error: training diverged at step (\d+): the (loss|gradient) is not", err)
    assert found, err
    step = int(found[1])
    assert step > 1  # the first step's gradient is the starting model's: finite
    kept = out / f"checkpoint-{step - 1}"
    assert f"the last good checkpoint is {kept}" in err
    assert "--on_nonfinite skip" in err
    assert not (out / f"checkpoint-{step}").exists() and not (out / "final").exists()
    from transformers import WhisperForConditionalGeneration

    check_weights(WhisperForConditionalGeneration.from_pretrained(kept), "the kept checkpoint")


def test_check_weights_names_the_first_non_finite_parameter() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    check_weights(model, "step 3")  # finite: nothing raised
    with torch.no_grad():
        model[1].bias[0] = float("inf")

    with pytest.raises(DivergenceError) as e:
        check_weights(model, "step 3")
    assert e.value.message.startswith(
        "the model's weights are not finite at step 3 (first: 1.bias)"
    )


def test_weights_made_nan_after_the_last_step_are_not_saved_as_final(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import TrainerCallback

    class PoisonLastStep(TrainerCallback):  # runs after the guard's own step-end check
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == state.max_steps:
                with torch.no_grad():
                    next(model.parameters()).view(-1)[0] = float("nan")

    out = tmp_path / "run"
    with pytest.raises(DivergenceError) as e:
        train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(),
              _cfg(out, tone_manifest, max_steps=2), callbacks=(PoisonLastStep(),))  # fmt: skip
    assert e.value.message.startswith("the model's weights are not finite at the end of training")
    assert not (out / "final").exists()


def test_a_model_with_nan_weights_is_not_exported(tiny_whisper_dir: Path, tmp_path: Path) -> None:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from fitwhisper.export import export_ct2

    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    with torch.no_grad():
        model.model.decoder.layer_norm.weight[0] = float("nan")
    model.save_pretrained(tmp_path / "diverged")
    WhisperProcessor.from_pretrained(tiny_whisper_dir).save_pretrained(tmp_path / "diverged")

    with pytest.raises(DivergenceError) as e:
        export_ct2(tmp_path / "diverged", tmp_path / "ct2")
    assert "has non-finite weights (NaN or Inf, first: model.decoder.layer_norm.weight)" in str(
        e.value
    )
    assert not (tmp_path / "ct2").exists()


def test_gradients_are_judged_except_under_fp16s_gradient_scaler(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from fitwhisper.data.manifest import Row
    from fitwhisper.train.guard import NonFiniteGuard

    rows = [Row(index=i, line=i + 1, audio=tmp_path / f"{i}.wav", text="x", id=f"clip{i}")
            for i in range(3)]  # fmt: skip
    dataset = SimpleNamespace(rows=rows)
    model = torch.nn.Linear(2, 2)
    state = TrainerState()
    state.global_step = 6

    def step(fp16: bool, on_nonfinite: str = "stop") -> NonFiniteGuard:
        guard = NonFiniteGuard(dataset, on_nonfinite)
        model.weight.grad = torch.full((2, 2), float("inf"))
        guard.note(torch.tensor([2, 0]), torch.tensor(1.5))
        args = SimpleNamespace(fp16=fp16, output_dir=str(tmp_path))
        guard.on_pre_optimizer_step(args, state, TrainerControl(), model=model)
        return guard

    step(fp16=True)  # the scaler's business: no error, gradients left for it to skip
    assert model.weight.grad is not None
    with pytest.raises(DivergenceError) as e:
        step(fp16=False)
    assert e.value.message.startswith(
        "training diverged at step 7: the gradient is not finite (NaN or Inf); the step's "
        f"clips: clip2 ({tmp_path / '2.wav'}), clip0 ({tmp_path / '0.wav'}). Nothing"
    )
    guard = step(fp16=False, on_nonfinite="skip")
    assert guard.skipped == 1 and model.weight.grad is None


def test_nan_weights_are_not_saved_as_a_checkpoint(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import TrainerCallback

    class PoisonStepTwo(TrainerCallback):  # after the update, before the step's save
        def on_optimizer_step(self, args, state, control, model=None, **kwargs):
            if state.global_step == 1:  # step 2's update (global_step counts finished steps)
                with torch.no_grad():
                    next(model.parameters()).view(-1)[0] = float("nan")

    out = tmp_path / "run"
    with pytest.raises(DivergenceError) as e:
        train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(),
              _cfg(out, tone_manifest, max_steps=4, save_strategy="steps", save_steps=2),
              callbacks=(PoisonStepTwo(),))  # fmt: skip
    assert e.value.message.startswith("the model's weights are not finite at step 2 (first: ")
    assert not (out / "checkpoint-2").exists()


class _Engine:
    """What the guard reads of a DeepSpeed engine after its step (deepspeed/runtime/
    engine.py): the global gradient norm and whether the update was applied."""

    def __init__(self, norm, applied: bool = True) -> None:
        self.norm, self.applied = norm, applied

    def get_global_grad_norm(self):
        return self.norm

    def was_step_applied(self) -> bool:
        return self.applied


@pytest.mark.parametrize(
    ("norm", "applied", "fp16", "stops"),
    [
        (torch.tensor(2.5), True, False, False),
        (None, True, False, False),  # no step taken yet: nothing to judge
        (float("nan"), True, False, True),  # fp32 and bf16 ZeRO-3 step with a NaN norm
        (torch.tensor(float("inf")), True, False, True),
        (1.0, False, False, True),  # bf16 ZeRO-2 dropped the step: non-finite gradients
        (float("nan"), False, True, False),  # fp16: the loss scaler's business
    ],
)
def test_under_deepspeed_the_engines_gradient_norm_is_judged(
    tmp_path: Path, norm, applied: bool, fp16: bool, stops: bool
) -> None:
    """ZeRO keeps no p.grad: the guard reads the engine the Trainer stepped instead."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from fitwhisper.train.guard import NonFiniteGuard

    guard = NonFiniteGuard(SimpleNamespace(rows=None), "stop")
    model = torch.nn.Linear(2, 2)  # no .grad, as under ZeRO
    guard.note(torch.tensor([0]), torch.tensor(1.5), _Engine(norm, applied))
    args = SimpleNamespace(fp16=fp16, output_dir=str(tmp_path))
    if not stops:
        guard.on_pre_optimizer_step(args, TrainerState(), TrainerControl(), model=model)
        return
    with pytest.raises(DivergenceError) as e:
        guard.on_pre_optimizer_step(args, TrainerState(), TrainerControl(), model=model)
    assert e.value.message.startswith("training diverged at step 1: the gradient is not finite")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_weights_of_mixed_dtypes_and_empty_partitions_are_judged_as_a_whole(bad) -> None:
    """An empty ZeRO-3 partition beside bf16 and fp32 weights: one bad element anywhere is
    found, and the largest finite float32 is not mistaken for an overflow."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).bfloat16())
    model[0].bias.ds_tensor = torch.empty(0)
    with torch.no_grad():
        model[0].weight.fill_(torch.finfo(torch.float32).max)
        if bad is not None:
            model[1].weight[1, 0] = bad
    if bad is None:
        check_weights(model, "step 1")
        return
    with pytest.raises(DivergenceError, match=r"first: 1\.weight"):
        check_weights(model, "step 1")


def test_zero3_weights_are_checked_in_each_ranks_partition() -> None:
    """ZeRO-3 empties each parameter and keeps this rank's share in `ds_tensor`."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    for p in model.parameters():
        p.ds_tensor = p.data.flatten().clone()
        p.data = torch.empty(0)
    check_weights(model, "step 3")
    model[1].weight.ds_tensor[1] = float("nan")
    with pytest.raises(DivergenceError) as e:
        check_weights(model, "step 3")
    assert e.value.message.startswith(
        "the model's weights are not finite at step 3 (first: 1.weight)"
    )


@pytest.mark.parametrize("fp16", [False, True])
def test_under_deepspeed_the_start_says_what_the_guard_watches(fp16: bool, caplog) -> None:
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    from fitwhisper.train.guard import NonFiniteGuard

    guard = NonFiniteGuard(SimpleNamespace(rows=None), "stop")
    args = SimpleNamespace(deepspeed="zero2.json", fp16=fp16)
    with caplog.at_level("INFO", logger="fitwhisper"):
        guard.on_train_begin(args, TrainerState(), TrainerControl())
    line = caplog.text
    assert "divergence guard under DeepSpeed: watches each loss and, " in line
    if fp16:
        assert "under fp16, nothing of the gradients (its loss scaler skips such steps)" in line
    else:
        assert "DeepSpeed's global gradient norm and skipped update" in line
    caplog.clear()
    with caplog.at_level("INFO", logger="fitwhisper"):
        guard.on_train_begin(SimpleNamespace(deepspeed=None, fp16=False), TrainerState(),
                             TrainerControl())  # fmt: skip
    assert "DeepSpeed" not in caplog.text
