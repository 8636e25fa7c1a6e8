"""`fitwhisper report`: flags (from `ReportArgs`) and the function that runs it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config


@dataclass(frozen=True)
class ReportArgs:
    """The folder (or two) to report on and where the page goes."""

    folder: str = field(
        metadata={
            "path": "folder",
            "help": "A run folder (`train --output_dir`) or an evaluation folder "
            "(`evaluate --output_dir`).",
            "positional": True,
            "metavar": "RUN_DIR",
        }
    )
    other: str | None = field(
        default=None,
        metadata={
            "path": "folder",
            "help": "A second run or evaluation folder: the page puts the two side by side, "
            "clip by clip (differences are OTHER_DIR minus RUN_DIR).",
            "positional": True,
            "nargs": "?",
            "metavar": "OTHER_DIR",
        },
    )
    output: str | None = field(
        default=None,
        metadata={
            "path": "new_file",
            "help": "The HTML file to write (default: RUN_DIR/report.html, or "
            "RUN_DIR/compare-OTHER.html for two folders).",
        },
    )
    embed_audio: bool = field(
        default=False,
        metadata={
            "help": "Put each clip's audio inside the page (base64) instead of linking the "
            "file by its path relative to the page: one file to send, many times larger.",
            "switch": True,
        },
    )


OPTIONS = (Options(ReportArgs),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "report",
        OPTIONS,
        run,
        help="Write one HTML page of a run or an evaluation, or of two side by side.",
        description="Reads what a run or evaluation folder holds (curves, memory against the "
        "plan, options, data report, before/after accuracy with the paired-bootstrap "
        "interval, every scored clip with its alignment and audio) into one self-contained "
        "HTML file that opens from disk with no network. `train` and `evaluate --output_dir` "
        "write it at their end; run this to write it again, to embed the audio, or to "
        "compare two folders.",
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.report import check_report_output, write_report

    a = build_config(ReportArgs, args)
    # The output guard, before anything is read (write_report asks it again).
    check_report_output(a.folder, a.other, a.output)
    unreadable: list[str] = []
    path = write_report(
        a.folder, a.other, output=a.output, embed_audio=a.embed_audio, unreadable=unreadable
    )
    print(f"report: {path}")
    if unreadable:  # as transcribe does for bad inputs: the rest written, each named, exit 1
        print(
            f"could not read {len(unreadable)} file(s); the page leaves them out:", file=sys.stderr
        )
        print("\n".join(f"  {entry}" for entry in unreadable), file=sys.stderr)
        return 1
    return 0
