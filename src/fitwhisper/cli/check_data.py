"""`fitwhisper check-data`: flags and the function that runs it."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "check-data",
        parents=[common],
        help="Check a manifest's audio and transcripts before training.",
        description="Check every row of a manifest: audio that is missing, undecodable, "
        "empty, silent, too short or too long; empty, undecodable or over-long transcripts; "
        "duplicates. Exits 0 only when the data is fit for training.",
    )
    p.add_argument(
        "manifest",
        metavar="MANIFEST",
        help="A .json list, .jsonl, .csv/.tsv, an audiofolder or a save_to_disk folder.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="Model whose tokenizer measures transcripts against --max_label_tokens (a hub id, "
        "folder, or offline/tiny.en). Without it, token lengths are not checked.",
    )
    # Help and defaults come from DataConfig, the same text `train --help` shows.
    from dataclasses import fields

    from fitwhisper.config import DataConfig

    data_fields = {f.name: f for f in fields(DataConfig)}
    for name, kind in (
        ("audio_column", str),
        ("text_column", str),
        ("language_column", str),
        ("min_audio_len", float),
        ("max_audio_len", float),
        ("max_label_tokens", int),
    ):
        f = data_fields[name]
        p.add_argument(f"--{name}", type=kind, default=f.default, help=f.metadata["help"])
    p.add_argument(
        "--report",
        metavar="FILE",
        default=None,
        help="Write one line per row (problems, duration, sample rate, channels) to FILE "
        "(.jsonl or .csv).",
    )
    p.add_argument("--limit", type=int, default=None, help="Check only the first N rows.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.config import DataConfig
    from fitwhisper.data.check import check_manifest
    from fitwhisper.data.manifest import load_manifest, select

    data_cfg = DataConfig(
        audio_column=args.audio_column,
        text_column=args.text_column,
        language_column=args.language_column,
        min_audio_len=args.min_audio_len,
        max_audio_len=args.max_audio_len,
        max_label_tokens=args.max_label_tokens,
    )
    manifest = load_manifest(args.manifest, **data_cfg.manifest_columns())
    if args.limit is not None:
        manifest.rows = select(manifest.rows, args.limit)
    tokenizer = None
    if args.model:
        from fitwhisper.models.resolve import load_processor

        tokenizer = load_processor(args.model).tokenizer
    else:
        log.info("No --model given: transcript lengths in tokens are not checked.")
    report = check_manifest(manifest, data_cfg, tokenizer=tokenizer)
    if args.report:
        log.info("Per-row report: %s", report.write(args.report))
    print(report.format_summary())
    bad = report.format_bad_rows(limit=50, report_path=args.report)
    if bad:
        print("\nrows with problems:\n" + bad)
    return 0 if report.ok else 1
