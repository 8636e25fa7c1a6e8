"""Defaults that depend on the training method or the data, chosen by measurement, applied
in one place. Each method's own values are on its object (method.py).

A `train` option the user left alone takes the value the method's recipe gives; an option
given on the command line, in a config file or (from a library call) changed from its
dataclass default always wins. `train` applies the recipe once, in its run plan
(train/run_plan.py), which records which value applied and why; `tune` applies it before
its first trial, so the study's baseline is what `train` would run.

    full   learning rate 1e-5 (the dataclass default: the Hugging Face blog's, and the
           standard recipe's in bench/RESULTS-quality.md)
    LoRA   learning rate 1e-3 (also on 8-bit and 4-bit bases): adapters start at zero and
           hold a small share of the weights, and at 1e-5 they barely move

And one that depends on the amount of data, applied once the training rows are checked:

    epochs 3, or more on a small set, so the run makes at least MIN_OPTIMIZER_STEPS
           optimizer steps counted from the rows (at most MAX_EPOCHS): on 10 speakers' 88
           clips 12 epochs scored 2.9 points better than 3 on unseen speakers; on 40
           speakers' 337 clips (129 counted steps in 3 epochs) 6 epochs were no better.
           Counted from the rows, not the batches: the mixed input's grouped batches and
           windows of several clips make the Trainer's count 10-20% lower

The measurements are in bench/RESULTS-quality.md (`bench/quality.py --recipes ...`).
"""

from __future__ import annotations

import dataclasses
import math

from fitwhisper.config import ModelConfig, TrainConfig
from fitwhisper.method import ADAPTER_LEARNING_RATE, method_of

LORA_LEARNING_RATE = ADAPTER_LEARNING_RATE  # each method holds its own (method.py)
FULL_LEARNING_RATE = TrainConfig.learning_rate
# Small sets train more epochs, to at least this many optimizer steps, in whole epochs.
MIN_OPTIMIZER_STEPS = 128
MAX_EPOCHS = 12  # the most measured (bench/RESULTS-quality.md)
# The options a recipe decides when the user leaves them alone.
RECIPE_OPTIONS = ("learning_rate", "num_train_epochs")


def options_given(cfgs, explicit: set[str] | None) -> set[str]:
    """The options the user chose: `explicit` (the flags and config-file keys) when known,
    else (a library call) the fields of `cfgs` that differ from their dataclass defaults.
    The one home of this rule: the memory plan and the recipe both read it."""
    if explicit is not None:
        return set(explicit)
    chosen: set[str] = set()
    for cfg in cfgs:
        defaults = dataclasses.asdict(type(cfg)())
        chosen |= {k for k, v in dataclasses.asdict(cfg).items() if v != defaults[k]}
    return chosen


def with_recipe(
    model_cfg: ModelConfig, train_cfg: TrainConfig, explicit: set[str] | None
) -> tuple[TrainConfig, dict[str, str]]:
    """`train_cfg` with the method's defaults for the options the user left alone, and the
    reason for each (for the run plan's `why`)."""
    if "learning_rate" in options_given((train_cfg,), explicit):
        return train_cfg, {"learning_rate": "--learning_rate as given"}
    method = method_of(model_cfg)
    if method.learning_rate is None:
        return train_cfg, {"learning_rate": f"full fine-tuning's default {FULL_LEARNING_RATE:g}"}
    return dataclasses.replace(train_cfg, learning_rate=method.learning_rate), {
        "learning_rate": method.learning_rate_reason
    }


def steps_per_epoch(n_rows: int, effective_batch: int) -> int:
    """Optimizer steps in one pass over `n_rows`, as Trainer counts them: ceil(ceil(rows /
    (batch x processes)) / accumulation), which equals ceil(rows / effective batch)."""
    return max(1, -(-n_rows // effective_batch))


def with_epochs_for_data(
    train_cfg: TrainConfig, n_rows: int, processes: int, explicit: set[str] | None
) -> tuple[TrainConfig, str]:
    """`train_cfg` with the epochs its training rows call for (the module's rule) unless
    the user chose --num_train_epochs or --max_steps; and the reason."""
    given = options_given((train_cfg,), explicit)
    if train_cfg.max_steps > 0:
        return train_cfg, "--max_steps as given"
    if "num_train_epochs" in given:
        return train_cfg, "--num_train_epochs as given"
    effective = (
        train_cfg.per_device_train_batch_size * train_cfg.gradient_accumulation_steps * processes
    )
    per_epoch = steps_per_epoch(n_rows, effective)
    base = train_cfg.num_train_epochs
    epochs = max(base, min(MAX_EPOCHS, math.ceil(MIN_OPTIMIZER_STEPS / per_epoch)))
    steps = f"{n_rows} rows / effective batch {effective} = {per_epoch} step(s) an epoch"
    if epochs == base:
        return train_cfg, f"the default {base:g}: {steps}, {math.ceil(per_epoch * base)} in all"
    reason = (
        f"{epochs:g}, not {base:g}: {steps}; a small set trains at least "
        f"{MIN_OPTIMIZER_STEPS} steps so counted (at most {MAX_EPOCHS} epochs), which scored "
        "better on unseen speakers (bench/RESULTS-quality.md)"
    )
    return dataclasses.replace(train_cfg, num_train_epochs=float(epochs)), reason
