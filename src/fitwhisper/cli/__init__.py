"""The `fitwhisper` command: parses flags, calls the library, prints errors with hints.

This package is the only place that prints errors or exits. Each subcommand is a module
here with `add(sub, common)`, which declares its flags, and `run(args)`, which runs it and
returns the exit code. `COMMANDS` orders them in `fitwhisper --help`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from fitwhisper.cli import (
    check_data,
    demo,
    doctor,
    evaluate,
    export,
    import_ct2,
    merge,
    models,
    plan,
    train,
    transcribe,
)
from fitwhisper.errors import FitWhisperError
from fitwhisper.logs import setup_logging

log = logging.getLogger(__name__)

COMMANDS = [
    check_data,
    import_ct2,
    models,
    demo,
    train,
    evaluate,
    transcribe,
    merge,
    export,
    plan,
    doctor,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(-1 if args.quiet else args.verbose)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            return int(args.func(args) or 0)
        except Exception as e:
            user_error = _as_user_error(e)
            if user_error is e:
                raise
            raise user_error from e
    except FitWhisperError as e:
        if args.debug:
            raise
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"\nhint: {e.hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _as_user_error(e: Exception) -> Exception:
    """Known failures of the libraries below that the user can fix, as FitWhisperErrors."""
    if isinstance(e, FitWhisperError):
        return e
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(e, torch.OutOfMemoryError):
        from fitwhisper.errors import OutOfMemoryError

        return OutOfMemoryError(
            f"the GPU ran out of memory ({str(e).splitlines()[0]})",
            hint="lower --per_device_train_batch_size and raise --gradient_accumulation_steps "
            "by the same factor (the effective batch stays the same), add "
            "--gradient_checkpointing, or train LoRA instead of the full model",
        )
    return e


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help="More log output.")
    common.add_argument("-q", "--quiet", action="store_true", help="Only warnings and errors.")
    common.add_argument(
        "--debug", action="store_true", help="Show the full traceback for user errors too."
    )
    parser = argparse.ArgumentParser(
        prog="fitwhisper",
        description="Fine-tune Whisper speech recognition on your own audio and transcripts.",
        parents=[common],
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in COMMANDS:
        # Looked up at parse time so tests can replace a command's `run`.
        command.add(sub, common)
    return parser
