"""Flags and config files come from the same dataclasses; flags beat the file, which beats
the defaults; unknown options in a file are named."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fitwhisper.cli.flags import add_options, build_config, load_config_file
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError

SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    for name, cls in SECTIONS.items():
        add_options(p, cls, name)
    return p


def test_flags_beat_file_beat_defaults(tmp_path: Path) -> None:
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(
        "model:\n  model: offline/base\n  language: zh\n"
        "train:\n  learning_rate: 3.0e-5\n  max_steps: 100\n"
        "gradient_checkpointing: true\n"  # flat keys work too
    )
    args = _parser().parse_args(["--max_steps", "7", "--no-gradient_checkpointing"])
    file_values = load_config_file(cfg_file, SECTIONS)
    model = build_config(ModelConfig, args, file_values["model"])
    train = build_config(TrainConfig, args, file_values["train"])
    assert (model.model, model.language) == ("offline/base", "zh")
    assert train.learning_rate == 3e-5  # from the file
    assert train.max_steps == 7  # the flag wins
    assert train.gradient_checkpointing is False
    assert train.per_device_train_batch_size == TrainConfig().per_device_train_batch_size


def test_choices_and_optional_values_parse() -> None:
    args = _parser().parse_args(["--lr_scheduler_type", "cosine", "--eval_steps", "none"])
    train = build_config(TrainConfig, args, {})
    assert train.lr_scheduler_type == "cosine" and train.eval_steps is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["--lr_scheduler_type", "sawtooth"])


def test_unknown_keys_in_a_config_file_are_all_named(tmp_path: Path) -> None:
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("learning_rte: 1\ntrain:\n  max_stpes: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config_file(cfg_file, SECTIONS)
    assert "learning_rte" in e.value.message and "max_stpes" in e.value.message


def test_every_field_has_help() -> None:
    help_text = _parser().format_help()
    for cls in SECTIONS.values():
        for name in cls.__dataclass_fields__:
            assert f"--{name}" in help_text
