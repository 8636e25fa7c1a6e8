"""The `fitwhisper` command: parses flags, calls the library, prints errors with hints.

This package is the only place that prints errors or exits, and the only one that knows
argparse. Each subcommand is a module here with `OPTIONS` (the option dataclasses its flags
come from, through `flags.add_options`), `add(sub, common)`, which declares the command,
and `run(args)`, which builds the typed options, runs the library and returns the exit code.
`COMMANDS` orders them in `fitwhisper --help`.

- `flags`: dataclass fields to flags, `--config` YAML files, flags back to dataclasses
- `common_options`: the output options every command takes (`-v`, `-q`, `--debug`)
- one module per command: check_data, shard, import_ct2, models, demo, train, tune, evaluate,
  transcribe, merge, export, plan, doctor, report

Building the parser imports no heavy library (torch, transformers): `--help` and bad flags
answer at once; each `run` imports what it needs.
"""

from __future__ import annotations

import argparse
import logging
import os
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
    report,
    shard,
    train,
    transcribe,
    tune,
)
from fitwhisper.cli.common_options import CommonOptions
from fitwhisper.cli.flags import add_options, build_config
from fitwhisper.errors import FitWhisperError, OutOfMemoryError

log = logging.getLogger(__name__)


COMMANDS = [
    check_data,
    shard,
    import_ct2,
    models,
    demo,
    train,
    tune,
    evaluate,
    transcribe,
    merge,
    export,
    plan,
    doctor,
    report,
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code (under a launcher the process
    ends here instead, ranks.end_process)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    common = build_config(CommonOptions, args)
    from fitwhisper.logs import setup_logging

    setup_logging(-1 if common.quiet else common.verbose)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    from fitwhisper.train import ranks

    return ranks.end_process(_run(args, common))


def _run(args: argparse.Namespace, common: CommonOptions) -> int:
    """The command's exit code; a user's error is printed as one paragraph."""
    try:
        try:
            return int(args.func(args) or 0)
        except Exception as e:
            user_error = _as_user_error(e, training=args.func in (train.run, tune.run))
            if user_error is e:
                raise
            raise user_error from e
    except FitWhisperError as e:
        from fitwhisper.safe_text import terminal_text

        if common.debug:
            raise
        rank = os.environ.get("RANK", "0")
        if rank not in ("", "0") and not isinstance(e, OutOfMemoryError):
            return 1  # several processes (torchrun): the main one prints the message
        # Out of memory happens to one process (the main one may be fine): it says which.
        where = f" (rank {rank})" if rank not in ("", "0") else ""
        # File names and texts from the user's data, shown as escapes where they could
        # move the cursor or reorder the line (fitwhisper.safe_text).
        print(f"error{where}: {terminal_text(e.message)}", file=sys.stderr)
        if e.hint:
            print(f"\nhint: {terminal_text(e.hint)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _as_user_error(e: Exception, training: bool = False) -> Exception:
    """Known failures of the libraries below that the user can fix, as FitWhisperErrors."""
    if isinstance(e, FitWhisperError):
        return e
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(e, torch.OutOfMemoryError):
        return OutOfMemoryError(
            f"the GPU ran out of memory ({str(e).splitlines()[0]})",
            hint="lower --per_device_train_batch_size and raise --gradient_accumulation_steps "
            "by the same factor (the effective batch stays the same), add "
            "--gradient_checkpointing, or train LoRA instead of the full model",
        )
    from fitwhisper.paths import as_storage_error

    return as_storage_error(e, training=training) or e


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_options(common, CommonOptions)
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
