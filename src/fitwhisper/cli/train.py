"""`fitwhisper train`: flags and the function that runs it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fitwhisper.cli.flags import (
    Options,
    add_command,
    build_config,
    build_configs,
    load_config_file,
)
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig


@dataclass(frozen=True)
class ConfigFile:
    """Options from a file."""

    config: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "YAML file of options (flags override it).",
            "metavar": "FILE",
        },
    )


# The sections of a config file and of the run record (RUN/fitwhisper.yaml).
SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
OPTIONS = (Options(ConfigFile), *(Options(cls, name) for name, cls in SECTIONS.items()))


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "train",
        OPTIONS,
        run,
        help="Fine-tune a Whisper model on a manifest of audio and transcripts.",
        description="Checks every row of the data first, then fine-tunes with Seq2SeqTrainer "
        "and scores the result by generation (WER, or CER for Chinese). Options come from "
        "--config FILE (YAML, flat or in model:/data:/train: sections, e.g. a run's "
        "fitwhisper.yaml) and from flags, which win.",
    )


def options_from(
    args: argparse.Namespace,
    sections: dict[str, type],
    also: Callable[[dict[str, Any]], list[str]] | None = None,
) -> tuple[list, set[str]]:
    """One config object per section, from --config FILE and the flags (which win), and the
    names of the options the user gave, for --plan and --auto_fit: flags absent from the
    command line are absent from args (argparse.SUPPRESS). Every section's problems, and
    those `also` finds in the sections that built ({name: config}), are reported together in
    one ConfigError."""
    config_file = build_config(ConfigFile, args).config
    from_file = load_config_file(config_file, sections) if config_file else {}
    names = list(sections)

    def more(built: list) -> list[str]:
        ok = {n: b for n, b in zip(names, built, strict=True) if b is not None}
        return also(ok) if also is not None else []

    configs = build_configs(
        args, list(sections.values()), [from_file.get(n, {}) for n in names], also=more
    )
    explicit = set(vars(args)) | {k for part in from_file.values() for k in part}
    return configs, explicit


def run(args: argparse.Namespace) -> int:
    from fitwhisper.train import train

    (model_cfg, data_cfg, train_cfg), explicit = options_from(args, SECTIONS)
    r = train(model_cfg, data_cfg, train_cfg, explicit=explicit)
    from fitwhisper.train import ranks

    ranks.finish()
    if not ranks.is_main():
        return 0  # several processes: the main one reports
    scores = ", ".join(f"{_metric_name(k)} {100 * v:.2f}%" for k, v in r.eval_metrics.items())
    print(
        f"trained {r.global_step} steps on {r.train_rows} clips"
        + (
            f" ({r.skipped_rows} rows skipped, see {r.output_dir / 'data_report.json'})"
            if r.skipped_rows
            else ""
        )
    )
    if r.skipped_steps:
        print(f"{r.skipped_steps} steps skipped: non-finite loss or gradient (--on_nonfinite skip)")
    if r.resumed_from:
        print(f"resumed from {r.resumed_from}")
    if r.best_checkpoint:
        print(f"best checkpoint: {r.best_checkpoint} (saved as the model)")
    if scores:
        print(f"held-out {r.eval_rows} clips: {scores}  (per clip: {r.output_dir / 'eval'})")
    print(f"model: {r.final_dir}")
    return 0


def _metric_name(key: str) -> str:
    """wer -> WER, short_window_cer -> CER on the short window, script_share -> SCRIPT_SHARE."""
    if key.startswith("short_window_"):
        return f"{key.removeprefix('short_window_').upper()} on the short window"
    return key.upper()
