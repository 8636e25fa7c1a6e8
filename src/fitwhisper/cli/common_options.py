"""The output options every command takes, on the top-level parser and each subcommand's."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CommonOptions:
    """Output options every command takes."""

    verbose: int = field(
        default=0,
        metadata={
            "min": 0,
            "help": "More log output (-vv: debug).",
            "aliases": ["-v"],
            "count": True,
        },
    )
    quiet: bool = field(
        default=False,
        metadata={"help": "Only warnings and errors.", "aliases": ["-q"], "switch": True},
    )
    debug: bool = field(
        default=False,
        metadata={"help": "Show the full traceback for user errors too.", "switch": True},
    )
