"""The guard against a hallucination loop: Whisper writing the same text window after window
("you", "Thank you.", ".") where the audio holds none of it. Consecutive segments whose
normalised text is the same are kept up to `MAX_REPEATS` times; the rest are dropped and
counted, whichever engine wrote them."""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Sequence

from fitwhisper.transcribe.formats import Segment

# Two in a row can be speech ("No. No."); a third identical segment is taken for a loop.
MAX_REPEATS = 2


def normalise(text: str) -> str:
    """Letters and digits only, case-folded (NFKC): "Thank you." == " thank you" and every
    punctuation-only text is the same, empty one."""
    return "".join(c for c in unicodedata.normalize("NFKC", text).casefold() if c.isalnum())


def drop_repeats(
    segments: Sequence[Segment], max_repeats: int = MAX_REPEATS
) -> tuple[tuple[Segment, ...], int]:
    """The segments without those that repeat the text of the `max_repeats` segments before
    them, renumbered from 0, and how many were dropped."""
    kept: list[Segment] = []
    dropped = run = 0
    previous: str | None = None
    for s in segments:
        key = normalise(s.text)
        run = run + 1 if key == previous else 1
        previous = key
        if run > max_repeats:
            dropped += 1
        else:
            kept.append(s if s.id == len(kept) else dataclasses.replace(s, id=len(kept)))
    return tuple(kept), dropped
