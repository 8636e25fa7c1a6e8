"""Timed segments of a long recording: what a manifest row or a subtitle file says was said
when, and what the data check finds wrong with them.

A manifest row carries them as `segments` (or Whisper-Finetune's `sentences`): a list of
`{"start": s, "end": s, "text": ...}`, in seconds from the start of the row's audio (from
its `offset` where it has one); a CSV cell may hold the same list as JSON. Subtitle files
(SRT, WebVTT) become the same segments (data/subtitles.py). Cutting them into 30 s training
windows is data/recordings.py's job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fitwhisper.text_joins import join_texts
from fitwhisper.whisper_facts import TIMESTAMP_SECONDS, WINDOW_SECONDS

SEGMENT_COLUMNS = ("segments", "sentences")  # tried in order
# Where a row's audio lies in a longer recording, in seconds: NeMo's names first.
OFFSET_COLUMNS = ("offset", "offset_s")
DURATION_COLUMNS = ("duration", "duration_s")

# Times may disagree by less than one timestamp step (20 ms) without being a problem:
# subtitle editors round to frames and milliseconds, and the labels round to 20 ms anyway.
TOLERANCE_S = TIMESTAMP_SECONDS

# Segment problems of the data check (check.py lists them with its own).
SEGMENT_PROBLEMS: dict[str, str] = {
    "segment_times": "a segment whose end is not after its start",
    "segment_order": "a segment that starts before the one listed before it",
    "segment_overlap": "a segment that starts before the one before it ends",
    "segment_past_end": "a segment that ends after the audio does",
    "segment_empty": "a segment with no text",
    "segment_too_long": f"a segment longer than one {WINDOW_SECONDS:.0f} s window; a "
    "warning: training leaves that segment out (counted), the rest of the row is used",
}


@dataclass(frozen=True, slots=True)
class Segment:
    """What was said from `start` to `end` (seconds from the start of the row's audio)."""

    start: float
    end: float
    text: str


class SegmentsError(ValueError):
    """Segments that cannot be read at all (not a list, a time that is no number)."""


def parse_segments(value) -> tuple[Segment, ...]:
    """A manifest's `segments` value as Segments, in the order written.

    Raises:
        SegmentsError: not a list of objects with a numeric `start` and `end` and a `text`.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise SegmentsError(f"segments are not valid JSON: {e.msg}") from e
    if not isinstance(value, list):
        raise SegmentsError(f"segments must be a list, got {type(value).__name__}")
    out = []
    for k, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise SegmentsError(f"segment {k} is a {type(item).__name__}, not an object")
        times = []
        for key in ("start", "end"):
            t = item.get(key)
            if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
                raise SegmentsError(f"segment {k} has no numeric '{key}' (got {t!r})")
            times.append(float(t))
        text = item.get("text", "")
        if not isinstance(text, str):
            raise SegmentsError(f"segment {k}'s text is a {type(text).__name__}, not text")
        out.append(Segment(times[0], times[1], text.strip()))
    return tuple(out)


def read_span(obj: dict) -> tuple[float | None, float | None]:
    """A manifest row's (offset, duration) in seconds: (None, None) without an offset
    (`duration` alone is NeMo's length metadata and cuts nothing), duration None to the
    end of the recording.

    Raises:
        SegmentsError: an offset or duration that is not a number of seconds.
    """
    offset = _first(obj, OFFSET_COLUMNS)
    if offset is None:
        return None, None
    duration = _first(obj, DURATION_COLUMNS)
    bad = [
        f"{name} {value!r}"
        for name, value in (("offset", offset), ("duration", duration))
        if value not in (None, "") and not _seconds(value)
    ]
    if bad:
        raise SegmentsError(f"{' and '.join(bad)}: not seconds")
    return float(offset), None if duration in (None, "") else float(duration)


def _first(obj: dict, names: tuple[str, ...]):
    # A CSV's empty cell is no value, as a JSON row's missing key.
    return next((obj[n] for n in names if obj.get(n) not in (None, "")), None)


def _seconds(value) -> bool:
    """Whether a manifest value is a number of seconds (CSV cells are strings)."""
    if isinstance(value, bool):
        return False
    try:
        f = float(value)
    except (TypeError, ValueError):
        return False
    return 0 <= f < math.inf


def joined_text(segments: Sequence[Segment]) -> str:
    """The segments' texts as one transcript (text_joins.join_texts)."""
    return join_texts(s.text for s in segments)


def segment_problems(segments: Sequence[Segment], audio_s: float | None) -> list[tuple[str, str]]:
    """(kind, detail) for each problem of a row's segments, one per kind (the first case
    named, with how many there are): a key of SEGMENT_PROBLEMS.

    Args:
        audio_s: the row's audio length (its span where it has an offset), None if unknown.
    """
    found: dict[str, list[str]] = {}

    def add(kind: str, detail: str) -> None:
        found.setdefault(kind, []).append(detail)

    for k, seg in enumerate(segments, start=1):
        name = f"segment {k} ({seg.start:.2f}-{seg.end:.2f} s)"
        if seg.end <= seg.start:
            add("segment_times", f"{name} ends before it starts")
        elif seg.end - seg.start > WINDOW_SECONDS:
            add("segment_too_long", f"{name} lasts {seg.end - seg.start:.1f} s")
        if not seg.text:
            add("segment_empty", f"{name} has no text")
        if audio_s is not None and seg.end > audio_s + TOLERANCE_S:
            add("segment_past_end", f"{name} ends after the audio's {audio_s:.2f} s")
        if k > 1:
            before = segments[k - 2]
            if seg.start < before.start - TOLERANCE_S:
                add("segment_order", f"{name} starts before segment {k - 1} ({before.start:.2f} s)")
            elif seg.start < before.end - TOLERANCE_S:
                add(
                    "segment_overlap",
                    f"{name} starts before segment {k - 1} ends ({before.end:.2f} s)",
                )
    out = []
    for kind in SEGMENT_PROBLEMS:
        if kind in found:
            more = len(found[kind]) - 1
            out.append((kind, found[kind][0] + (f" (and {more} more)" if more else "")))
    return out
