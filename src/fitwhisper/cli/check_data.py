"""`fitwhisper check-data`: flags and the function that runs it."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_configs
from fitwhisper.config import DataConfig
from fitwhisper.option_ranges import COUNT_OR_ALL

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckDataOptions:
    """Which manifest, with which tokenizer, and where the per-row report goes."""

    manifest: str = field(
        default="",
        metadata={
            "path": "any",
            "help": "A .json list, .jsonl, .csv/.tsv, an audiofolder or a save_to_disk folder.",
            "positional": True,
        },
    )
    model: str | None = field(
        default=None,
        metadata={
            "path": "model",
            "help": "Model whose tokenizer measures transcripts against --max_label_tokens (a "
            "hub id, folder, or offline/tiny.en). Without it, token lengths are not checked.",
        },
    )
    report: str | None = field(
        default=None,
        metadata={
            "path": "new_file",
            "help": "Write one line per row (problems, duration, sample rate, channels) to FILE "
            "(.jsonl or .csv).",
            "metavar": "FILE",
        },
    )
    limit: int | None = field(
        default=None, metadata={**COUNT_OR_ALL, "help": "Check only the first N rows."}
    )


# Column names and limits: DataConfig's fields, the same text `train --help` shows.
DATA_FIELDS = (
    "audio_column",
    "text_column",
    "audio_dir",
    "language_column",
    "min_audio_len",
    "max_audio_len",
    "max_label_tokens",
)
OPTIONS = (Options(CheckDataOptions), Options(DataConfig, "data", only=DATA_FIELDS))


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "check-data",
        OPTIONS,
        run,
        help="Check a manifest's audio and transcripts before training.",
        description="Check every row of a manifest: audio that is missing, undecodable, "
        "empty, silent, too short or too long; empty, undecodable or over-long transcripts; "
        "duplicates. Exits 0 only when the data is fit for training.",
    )


def run(args: argparse.Namespace) -> int:
    """Check row after row, each result counted and written to --report as it comes: the
    memory a check needs does not grow with the rows (bench/data_scale.py measures it)."""
    import contextlib
    import itertools

    from fitwhisper.data.check import CheckTally, ReportWriter, checked_rows
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.output_guard import Output, check_outputs

    opts, data_cfg = build_configs(args, (CheckDataOptions, DataConfig))
    inputs = {"MANIFEST": opts.manifest, "--model": opts.model}
    check_outputs([Output("--report", opts.report, "file")], inputs)
    manifest = load_manifest(opts.manifest, **data_cfg.manifest_columns(), lazy=True)
    if opts.limit is not None:
        manifest.rows = itertools.islice(manifest.rows, max(0, opts.limit))
    tokenizer = None
    if opts.model:
        from fitwhisper.models.resolve import load_processor

        tokenizer = load_processor(opts.model).tokenizer
    else:
        log.info("No --model given: transcript lengths in tokens are not checked.")
    tally = CheckTally(str(manifest.path), manifest.format, labels_checked=tokenizer is not None)
    with ReportWriter(opts.report) if opts.report else contextlib.nullcontext() as writer:
        for result in checked_rows(manifest, data_cfg, tokenizer):
            tally.add(result)
            if writer is not None:
                writer.add(result)
    if opts.report:
        log.info("Per-row report: %s", opts.report)
    print(tally.format_summary())
    bad = tally.format_bad_rows(report_path=opts.report)
    if bad:
        print("\nrows with problems:\n" + bad)
    return 0 if tally.ok else 1
