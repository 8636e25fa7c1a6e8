"""Activation checkpointing under either of its transformers 5 names.

transformers renamed gradient checkpointing to activation checkpointing during 5.x (5.23 has
both, the old one deprecated with a FutureWarning; 5.17, which a locked GPU image ships, has
only the old one). Every use goes through here so both work and neither warns.
"""

from __future__ import annotations

import dataclasses

import torch


def _new_names() -> bool:
    from transformers import Seq2SeqTrainingArguments

    fields = {f.name for f in dataclasses.fields(Seq2SeqTrainingArguments)}
    return "activation_checkpointing" in fields


def training_argument(on: bool) -> dict[str, bool]:
    """The keyword of Seq2SeqTrainingArguments that turns checkpointing on or off."""
    name = "activation_checkpointing" if _new_names() else "gradient_checkpointing"
    return {name: on}


def is_on(training_args: object) -> bool:
    """Whether Trainer's arguments (or any object with either attribute) checkpoint."""
    return bool(
        getattr(training_args, "activation_checkpointing", False)
        or getattr(training_args, "gradient_checkpointing", False)
    )


def enable(model: torch.nn.Module) -> None:
    """Non-reentrant checkpointing of each layer, as Trainer turns it on."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def disable(model: torch.nn.Module) -> None:
    if hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()
