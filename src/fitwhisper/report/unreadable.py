"""The files a report could not read, named instead of silently left out.

`collecting()` gathers, for one page, every file that exists but could not be read (bad
JSON, YAML, CSV, text that is not UTF-8, no permission); `note(path, why)` adds one.
Files a run did not write are absent, not unreadable: they are not named.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from pathlib import Path

_FOUND: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "unreadable", default=None
)


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """A list that fills with "PATH (why)" for each file noted inside the block."""
    found: list[str] = []
    token = _FOUND.set(found)
    try:
        yield found
    finally:
        _FOUND.reset(token)


def note(path: str | Path, why: object) -> None:
    found = _FOUND.get()
    entry = f"{path} ({why})"
    if found is not None and entry not in found:
        found.append(entry)
