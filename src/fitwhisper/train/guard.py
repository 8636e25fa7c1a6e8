"""The divergence guard: a non-finite loss or gradient stops the run (or skips the update)
at the step it happens, naming the clips of that step, and no non-finite model is saved.

Trainer on its own hides divergence: its `logging_nan_inf_filter` logs the average of
earlier losses in place of a NaN one, and the NaN gradients then make every weight NaN,
which is saved, scored and exported. Here:

- `tagged` wraps the training dataset and collator so each batch carries its items'
  positions (`ITEMS_KEY`); `GuardMixin.training_step` takes them out before the forward
  pass and notes the loss of each micro-batch;
- `NonFiniteGuard.on_pre_optimizer_step` checks that loss and every gradient are finite
  (only the loss under fp16, whose gradient scaler handles overflowing gradients):
  `--on_nonfinite stop` raises `DivergenceError` before the optimizer touches the weights
  (so no checkpoint of this step is written and the last good one stays); `skip` drops the
  gradients (AdamW leaves parameters without one untouched), counts the step and goes on;
- `check_weights` refuses non-finite weights before a checkpoint, an evaluation, and at the
  end of training, before final/ is written.

Under DeepSpeed the engine steps inside the backward pass and keeps no `p.grad`, so the
gradient is judged by what the engine offers after its step: the global gradient norm, and
whether it applied the update (bf16 ZeRO-2 drops a step with non-finite gradients itself,
check_grad_overflow). The update is then already made; stopping still keeps every file of
the step from being written (`--on_nonfinite skip` is refused there, train/sharding.py).
Under ZeRO-3 each rank holds a partition of every weight (`ds_tensor`; the parameter itself
is empty), so `check_weights` reads the partitions: the rank that finds a NaN stops, and the
launcher stops the others.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import TrainerCallback

from fitwhisper.data.batching import ITEMS_KEY, ItemsOf
from fitwhisper.errors import DivergenceError

log = logging.getLogger(__name__)

_SHOWN_CLIPS = 8  # clips named in the message; the rest are counted


class _Tagged(ItemsOf):
    """A dataset whose items also carry their own position (for the collator to gather)."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.base[i], ITEMS_KEY: i}


class _TaggedCollator:
    """Collates with the run's collator and adds the items' positions as a tensor (split
    with the batch on OOM back-off, moved to the device with it)."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        items = [f.pop(ITEMS_KEY) for f in features if ITEMS_KEY in f]
        batch = self.collator(features)
        if len(items) == len(features):  # evaluation items carry no positions
            batch[ITEMS_KEY] = torch.tensor(items, dtype=torch.long)
        return batch


def tagged(dataset: Dataset, collator) -> tuple[Dataset, _TaggedCollator]:
    """The training dataset and collator, with each batch's item positions."""
    return _Tagged(dataset), _TaggedCollator(collator)


def clips_of(dataset: Dataset, items: list[int]) -> list[str]:
    """The clips behind training items: row id (and audio path when the id is not it);
    a packed window names each of its clips."""
    base = dataset
    while not hasattr(base, "rows") and hasattr(base, "base"):
        base = base.base  # _Tagged, WithDurations, EncoderCacheDataset
    rows = getattr(base, "rows", None)
    if rows is None:
        return [f"item {i}" for i in items]
    windows = getattr(base, "windows", None)
    picked = [r for i in items for r in (windows[i].rows if windows is not None else (i,))]
    out = []
    for r in picked:
        row = rows[r]
        path = row.audio if isinstance(row.audio, Path) else None
        out.append(f"{row.id} ({path})" if path is not None and str(path) != row.id else row.id)
    return out


class GuardMixin:
    """Put before BackoffTrainer: notes each micro-batch's items and loss for the guard
    (`self.nonfinite_guard`, set by the run's setup)."""

    nonfinite_guard: NonFiniteGuard | None = None

    def training_step(self, model, inputs, num_items_in_batch=None):
        items = inputs.pop(ITEMS_KEY, None)
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.nonfinite_guard is not None:
            # Under DeepSpeed `model` is the engine, which has just stepped at a boundary.
            engine = model if getattr(self, "is_deepspeed_enabled", False) else None
            self.nonfinite_guard.note(items, loss, engine)
        return loss


class NonFiniteGuard(TrainerCallback):
    """Stops or skips an optimizer step whose loss or gradients are not finite (see the
    module docstring); `skipped` counts the steps skipped."""

    def __init__(self, dataset: Dataset, on_nonfinite: str = "stop") -> None:
        self.dataset = dataset
        self.on_nonfinite = on_nonfinite
        self.skipped = 0
        self._items: list[int] = []
        self._losses: list[torch.Tensor] = []
        self._engine = None  # the DeepSpeed engine, once a step under it is noted

    def note(self, items: torch.Tensor | None, loss: torch.Tensor | None, engine=None) -> None:
        self._engine = engine
        if items is not None:
            self._items += [int(i) for i in items.tolist()]
        if loss is not None:
            self._losses.append(loss.detach())

    def on_train_begin(self, args, state, control, **kwargs):
        if args.deepspeed:
            log.info(
                "divergence guard under DeepSpeed: watches each loss and, %s; weights before "
                "each save, evaluation and final/ (ZeRO-3: each rank its own partition)",
                "under fp16, nothing of the gradients (its loss scaler skips such steps)"
                if args.fp16
                else "after each step, DeepSpeed's global gradient norm and "
                "skipped update (the update is made already: the run stops before the step "
                "saves anything)",
            )

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        items, losses = self._items, self._losses
        self._items, self._losses = [], []
        bad_loss = bool(losses) and not bool(torch.isfinite(torch.stack(losses)).all())
        # fp16's gradient scaler expects Inf gradients now and then (its scale is too high):
        # it skips that step and lowers the scale itself, so only the loss is judged there.
        if args.fp16:
            grads_ok = True
        elif self._engine is not None:
            grads_ok = _deepspeed_step_finite(self._engine)
        else:
            grads_ok = model is None or _finite(_grads(model))
        if not bad_loss and grads_ok:
            return
        step = state.global_step + 1
        what = "loss" if bad_loss else "gradient"
        clips = clips_of(self.dataset, items)
        named = ", ".join(clips[:_SHOWN_CLIPS])
        if len(clips) > _SHOWN_CLIPS:
            named += f" and {len(clips) - _SHOWN_CLIPS} more"
        if self.on_nonfinite == "skip":
            for p in model.parameters():
                p.grad = None  # the optimizer leaves parameters without a gradient as they are
            self.skipped += 1
            log.warning("step %d: non-finite %s, update skipped (clips: %s)", step, what, named)
            return
        raise DivergenceError(
            f"training diverged at step {step}: the {what} is not finite (NaN or Inf); "
            f"the step's clips: {named or 'unknown'}. Nothing of this step was saved"
            + (f"; the last good checkpoint is {last}" if (last := _last_checkpoint(args)) else ""),
            hint="run `fitwhisper check-data` on the manifest (NaN or Inf samples), lower "
            "--learning_rate, or pass --on_nonfinite skip to drop such steps (counted)",
        )

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # DefaultFlowCallback has decided by now whether this step saves or evaluates.
        if model is not None and (control.should_save or control.should_evaluate):
            check_weights(model, f"step {state.global_step}")

    on_epoch_end = on_step_end  # --save_strategy / --eval_strategy epoch decide here

    def on_train_end(self, args, state, control, model=None, **kwargs):
        # Last, after load_best_model_at_end: the model `train` saves as final/ next.
        if model is not None:
            check_weights(model, "the end of training")
        if self.skipped:
            log.warning(
                "%d optimizer steps skipped for a non-finite loss or gradient", self.skipped
            )


def check_weights(model: torch.nn.Module, where: str) -> None:
    """Raise DivergenceError when any weight of `model` is NaN or Inf (one pass, one sync).

    Raises:
        DivergenceError: naming `where` (a step, or final/) and the first bad parameter.
    """
    # ZeRO-3 leaves each parameter empty and this rank's partition in `ds_tensor`.
    params = [(n, getattr(p, "ds_tensor", p)) for n, p in model.named_parameters()]
    params = [(n, p) for n, p in params if p.is_floating_point()]
    if _finite([p for _, p in params]):
        return
    bad = next(n for n, p in params if not bool(torch.isfinite(p).all()))
    raise DivergenceError(
        f"the model's weights are not finite at {where} (first: {bad}); it is not saved, "
        "scored or exported",
        hint="lower --learning_rate, run `fitwhisper check-data` on the manifest, or resume "
        "from an earlier checkpoint",
    )


def _deepspeed_step_finite(engine) -> bool:
    """Whether the DeepSpeed engine's last step saw finite gradients: an update it did not
    apply (outside fp16, only for non-finite gradients) or a NaN/Inf global norm says no."""
    norm = engine.get_global_grad_norm()  # None before the first step; float or tensor
    return engine.was_step_applied() and (norm is None or math.isfinite(float(norm)))


def _grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def _finite(tensors: list[torch.Tensor]) -> bool:
    tensors = [t.detach() for t in tensors if t.numel()]  # a ZeRO-3 partition may be empty
    if not tensors:
        return True
    # The largest magnitude is finite exactly when every element is (NaN and Inf carry
    # through a max, and a max cannot overflow as a sum can); torch's foreach norm reads each
    # tensor once, per device, and syncs once: 1.5x faster than isfinite().all() per tensor
    # on 49M CPU parameters, and this runs every optimizer step.
    largest = torch.nn.utils.get_total_norm(
        tensors, norm_type=float("inf"), error_if_nonfinite=False
    )
    return bool(torch.isfinite(largest))


def _last_checkpoint(args) -> Path | None:
    from fitwhisper.train.checkpoints import checkpoints, is_complete

    return next((c for c in reversed(checkpoints(args.output_dir)) if is_complete(c)), None)
