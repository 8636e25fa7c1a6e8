"""Every `--flag` of the user's documents (../shared/seeds) parses in `fitwhisper train`,
written as the documents write it (`--fp16`, `--fp16=True`, `--base_model=openai/...`), and
the aliases land in the right options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fitwhisper.cli import build_parser

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"

# Flags of the documents that are not `train` options, each with the reason.
EXCLUDED = {
    # Inference (seed 003's whisper_lora_inference.py): the later `transcribe` command.
    "--model_path",
    "--audio_path",
    "--audio_list",
    "--output_file",
    "--return_timestamps",
    "--device",
}

# `--flag`, `--flag=value` or `--flag value` (a value is the next word unless it is a flag,
# a line continuation or the end of a code block).
_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z][\w-]*)(?:=([^\s`]+)|[ \t]+(?!--|\\|`|#)([^\s`]+))?")


def _seed_flags() -> list[tuple[str, str | None]]:
    if not SEEDS.is_dir():
        pytest.skip(f"the user's documents are not at {SEEDS}")
    found: dict[tuple[str, str | None], None] = {}
    for seed in sorted(SEEDS.glob("*.txt")):
        text = seed.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            # `tensorboard --logdir ...` is TensorBoard's own command line, not a training one;
            # `--logdir` parses anyway (an alias of --logging_dir).
            for m in _FLAG.finditer(line):
                flag, value = m.group(1), m.group(2) or m.group(3)
                found[(flag, value)] = None
    return list(found)


def test_every_training_flag_of_the_documents_parses() -> None:
    flags = _seed_flags()
    names = {f for f, _ in flags}
    # The documents' training command lines are all there (seeds 001 and 003).
    assert {"--model_name_or_path", "--base_model", "--train_file", "--use_wandb"} <= names
    parser = build_parser()
    train_flags = _train_parser(parser)._option_string_actions
    for flag, value in flags:
        if flag in EXCLUDED:
            continue
        if value is None:  # named in prose ("`--per_device_train_batch_size` (batch size)")
            assert flag in train_flags, f"{flag} (from the user's documents) is no train option"
            continue
        argv = ["train", f"{flag}={value}"]
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"`fitwhisper {' '.join(argv)}` (from the user's documents) does not parse")


def _train_parser(parser):
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["train"]


def test_aliases_and_document_spellings_fill_the_options() -> None:
    from fitwhisper.cli.flags import build_config
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig

    args = build_parser().parse_args(
        [
            "train",
            "--base_model=openai/whisper-medium",
            "--train_file", "data/train.json",
            "--validation_file", "data/validation.json",
            "--cache_dir", "hub-cache",
            "--use_wandb",
            "--wandb_project", "my-whisper-project",
            "--logdir", "tb",
            "--fp16=True",
            "--gradient_checkpointing", "false",
            "--resume_from_checkpoint", "runs/a/checkpoint-500",
            "--max_audio_len=25",
        ]
    )  # fmt: skip
    model = build_config(ModelConfig, args, {})
    data = build_config(DataConfig, args, {})
    train = build_config(TrainConfig, args, {})
    assert (model.model, model.cache_dir) == ("openai/whisper-medium", "hub-cache")
    assert (train.train_manifest, train.eval_manifest) == (
        "data/train.json",
        "data/validation.json",
    )
    assert (train.use_wandb, train.wandb_project, train.logging_dir) == (
        True,
        "my-whisper-project",
        "tb",
    )
    assert (train.fp16, train.gradient_checkpointing) == (True, False)
    assert train.resume == "runs/a/checkpoint-500"
    assert data.max_audio_len == 25.0
    # A bare --resume means the newest complete checkpoint; --model_name_or_path is --model.
    args = build_parser().parse_args(["train", "--resume", "--model_name_or_path", "m"])
    assert build_config(TrainConfig, args, {}).resume == "latest"
    assert build_config(ModelConfig, args, {}).model == "m"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--fp16=maybe"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--no-fp16=True"])
