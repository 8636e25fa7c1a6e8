"""OOM back-off: an out-of-memory error injected at a
chosen step makes training go on with half the batch and twice the accumulation, the same
effective batch, the same steps and samples, and the same result."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback, WhisperForConditionalGeneration

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import OutOfMemoryError
from fitwhisper.memory.backoff import _split, is_oom
from fitwhisper.train import train


class _FakeGpu:
    """Patches Whisper's forward to raise torch.OutOfMemoryError for batches above
    `fits` once the run reaches `from_step` (training) or in evaluation when `in_eval`.
    Records the batch size of every forward that went through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fits: int, from_step: int | None,
                 in_eval: bool = False, fail_calls: frozenset = frozenset()) -> None:  # fmt: skip
        self.fits, self.from_step, self.in_eval = fits, from_step, in_eval
        self.fail_calls = fail_calls  # training forwards (1-based, failed ones too) that OOM
        self.calls = 0
        self.armed = False
        self.train_batches: list[int] = []
        self.ooms = 0
        real = WhisperForConditionalGeneration.forward
        fake = self

        @functools.wraps(real)  # generate() checks its kwargs against forward's signature
        def forward(model, *args, **kwargs):
            n = _batch_of(kwargs)
            if _traced(kwargs):  # the memory predictor's fake-tensor trace: no device memory
                return real(model, *args, **kwargs)
            if model.training:
                fake.calls += 1
            tight = (fake.armed and model.training) or (fake.in_eval and not model.training)
            if (tight and n > fake.fits) or (model.training and fake.calls in fake.fail_calls):
                fake.ooms += 1
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            if model.training:
                fake.train_batches.append(n)
            return real(model, *args, **kwargs)

        monkeypatch.setattr(WhisperForConditionalGeneration, "forward", forward)

        class _Arm(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                if fake.from_step is not None and state.global_step + 1 >= fake.from_step:
                    fake.armed = True

        self.callback = _Arm()


def _batch_of(kwargs: dict) -> int:
    # Generation runs the encoder on its own and the decoder through forward.
    for key in ("input_features", "decoder_input_ids", "labels"):
        if kwargs.get(key) is not None:
            return kwargs[key].shape[0]
    return 0


def _traced(kwargs: dict) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return any(isinstance(v, torch.Tensor) and is_fake(v) for v in kwargs.values())


class _Losses(TrainerCallback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def _run(model_dir: Path, manifest: Path, out: Path, callbacks: tuple, **overrides):
    cfg = dict(
        output_dir=str(out),
        train_manifest=str(manifest),
        per_device_train_batch_size=3,
        gradient_accumulation_steps=2,
        learning_rate=3e-3,
        warmup_steps=0,
        max_steps=5,
        logging_steps=1,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        generation_max_length=16,
        seed=0,
        pack_clips=False,  # batches of clips, as the step arithmetic below counts them
    )
    cfg.update(overrides)
    return train(ModelConfig(model=str(model_dir)), DataConfig(), TrainConfig(**cfg),
                 callbacks=callbacks)  # fmt: skip


def test_oom_at_step_3_halves_batch_doubles_accumulation_and_finishes(
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Reference: the same run on a device with room for every batch.
    plain = _FakeGpu(monkeypatch, fits=99, from_step=None)
    ref_losses = _Losses()
    ref = _run(tiny_whisper_dir, tone_manifest, tmp_path / "ref", (plain.callback, ref_losses))
    monkeypatch.undo()

    # From step 3 on, only 2 clips fit: batch 3 -> micro-batches of 2 (+1), accumulation 4.
    gpu = _FakeGpu(monkeypatch, fits=2, from_step=3)
    losses = _Losses()
    with caplog.at_level(logging.WARNING, logger="fitwhisper.memory.backoff"):
        res = _run(tiny_whisper_dir, tone_manifest, tmp_path / "oom", (gpu.callback, losses))

    assert gpu.ooms == 1  # once split, the later steps fit at once
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "out of memory at step 3 with per-device batch 3" in msg
    assert "now per-device batch 2 x gradient accumulation 4 (was 3 x 2)" in msg
    assert "effective batch 6 unchanged" in msg
    # Same optimizer steps, same samples: 5 steps x 2 batches x 3 clips.
    assert res.global_step == ref.global_step == 5
    assert sum(gpu.train_batches) == sum(plain.train_batches) == 5 * 2 * 3
    assert gpu.train_batches[:4] == [3, 3, 3, 3]  # steps 1-2 at the configured batch
    assert max(gpu.train_batches[4:]) == 2  # steps 3-5 in micro-batches
    # The micro-batch gradients add up to the whole batch's: the run learns the same.
    assert losses.losses == pytest.approx(ref_losses.losses, rel=1e-4)


def test_an_oom_in_a_later_micro_batch_redoes_only_that_one(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_batch = {"per_device_train_batch_size": 6, "gradient_accumulation_steps": 1,
                 "max_steps": 4}  # fmt: skip
    plain = _FakeGpu(monkeypatch, fits=99, from_step=None)
    ref_losses = _Losses()
    _run(tiny_whisper_dir, tone_manifest, tmp_path / "ref", (plain.callback, ref_losses),
         **one_batch)  # fmt: skip
    monkeypatch.undo()

    # Step 3's batch of 6 fails (call 3), its halves go 3 (ok) and 3 (call 5 fails): only
    # the second half is redone, as 2 + 1; steps 4 on run as 2 + 2 + 2.
    gpu = _FakeGpu(monkeypatch, fits=99, from_step=None, fail_calls=frozenset({3, 5}))
    losses = _Losses()
    res = _run(tiny_whisper_dir, tone_manifest, tmp_path / "oom", (gpu.callback, losses),
               **one_batch)  # fmt: skip
    assert res.global_step == 4
    assert gpu.train_batches == [6, 6, 3, 2, 1, 2, 2, 2]
    assert losses.losses == pytest.approx(ref_losses.losses, rel=1e-4)


def test_below_batch_1_stops_with_a_plan(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = _FakeGpu(monkeypatch, fits=0, from_step=2)
    with pytest.raises(OutOfMemoryError) as err:
        _run(tiny_whisper_dir, tone_manifest, tmp_path / "run", (gpu.callback,), max_steps=3)
    assert "batch of 1" in err.value.message
    assert "predicted peak of a training step at batch 1 is" in err.value.message
    assert "fitwhisper plan --model" in err.value.hint
    assert "--per_device_train_batch_size 1" in err.value.hint
    assert gpu.ooms == 3  # 3 -> 2 -> 1 -> gives up


def test_evaluation_halves_its_generation_batch(
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import evaluate_model
    from fitwhisper.models.generation import configure_generation
    from fitwhisper.models.resolve import load_model, load_processor

    processor = load_processor(str(tiny_whisper_dir))
    model = load_model(str(tiny_whisper_dir))
    configure_generation(model, None, "transcribe")
    rows = load_manifest(tone_manifest).rows
    ds = SpeechDataset(rows, processor, language=None, task="transcribe")
    texts, ids = [r.text for r in rows], [r.id for r in rows]
    ref = evaluate_model(model, processor, ds, texts, ids, language="en", batch_size=6,
                         generation_max_length=8)  # fmt: skip

    gpu = _FakeGpu(monkeypatch, fits=2, from_step=None, in_eval=True)
    with caplog.at_level(logging.WARNING, logger="fitwhisper.evaluate.predict"):
        res = evaluate_model(model, processor, ds, texts, ids, language="en", batch_size=6,
                             generation_max_length=8)  # fmt: skip
    assert gpu.ooms >= 1
    assert "generation with a batch of 6: generating in batches of 3" in caplog.text
    assert "generation with a batch of 3: generating in batches of 2" in caplog.text
    assert res.hypotheses == ref.hypotheses


def test_split_cuts_every_batch_tensor_and_keeps_the_rest() -> None:
    inputs = {"input_features": torch.zeros(5, 2), "labels": torch.ones(5, 3), "flag": 1}
    parts = _split(inputs, 2)
    assert [p["input_features"].shape[0] for p in parts] == [3, 2]
    assert torch.equal(torch.cat([p["labels"] for p in parts]), inputs["labels"])
    assert all(p["flag"] == 1 for p in parts)
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    assert not is_oom(RuntimeError("shape mismatch"))


def test_evaluation_generates_under_the_runs_mixed_precision(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a bf16 run every encoder pass of the evaluation during training runs under bf16
    autocast, as training does. accelerate autocasts model.forward only, which covers the
    eval loss; generate() calls the encoder itself, and that pass ran in fp32 before."""
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    seen: list[bool] = []  # autocast on, per encoder pass in eval mode during training
    during = {"training": False}
    real = WhisperEncoder.forward

    def forward(encoder, *args, **kwargs):
        if during["training"] and not encoder.training:
            seen.append(torch.is_autocast_enabled("cpu"))
        return real(encoder, *args, **kwargs)

    class _During(TrainerCallback):
        def on_train_begin(self, *a, **k):
            during["training"] = True

        def on_train_end(self, *a, **k):  # the final score loads the model in fp32 alone
            during["training"] = False

    monkeypatch.setattr(WhisperEncoder, "forward", forward)
    _run(tiny_whisper_dir, tone_manifest, tmp_path / "run", (_During(),), bf16=True,
         max_steps=1, eval_manifest=str(tone_manifest), eval_strategy="steps", eval_steps=1,
         generation_max_length=4)  # fmt: skip
    assert len(seen) >= 2  # the loss forward and generation, per eval batch
    assert all(seen)


@pytest.mark.parametrize("phase", ["training", "evaluation"])
def test_under_fsdp_an_oom_stops_with_advice_instead_of_splitting(
    phase: str, tiny_whisper_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FSDP gathers the weights from every process in each forward pass, so a process that
    split its batch would wait on all-gathers the others never join (a hang). FSDP needs a
    GPU (accelerate 1.15), so the Trainer's own flag is set here as it is under
    `accelerate launch --use_fsdp`; before the fix the batch of 4 was split down to 1."""
    from transformers import Seq2SeqTrainingArguments

    from fitwhisper.memory.backoff import BackoffTrainer
    from fitwhisper.models.resolve import load_model

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    trainer = BackoffTrainer(model=load_model(str(tiny_whisper_dir)), args=args)
    trainer.is_fsdp_enabled = True
    trainer.current_gradient_accumulation_steps = 1  # set by train(), which is not run here
    gpu = _FakeGpu(monkeypatch, fits=1, from_step=None, in_eval=True)
    gpu.armed = True
    inputs = {"input_features": torch.zeros(4, 80, 3000), "labels": torch.full((4, 3), 100)}
    with pytest.raises(OutOfMemoryError) as err:
        if phase == "training":
            trainer.training_step(trainer.model, inputs)
        else:
            trainer.prediction_step(trainer.model, inputs, prediction_loss_only=True)
    assert gpu.ooms == 1  # not retried
    assert err.value.message == (
        f"out of memory in {phase} with a batch of 4 under FSDP, where every forward pass "
        "gathers the weights from all processes: one process cannot split its batch into "
        "more passes than the others make (they would wait for it for ever)"
    )
    assert err.value.hint == (
        "lower --per_device_train_batch_size (raise --gradient_accumulation_steps to keep the "
        "effective batch), or turn on --gradient_checkpointing"
        if phase == "training"
        else "lower --per_device_eval_batch_size or --generation_max_length"
    )
    assert trainer.backoff_events == []


def test_under_ddp_only_an_oom_in_the_backward_pass_is_not_split() -> None:
    """A forward-pass OOM leaves DDP's reducer as it was, so the batch is split as on one
    process (test_multiprocess.py runs both on two processes); one in the backward pass
    is not. Gradient checkpointing already on is not advised again."""
    from types import SimpleNamespace

    from fitwhisper.memory.oom_stop import refusal

    ddp = object.__new__(torch.nn.parallel.DistributedDataParallel)  # its type is what counts
    args = SimpleNamespace(world_size=2, activation_checkpointing=True)
    trainer = SimpleNamespace(is_deepspeed_enabled=False, is_fsdp_enabled=False,
                              memory_request=None, args=args)  # fmt: skip
    assert refusal(trainer, "training", model=ddp, in_backward=False) is None
    assert refusal(trainer, "training", model=torch.nn.Linear(1, 1), in_backward=True) is None
    refused = refusal(trainer, "training", model=ddp, in_backward=True)
    assert refused is not None and refused.why.startswith("in the backward pass under DDP")
    assert refused.hint == (
        "lower --per_device_train_batch_size (raise --gradient_accumulation_steps to keep the "
        "effective batch), or run `fitwhisper plan` to find settings that fit"
    )
