"""SubRip (.srt) and WebVTT (.vtt) files as timed segments of a recording.

No subtitle library is a dependency, so this is a small reader of what both formats share:
cues separated by blank lines, each with a `start --> end` line and its text below. It
takes SRT's `00:01:02,500` and WebVTT's `01:02.500` (hours optional), skips WebVTT's header,
NOTE, STYLE and REGION blocks and the cue settings after the end time, and removes markup
(`<i>`, `<v Speaker>`, `<00:01.000>`, `{\\an8}`) and HTML entities from the text.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from fitwhisper.data.segments import Segment

SUBTITLE_SUFFIXES = (".srt", ".vtt")
# Audio files a folder of subtitled recordings may hold (anything soundfile or FFmpeg reads
# works in a manifest; a folder needs to know which files are audio).
RECORDING_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".webm", ".mp4")

_TIME = re.compile(r"^(?:(\d+):)?(\d{1,2}):(\d{1,2})[,.](\d{1,3})$")
_MARKUP = re.compile(r"<[^>]*>|\{\\[^}]*\}")


class SubtitleError(ValueError):
    """A subtitle file that cannot be read; the message names the file and line."""


def subtitles_beside(audio: Path) -> Path | None:
    """The .srt or .vtt file with the audio file's name beside it, if there is one."""
    for suffix in SUBTITLE_SUFFIXES:
        candidate = audio.with_suffix(suffix)
        if candidate.is_file():
            return candidate
    return None


def subtitled_recordings(folder: Path) -> list[tuple[Path, Path]]:
    """(recording, its subtitle file) for every recording under `folder` with one beside
    it, in path order."""
    pairs = []
    for p in sorted(folder.rglob("*")):
        if p.suffix.lower() in RECORDING_SUFFIXES and p.is_file():
            subs = subtitles_beside(p)
            if subs is not None:
                pairs.append((p, subs))
    return pairs


def read_subtitles(path: Path) -> tuple[Segment, ...]:
    """The cues of an SRT or VTT file, in file order (times in seconds from its start).

    Raises:
        SubtitleError: not UTF-8, a time that cannot be read, or no cue at all.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise SubtitleError(f"{path} is not UTF-8 (byte {e.start}); convert it with iconv") from e
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    segments = []
    i = 0
    while i < len(lines):
        if "-->" not in lines[i]:
            i += 1
            continue
        start, end = _cue_times(lines[i], path, i + 1)
        i += 1
        body = []
        while i < len(lines) and lines[i].strip():
            if "-->" in lines[i]:  # no blank line before the next cue: drop its number
                if body and body[-1].isdigit():
                    body.pop()
                break
            body.append(_clean(lines[i]))
            i += 1
        segments.append(Segment(start, end, " ".join(t for t in body if t)))
    if not segments:
        raise SubtitleError(f"{path} has no cue (no line with 'start --> end')")
    return tuple(segments)


def _cue_times(line: str, path: Path, line_no: int) -> tuple[float, float]:
    left, _, right = line.partition("-->")
    right_parts = right.split()
    times = []
    for raw in (left.strip(), right_parts[0] if right_parts else ""):
        m = _TIME.match(raw)
        if m is None:
            raise SubtitleError(
                f"{path}:{line_no}: cannot read the time {raw!r} in {line.strip()!r} "
                "(expected 00:01:02,500 or 01:02.500)"
            )
        hours, minutes, seconds, fraction = m.groups()
        times.append(
            int(hours or 0) * 3600
            + int(minutes) * 60
            + int(seconds)
            + int(fraction) / 10 ** len(fraction)
        )
    return times[0], times[1]


def _clean(line: str) -> str:
    return " ".join(html.unescape(_MARKUP.sub("", line)).split())
