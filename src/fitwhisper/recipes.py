"""Defaults that depend on the training method, chosen by measurement: one home for them.

A `train` option the user left alone takes the value the method's recipe gives; an option
given on the command line, in a config file or (from a library call) changed from its
dataclass default always wins. `train` applies the recipe once, in its run plan
(train/run_plan.py), which records which value applied and why; `tune` applies it before
its first trial, so the study's baseline is what `train` would run.

    full   learning rate 1e-5 (the dataclass default: the Hugging Face blog's, and the
           standard recipe's in bench/RESULTS-quality.md)
    LoRA   learning rate 1e-3 (also on 8-bit and 4-bit bases): adapters start at zero and
           hold a small share of the weights, and at 1e-5 they barely move

The measurements are in bench/RESULTS-quality.md (`bench/quality.py --recipes ...`).
"""

from __future__ import annotations

import dataclasses

from fitwhisper.config import ModelConfig, TrainConfig
from fitwhisper.method import method_of

LORA_LEARNING_RATE = 1e-3
FULL_LEARNING_RATE = TrainConfig.learning_rate
# The options a recipe decides when the user leaves them alone.
RECIPE_OPTIONS = ("learning_rate",)


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
    if not method_of(model_cfg).adapters:
        return train_cfg, {"learning_rate": f"full fine-tuning's default {FULL_LEARNING_RATE:g}"}
    reason = (
        f"LoRA's default {LORA_LEARNING_RATE:g} (no --learning_rate): adapters start at zero "
        "and barely move at full fine-tuning's 1e-5 (bench/RESULTS-quality.md)"
    )
    return dataclasses.replace(train_cfg, learning_rate=LORA_LEARNING_RATE), {
        "learning_rate": reason
    }
