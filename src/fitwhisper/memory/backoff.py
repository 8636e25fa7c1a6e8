"""Survive a CUDA out-of-memory error in training and evaluation.

`fitwhisper train` and `fitwhisper evaluate` use `BackoffTrainer` in place of
`Seq2SeqTrainer`. When a training step runs out of memory it releases memory, halves the
per-device batch, doubles the gradient accumulation (the effective batch stays the same)
and retries the same step; evaluation halves its generation batch the same way. Below a
batch of 1 it stops with `fitwhisper.errors.OutOfMemoryError`, giving the predicted
need at batch 1 and the `fitwhisper plan` command for the run.

Why in-step micro-batches and not a restart: Trainer owns the loop, and neither of its own
answers keeps the run intact. `auto_find_batch_size` (accelerate's
`find_executable_batch_size`) restarts `train()` from step 0 with a smaller batch and the
same accumulation, so the effective batch shrinks and the steps already done are redone;
restarting from the newest checkpoint loses the steps since it (and there may be none).
Here `training_step` gets the dataloader's batch as before and, after an OOM, runs it as
`split` micro-batches whose gradients add up to the whole batch's: the same step, the same
samples in the same order, the same optimizer steps, schedule and effective batch. The
dataloader keeps its batch size, so resuming from a checkpoint stays consistent; the
run starts again at the configured batch and backs off again if it must.

Exactness: each micro-batch's loss is weighted by its share of the batch's label tokens,
so the summed gradient equals the whole batch's (Whisper's loss is a token mean). Only the
micro-batch that failed is redone; those done before it keep their gradients. An OOM in the
forward pass leaves no gradients behind. One in the backward pass may have added part of
the failed micro-batch's gradients: when the optimizer step had none before it, they are
cleared and the retry is exact; otherwise a warning says the step's gradient keeps that
partial micro-batch.

Several processes (DDP): a rank that runs out of memory in the forward pass splits its own
batch alone; its micro-batches but the last run under `no_sync`, so it still all-reduces
once per batch, as the others do, and the averaged gradient is the same as without the OOM.

Where a split would put the processes out of step, the run stops with advice instead
(oom_stop.py decides, and says why): any training batch under DeepSpeed (the engine owns
gradient accumulation), training and evaluation under FSDP and ZeRO-3 (every forward pass
gathers weights from all processes), and an OOM in the backward pass under DDP (DDP's
reducer is already counting that backward's gradients).

Not covered: OOM outside training_step (the optimizer step, gradient clipping, saving),
where there is no batch to shrink (the first step allocates the optimizer states, whatever
the batch); the run then stops with torch's error, which
`fitwhisper.cli` turns into advice.
"""

from __future__ import annotations

import contextlib
import gc
import logging
from typing import Any

import torch
from transformers import Seq2SeqTrainer

from fitwhisper.memory.oom_stop import no_fit_error, refusal
from fitwhisper.memory.predict import MemoryRequest

log = logging.getLogger(__name__)


def release_memory() -> None:
    """Drop unreachable tensors and hand the allocator's cached blocks back to the driver."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def is_oom(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or the RuntimeError some kernels (cuDNN, cuBLAS) raise."""
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


class BackoffTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer whose training and evaluation steps halve their batch on OOM.

    `memory_request` (MemoryRequest fields of this run) lets the error that ends a run
    which cannot fit even one clip name the predicted need and the `fitwhisper plan`
    command to run.
    """

    def __init__(
        self, *args: Any, memory_request: MemoryRequest | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        # Whisper's forward takes **kwargs, so Trainer assumes its loss is already normalised
        # over the accumulated batch (num_items_in_batch) and skips dividing by the
        # accumulation steps; Whisper ignores num_items_in_batch and returns a per-call token
        # mean, so the loss and gradients would come out accumulation-steps times too large.
        self.model_accepts_loss_kwargs = False
        self.memory_request = memory_request
        self.train_split = 1  # micro-batches per dataloader batch in training
        self.eval_split = 1  # chunks per batch in evaluation/generation
        self.backoff_events: list[dict[str, int]] = []  # what changed, for reports and tests
        self._forward_done = False
        self._loss_weight = 1.0

    # --- training -------------------------------------------------------------------------

    def training_step(self, model, inputs, num_items_in_batch=None):
        batch = batch_rows(inputs)
        total_tokens = _label_tokens(inputs)
        pending = _split(inputs, self.train_split)
        loss = None
        while pending:
            chunk = pending.pop(0)
            grads_were_empty = _grads_empty(model)
            self._forward_done = False
            try:
                # Several processes: only the last micro-batch's backward all-reduces, so a
                # rank that split after an OOM syncs as often as the others (else their
                # collectives go out of step and the job hangs until the timeout).
                with self.accelerator.no_sync(model) if pending else contextlib.nullcontext():
                    part = self._weighted_step(model, chunk, num_items_in_batch, total_tokens)
            except Exception as e:
                if not is_oom(e):
                    raise
                in_backward = self._forward_done
            else:
                loss = part if loss is None else loss + part
                continue
            # Out of the except block, so the traceback's tensors can be freed.
            refused = refusal(self, "training", model=model, in_backward=in_backward)
            if refused:
                release_memory()
                raise no_fit_error(self, "training", batch_rows(chunk), refused)
            if in_backward:
                if grads_were_empty:
                    model.zero_grad(set_to_none=True)
                else:
                    log.warning(
                        "out of memory in the backward pass of step %d: this step's gradient "
                        "keeps part of the failed micro-batch's",
                        self.state.global_step + 1,
                    )
            release_memory()
            self._back_off_training(batch, batch_rows(chunk))
            # Only the failed chunk is redone, cut to the new micro-batch size.
            size = min(-(-batch // self.train_split), -(-batch_rows(chunk) // 2))
            pending = split_rows(chunk, size) + pending
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self._forward_done = True  # an OOM from here on is in the backward pass
        if self._loss_weight != 1.0:
            if return_outputs:
                return out[0] * self._loss_weight, out[1]
            return out * self._loss_weight
        return out

    def _weighted_step(self, model, chunk, num_items_in_batch, total_tokens: int):
        """Trainer's step on `chunk`, its loss weighted by its share of the batch's label
        tokens: Whisper's loss is a token mean per call (it ignores num_items_in_batch), so
        the chunks' gradients then add up to the whole batch's."""
        n = _label_tokens(chunk)
        self._loss_weight = 1.0 if n == total_tokens else n / max(total_tokens, 1)
        try:
            return super().training_step(model, chunk, num_items_in_batch)
        finally:
            self._loss_weight = 1.0

    def _back_off_training(self, batch: int, failed: int) -> None:
        old_micro = -(-batch // self.train_split)
        if failed <= 1:
            raise no_fit_error(self, "training", failed)
        self.train_split *= 2
        new_micro = -(-batch // self.train_split)
        ga = self.args.gradient_accumulation_steps
        processes = max(self.args.world_size, 1)
        event = {
            "step": self.state.global_step + 1,
            "per_device_train_batch_size": new_micro,
            "gradient_accumulation_steps": ga * self.train_split,
            "effective_batch": batch * ga * processes,
        }
        self.backoff_events.append({"phase": "train", **event})  # type: ignore[dict-item]
        log.warning(
            "out of memory at step %d with per-device batch %d: now per-device batch %d x "
            "gradient accumulation %d (was %d x %d); effective batch %d unchanged; "
            "retrying the step",
            event["step"],
            old_micro,
            new_micro,
            event["gradient_accumulation_steps"],
            old_micro,
            ga * self.train_split // 2,
            event["effective_batch"],
        )

    # --- evaluation -----------------------------------------------------------------------

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        batch = batch_rows(inputs)
        while True:
            try:
                return self._split_prediction_step(
                    model, inputs, prediction_loss_only, ignore_keys, gen_kwargs
                )
            except Exception as e:
                if not is_oom(e):
                    raise
            # Out of the except block, so the traceback's tensors can be freed; generation
            # has no side effects, so the whole batch is redone in smaller chunks.
            release_memory()
            old = -(-batch // self.eval_split)
            if refused := refusal(self, "evaluation"):
                raise no_fit_error(self, "evaluation", old, refused)
            if old <= 1:
                raise no_fit_error(self, "evaluation", old)
            self.eval_split *= 2
            new = -(-batch // self.eval_split)
            self.backoff_events.append(
                {"phase": "eval", "step": self.state.global_step, "eval_batch_size": new}  # type: ignore[dict-item]
            )
            log.warning(
                "out of memory in evaluation with batch %d: generating in batches of %d",
                old,
                new,
            )

    def _split_prediction_step(self, model, inputs, prediction_loss_only, ignore_keys, gen_kwargs):
        step = self._autocast_prediction_step
        if self.eval_split == 1:
            return step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        parts = [
            step(model, c, prediction_loss_only, ignore_keys=ignore_keys, **dict(gen_kwargs))
            for c in _split(inputs, self.eval_split)
        ]
        sizes = [batch_rows(c) for c in _split(inputs, self.eval_split)]
        losses = [p[0] for p in parts]
        loss = None
        if all(x is not None for x in losses):
            # Trainer averages batch losses weighted by batch size; so do the chunks.
            loss = sum(x * n for x, n in zip(losses, sizes, strict=True)) / sum(sizes)
        return (
            loss,
            self._cat_padded([p[1] for p in parts]),
            self._cat_padded([p[2] for p in parts]),
        )

    def _autocast_prediction_step(self, *args, **kwargs):
        """Seq2SeqTrainer's step under the run's mixed precision: accelerate autocasts only
        `model.forward`, and generate() runs the encoder outside it, so in a bf16/fp16 run
        the encoder would generate in fp32 (half the speed on a GPU, twice the memory)."""
        with self.accelerator.autocast():
            return super().prediction_step(*args, **kwargs)

    def _cat_padded(self, tensors: list) -> torch.Tensor | None:
        if any(t is None for t in tensors):
            return None
        width = max(t.shape[-1] for t in tensors)
        return torch.cat([self._pad_tensors_to_max_len(t, width) for t in tensors])


# --- batches ------------------------------------------------------------------------------


def batch_rows(inputs: dict[str, Any]) -> int:
    """The batch's clips: the first dimension of its first batched tensor."""
    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.dim() > 0:
            return v.shape[0]
        if isinstance(v, tuple) and v:  # encoder_outputs=(hidden,) from the encoder cache
            return batch_rows({"hidden": v[0]})
    return 1


def _split(inputs: dict[str, Any], parts: int) -> list[dict[str, Any]]:
    """`inputs` cut along the batch into at most `parts` chunks (fewer when the batch is small)."""
    return split_rows(inputs, -(-batch_rows(inputs) // parts))


def split_rows(inputs: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """`inputs` cut along the batch into chunks of `size` (the last may be smaller)."""
    n = batch_rows(inputs)
    if size >= n:
        return [inputs]

    def cut(v, start: int):
        if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n:
            return v[start : start + size]
        if isinstance(v, tuple):  # encoder_outputs=(hidden,) from the encoder cache
            return tuple(cut(x, start) for x in v)
        return v

    return [{k: cut(v, start) for k, v in inputs.items()} for start in range(0, n, size)]


def _label_tokens(inputs: dict[str, Any]) -> int:
    labels = inputs.get("labels")
    if not isinstance(labels, torch.Tensor):
        return batch_rows(inputs)
    return int(labels.ne(-100).sum())


def _grads_empty(model: torch.nn.Module) -> bool:
    return all(p.grad is None for p in model.parameters() if p.requires_grad)
