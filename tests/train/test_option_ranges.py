"""Numbers out of range are option problems, all listed in one ConfigError before anything
loads (no model, no manifest, no run folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.cli import main
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.train import validate


def test_out_of_range_numbers_are_all_reported_at_once(tmp_path: Path) -> None:
    cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        train_manifest="t.jsonl",
        learning_rate=-1e-5,
        weight_decay=-0.1,
        max_steps=0,
        num_train_epochs=-2.0,
        logging_steps=0,
        save_steps=0,
        eval_steps=0,
        save_total_limit=0,
        dataloader_num_workers=-1,
    )
    data = DataConfig(min_audio_len=-1.0, max_label_tokens=0, max_train_samples=0)
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(model="no/such-model"), data, cfg)
    msg = e.value.message
    for expected in (
        "--learning_rate must be a positive number, got -1e-05",
        "--weight_decay must be 0 or more, got -0.1",
        "--max_steps must be at least 1, or -1 to train by epochs, got 0",
        "--num_train_epochs must be 0 or more, got -2.0",
        "--logging_steps must be at least 1, got 0",
        "--save_steps must be at least 1, got 0",
        "--eval_steps must be at least 1, got 0",
        "--save_total_limit must be at least 1, got 0",
        "--dataloader_num_workers must be in [0, 1024] (a count of processes or threads), got -1",
        "--min_audio_len must be 0 or more, got -1.0",
        "--max_label_tokens must be in [1, 448] (Whisper's decoder holds 448 tokens), got 0",
        "--max_train_samples must be at least 1 (or none for all), got 0",
    ):
        assert expected in msg
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("lr", [0.0, float("nan"), float("inf")])
def test_a_learning_rate_must_be_a_positive_number(lr: float, tmp_path: Path) -> None:
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), train_manifest="t.jsonl", learning_rate=lr)
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(model="no/such-model"), DataConfig(), cfg)
    assert f"--learning_rate must be a positive number, got {lr}" in e.value.message


def test_the_defaults_and_max_steps_minus_one_pass() -> None:
    validate(ModelConfig(), DataConfig(), TrainConfig(train_manifest="t.jsonl", max_steps=-1))


def test_cli_max_steps_zero_exits_1_naming_it(tmp_path: Path, capsys) -> None:
    code = main(["train", "--model", "no/such-model", "--train_manifest", "t.jsonl",
                 "--output_dir", str(tmp_path / "run"), "--max_steps", "0"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "--max_steps must be at least 1, or -1 to train by epochs, got 0" in err
    assert "Traceback" not in err


def test_a_fifo_train_manifest_is_an_option_problem_unread(tmp_path: Path, capsys) -> None:
    import os

    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    run = str(tmp_path / "run")
    code = main(["train", "--model", "no/such-model", "--train_manifest", str(fifo),
                 "--eval_manifest", "/dev/zero", "--output_dir", run])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert f"--train_manifest {fifo} is a FIFO (named pipe), not a manifest file or folder" in err
    assert "--eval_manifest /dev/zero is a character device, not a manifest file or folder" in err
