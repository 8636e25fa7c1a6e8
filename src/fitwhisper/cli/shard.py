"""`fitwhisper shard`: flags and the function that runs it."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.config import DataConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardOptions:
    """What to shard, where to, and how."""

    source: str = field(
        default="",
        metadata={
            "path": "any",
            "help": "Any data source: a manifest (JSON, JSONL, NeMo JSONL, CSV/TSV, "
            "audiofolder, save_to_disk), tar shards (a .tar, a glob, shards-{000..099}.tar, "
            "pipe:CMD, a URL) or a Hub dataset (hf://ORG/NAME:CONFIG@SPLIT, or a local folder "
            "in the Hub's layout).",
            "positional": True,
            "metavar": "SOURCE",
        },
    )
    out: str = field(
        default="",
        metadata={
            "path": "new_folder",
            "help": "Folder for the shards, index.jsonl and shards.json.",
            "positional": True,
            "metavar": "OUT",
        },
    )
    shard_size_mb: float = field(
        default=256.0,
        metadata={
            "min": 0.001,
            "help": "About this many MB of audio per shard. Make at least as many shards as "
            "processes times data-loader workers will read them (e.g. 4 GPUs x 4 workers: 16 "
            "or more), so that each reads whole shards of its own.",
        },
    )
    sort_by_duration: bool = field(
        default=False,
        metadata={
            "switch": True,
            "help": "Order the clips of each shard by duration (batches of like lengths).",
        },
    )
    force: bool = field(
        default=False,
        metadata={"switch": True, "help": "Replace OUT when it holds shards written before."},
    )


OPTIONS = (
    Options(ShardOptions),
    Options(
        DataConfig, "data", only=("audio_column", "text_column", "language_column", "audio_dir")
    ),
)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "shard",
        OPTIONS,
        run,
        help="Write any data source as tar shards with an index (hours and lengths known "
        "without decoding).",
        description="Reads SOURCE row by row and writes OUT/shard-NNNNNN.tar (WebDataset "
        "layout: per clip its audio file as it was, a .txt transcript and a .json with id, "
        "language and duration), OUT/index.jsonl (every clip's shard, offset, duration, "
        "language and transcript) and OUT/shards.json (clips, hours, durations, languages, "
        "what was left out). Pass OUT to train, evaluate or check-data as data.",
    )


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.data.sources.write import write_shards
    from fitwhisper.output_guard import Output, check_outputs, claim_folder, replace_folder

    opts, data_cfg = build_config(ShardOptions, args), build_config(DataConfig, args)
    # OUT is new or empty; --force replaces only shards fitwhisper wrote (output_guard.py).
    check_outputs(
        [Output("OUT", opts.out, "new_folder", replace=opts.force)], {"SOURCE": opts.source}
    )
    manifest = load_manifest(opts.source, **data_cfg.manifest_columns())
    out = Path(opts.out)
    if opts.force:
        replace_folder(out)
    claim_folder(out, "shard")
    summary = write_shards(
        manifest,
        out,
        shard_mb=opts.shard_size_mb,
        sort_by_duration=opts.sort_by_duration,
        source=opts.source,
    )
    print(summary.describe())
    return 0
