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


def test_a_config_file_cannot_run_code(tmp_path: Path) -> None:
    # PyYAML's full loader would call os.system here; safe_load refuses the tag.
    touched = tmp_path / "touched"
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(f'learning_rate: !!python/object/apply:os.system ["touch {touched}"]\n')
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config_file(cfg_file, SECTIONS)
    assert not touched.exists()


def test_every_field_has_help() -> None:
    help_text = _parser().format_help()
    for cls in SECTIONS.values():
        for name in cls.__dataclass_fields__:
            assert f"--{name}" in help_text


def test_wrong_types_in_a_config_file_are_all_named_with_the_expected_type(
    tmp_path: Path,
) -> None:
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(
        "learning_rate: abc\nmax_steps: 1.5\nmodel:\n  use_lora: maybe\n"
        "train:\n  lr_scheduler_type: sawtooth\n  eval_steps: [1]\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config_file(cfg_file, SECTIONS)
    msg = e.value.message
    assert msg.startswith(f"config file {cfg_file} has values of the wrong type: ")
    assert "\n" not in msg  # one paragraph
    assert "learning_rate: expected a number, got 'abc'" in msg
    assert "max_steps: expected a whole number, got 1.5" in msg
    assert "use_lora: expected true or false, got 'maybe'" in msg
    assert "lr_scheduler_type: expected one of linear, cosine, constant, " in msg
    assert "eval_steps: expected a whole number, got [1]" in msg


def test_config_file_values_take_their_fields_types(tmp_path: Path) -> None:
    # YAML reads 1e-5 as text and 100.0 as a float: both are what the user meant.
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(
        "learning_rate: 1e-5\nmax_steps: 100.0\nweight_decay: 0\neval_steps: none\n"
        "language: 123\nlora_target_modules: q_proj, v_proj\n"
    )
    values = load_config_file(cfg_file, SECTIONS)
    train = build_config(TrainConfig, _parser().parse_args([]), values["train"])
    assert train.learning_rate == 1e-5 and isinstance(train.learning_rate, float)
    assert train.max_steps == 100 and isinstance(train.max_steps, int)
    assert train.weight_decay == 0.0 and isinstance(train.weight_decay, float)
    assert train.eval_steps is None
    assert values["model"]["language"] == "123"
    assert values["model"]["lora_target_modules"] == ["q_proj", "v_proj"]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["train", "--model", "offline/tiny.en", "--train_manifest", "m.jsonl",
             "--lora_r", "0", "--max_audio_len", "45", "--learning_rate", "-1"],
            ["--lora_r must be", "--max_audio_len must be", "--learning_rate must be"],
        ),
        (
            ["evaluate", "offline/tiny.en", "m.jsonl", "--output_dir", "m.jsonl",
             "--batch_size", "0"],
            ["--output_dir m.jsonl is a file", "--batch_size must be"],
        ),
    ],
)  # fmt: skip
def test_problems_in_every_option_group_are_reported_together(
    argv: list[str], expected: list[str], tmp_path: Path, monkeypatch, capsys
) -> None:
    """One command line with several mistakes hears of all of them at once, whichever
    dataclass each option comes from (build_configs)."""
    from fitwhisper.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"audio": "a.wav", "text": "x"}\n')
    assert main(argv) == 1
    message = capsys.readouterr().err.split("\n\nhint:")[0]
    assert all(e in message for e in expected), message
    assert "\n\n" not in message and "Traceback" not in message
