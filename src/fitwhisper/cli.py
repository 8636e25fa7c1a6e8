"""The `fitwhisper` command: parses flags, calls the library, prints errors with hints.

This is the only module that prints errors or exits. Each subcommand has an `_add_*`
function that declares its flags and a `_cmd_*` function that runs it and returns the
exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from fitwhisper.errors import FitWhisperError
from fitwhisper.logs import setup_logging

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(-1 if args.quiet else args.verbose)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
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
    adders: list[Callable[[argparse._SubParsersAction, argparse.ArgumentParser], None]] = [
        _add_check_data,
        _add_import_ct2,
        _add_models,
        _add_demo,
    ]
    for add in adders:
        add(sub, common)
    return parser


# --- check-data -------------------------------------------------------------------------


def _add_check_data(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "check-data",
        parents=[common],
        help="Check a manifest's audio and transcripts before training.",
        description="Check every row of a manifest: audio that is missing, undecodable, "
        "empty, silent, too short or too long; empty, undecodable or over-long transcripts; "
        "duplicates. Exits 0 only when the data is fit for training.",
    )
    p.set_defaults(func=_cmd_check_data)


def _cmd_check_data(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- import-ct2 -------------------------------------------------------------------------


def _add_import_ct2(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import-ct2",
        parents=[common],
        help="Convert a CTranslate2/faster-whisper model folder into a transformers checkpoint.",
    )
    p.set_defaults(func=_cmd_import_ct2)


def _cmd_import_ct2(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- models -----------------------------------------------------------------------------


def _add_models(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "models",
        parents=[common],
        help="List the models fitwhisper knows, and which are available offline.",
    )
    p.set_defaults(func=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    raise NotImplementedError


# --- demo -------------------------------------------------------------------------------


def _add_demo(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="Fine-tune a real Whisper model on generated speech, on this CPU, in minutes.",
        description="Makes a small speech dataset offline (invented words spoken by an offline "
        "voice), scores the real offline/tiny.en model on held-out sentences, fine-tunes it, "
        "scores it again on the same clips, and transcribes one of them. Needs no data or "
        "model of yours and no network.",
    )
    p.add_argument(
        "--output_dir", default="demo-run", help="Where everything goes (default: demo-run)."
    )
    p.add_argument(
        "--num_train_epochs", type=float, default=4.0, help="Passes over the training clips."
    )
    p.add_argument("--learning_rate", type=float, default=1e-4, help="Peak learning rate.")
    p.add_argument("--seed", type=int, default=0, help="Seed for the data and the training.")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from fitwhisper.demo import run_demo

    r = run_demo(
        args.output_dir,
        num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate,
        seed=args.seed,
    )
    print(
        f"""
fitwhisper demo: offline/tiny.en fine-tuned on {r.n_train} generated clips
  WER on {r.n_eval} held-out clips (never trained on):
    before fine-tuning  {100 * r.wer_before:5.1f}%
    after fine-tuning   {100 * r.wer_after:5.1f}%
  transcript of {r.sample_file.name}:
    reference   {r.sample_reference}
    fine-tuned  {r.sample_transcript}
  fine-tuned model    {r.final_dir}  (loads with from_pretrained)
  predictions         {r.out_dir / "eval-zero-shot"}, {r.out_dir / "run" / "eval"}
  TensorBoard logs    {r.out_dir / "run" / "logs"}
  took {r.seconds / 60:.1f} min"""
    )
    return 0
