"""What a transcription is (segments with times and scores) and how it is written:
txt, json, srt, vtt and tsv, in the shapes openai-whisper and faster-whisper users know.

The json carries `text`, `language`, `duration` and `segments` (id, start, end, text,
avg_logprob, no_speech_prob, compression_ratio; `words` with word timestamps), as
openai-whisper's `--output_format json` does. srt/vtt follow the SubRip and WebVTT formats
(comma vs dot before the milliseconds) so common players open them; tsv has start and end in
integer milliseconds, as openai-whisper writes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Literal

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
    """One file's transcription."""

    audio: str  # the file as the user named it
    segments: tuple[Segment, ...]
    language: str | None
    duration_s: float
    engine: str = ""
    extra: dict = field(default_factory=dict)

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


def render(t: Transcript, fmt: OutputFormat) -> str:
    """The file content of `t` in `fmt`; ends with a newline."""
    if fmt == "txt":
        return t.text + "\n"
    if fmt == "json":
        return json.dumps(t.as_dict(), ensure_ascii=False, indent=2) + "\n"
    if fmt == "tsv":
        rows = ["start\tend\ttext"]
        rows += [
            f"{round(1000 * s.start)}\t{round(1000 * s.end)}\t{_one_line(s.text)}"
            for s in t.segments
        ]
        return "\n".join(rows) + "\n"
    if fmt == "srt":
        blocks = [
            f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{_one_line(s.text)}\n"
            for i, s in enumerate(_spoken(t.segments), start=1)
        ]
        return "\n".join(blocks)
    if fmt == "vtt":
        blocks = [
            f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{_one_line(s.text)}\n"
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


def _spoken(segments) -> list[Segment]:
    # An empty cue makes some players show a blank caption or reject the file.
    return [s for s in segments if s.text.strip()]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _join(texts) -> str:
    """Segment texts joined; Whisper's BPE keeps the leading space of space-separated
    languages inside the text, so plain concatenation is right for both kinds."""
    return "".join(t for t in texts if t.strip()).strip()
