"""What a transcription is (segments with times and scores) and how it is written:
txt, json, srt, vtt and tsv, in the shapes openai-whisper and faster-whisper users know.

The json carries `text`, `language`, `duration` and `segments` (id, start, end, text,
avg_logprob, no_speech_prob, compression_ratio; `words` with word timestamps), as
openai-whisper's `--output_format json` does. srt/vtt follow the SubRip and WebVTT formats
(comma vs dot before the milliseconds) so common players open them; tsv has start and end in
integer milliseconds, as openai-whisper writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from fitwhisper.safe_text import json_text, one_line, plain_text, vtt_cue
from fitwhisper.text_joins import join_texts

OutputFormat = Literal["txt", "json", "srt", "vtt", "tsv"]
FORMATS: tuple[OutputFormat, ...] = ("txt", "json", "srt", "vtt", "tsv")


@dataclass(frozen=True)
class Word:
    start: float  # seconds from the start of the file
    end: float
    word: str
    probability: float


@dataclass(frozen=True)
class Segment:
    """One stretch of speech; scores are those of the 30 s window that produced it
    (None where the engine does not give them)."""

    id: int
    start: float  # seconds from the start of the file
    end: float
    text: str
    avg_logprob: float | None = None
    no_speech_prob: float | None = None
    compression_ratio: float | None = None
    words: tuple[Word, ...] | None = None


@dataclass(frozen=True)
class Transcript:
    """One file's transcription; its segments are kept in time order (`in_time_order`)
    whichever engine, mode or window made them."""

    audio: str  # the file as the user named it
    segments: tuple[Segment, ...]
    language: str | None
    duration_s: float
    engine: str = ""
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Every engine's output is built here: cues never overlap nor go back in time.
        object.__setattr__(self, "segments", in_time_order(self.segments))

    @property
    def text(self) -> str:
        return _join(s.text for s in self.segments)

    def as_dict(self) -> dict:
        segments = []
        for s in self.segments:
            d = asdict(s)
            if s.words is None:
                d.pop("words")
            segments.append(d)
        return {
            "text": self.text,
            "language": self.language,
            "duration": round(self.duration_s, 3),
            "segments": segments,
        }


def in_time_order(segments: Sequence[Segment]) -> tuple[Segment, ...]:
    """The segments as subtitles can show them, renumbered from 0: in the order decoded,
    each starting where the one before ends if it started earlier (a window's last segment
    can run past the time the next window starts from), empty ones dropped. A segment that
    ends by the time the one before does is merged into it, text and words: no text is lost.
    """
    out: list[Segment] = []
    for s in segments:
        if not s.text.strip():
            continue
        if out and s.start < out[-1].end:
            prev = out[-1]
            if s.end <= prev.end:  # nothing of it left after the one before: joins it
                words = None
                if prev.words is not None or s.words is not None:
                    words = (prev.words or ()) + _words_from(s.words or (), prev.start, prev.end)
                out[-1] = replace(prev, text=join_texts((prev.text, s.text)), words=words)
                continue
            s = replace(
                s,
                start=prev.end,
                words=None if s.words is None else _words_from(s.words, prev.end, s.end),
            )
        out.append(s if s.id == len(out) else replace(s, id=len(out)))
    return tuple(out)


def render(t: Transcript, fmt: OutputFormat) -> str:
    """The file content of `t` in `fmt`; ends with a newline."""
    # Every text goes through fitwhisper.safe_text: one way per kind of file.
    if fmt == "txt":
        return plain_text(t.text) + "\n"
    if fmt == "json":
        return json_text(t.as_dict(), indent=2) + "\n"
    if fmt == "tsv":
        rows = ["start\tend\ttext"]
        rows += [
            f"{round(1000 * s.start)}\t{round(1000 * s.end)}\t{one_line(s.text)}"
            for s in t.segments
        ]
        return "\n".join(rows) + "\n"
    if fmt == "srt":
        blocks = [
            f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{one_line(s.text)}\n"
            for i, s in enumerate(_spoken(t.segments), start=1)
        ]
        return "\n".join(blocks)
    if fmt == "vtt":
        blocks = [
            f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{vtt_cue(s.text)}\n"
            for s in _spoken(t.segments)
        ]
        return "WEBVTT\n\n" + "\n".join(blocks)
    raise ValueError(f"unknown format {fmt!r}")


def timestamp(seconds: float, decimal_marker: str) -> str:
    """`HH:MM:SS,mmm` (SubRip) or `HH:MM:SS.mmm` (WebVTT)."""
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal_marker}{ms:03d}"


def _words_from(words: Sequence[Word], start: float, end: float) -> tuple[Word, ...]:
    """`words` with their times moved inside [start, end] and in order."""
    out: list[Word] = []
    for w in words:
        a = min(max(w.start, start, out[-1].end if out else start), end)
        out.append(replace(w, start=a, end=min(max(w.end, a), end)))
    return tuple(out)


def _spoken(segments) -> list[Segment]:
    # An empty cue makes some players show a blank caption or reject the file.
    return [s for s in segments if one_line(s.text)]


def _join(texts) -> str:
    """Segment texts joined by text_joins' rule: a fine-tuned model's segments may lack the
    leading space Whisper's own carry ("It was" for " It was")."""
    return join_texts(t for t in texts if t.strip()).strip()
