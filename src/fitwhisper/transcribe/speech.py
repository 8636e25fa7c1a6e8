"""Where the speech is in a file, and the way back from speech-only audio to the file's times.

Whisper writes text over every window it is given: over digital silence it writes "you"
window after window, over noise "." (issue 14). Both engines therefore decode only the
stretches found here, laid end to end (`Speech.audio`), and map the times of what they
decode back onto the file (`Speech.original_time`), as faster-whisper's own `vad_filter`
does. A file without speech is not decoded at all.

Finding speech: Silero voice activity detection, the copy bundled with faster-whisper (the
`ct2` extra), with faster-whisper's sequential defaults; without it, an energy gate that
drops digital silence (but not noise) and says so once in the log.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from fitwhisper.whisper_facts import SAMPLE_RATE

log = logging.getLogger(__name__)

# faster-whisper's defaults for `WhisperModel.transcribe(vad_filter=True)`: pauses shorter
# than 2 s stay inside a region (the decoder keeps its context), 0.4 s of margin each side.
MIN_SILENCE_S = 2.0
SPEECH_PAD_S = 0.4
# The energy gate: 32 ms frames (Silero's 512 samples) quieter than -60 dBFS are silence.
FRAME = 512
SILENCE_RMS = 10 ** (-60 / 20)

_fallback_logged = False


@dataclass(frozen=True)
class Speech:
    """The speech regions of one file, as (start, end) sample ranges in order, and how they
    were found ("silero" or "energy")."""

    regions: tuple[tuple[int, int], ...]
    method: str

    @property
    def samples(self) -> int:
        return sum(e - s for s, e in self.regions)

    def audio(self, audio: np.ndarray) -> np.ndarray:
        """The regions of `audio` laid end to end: what the engine decodes."""
        if not self.regions:
            return audio[:0]
        return np.concatenate([audio[s:e] for s, e in self.regions])

    def original_time(self, t: float, *, is_end: bool = False) -> float:
        """A time in the speech-only audio -> the time in the file. A time on the joint of
        two regions belongs to the earlier one as an end and to the later one as a start
        (faster-whisper's `SpeechTimestampsMap` rule)."""
        ends, removed = self._joints
        if not ends:
            return t
        return (round(t * SAMPLE_RATE) + removed[self._region(t, is_end)]) / SAMPLE_RATE

    def span(self, start: float, end: float) -> tuple[float, float]:
        """A decoded segment -> its (start, end) in the file, on one region. Whisper often
        starts a segment in the margin before a joint; mapped point by point, such a cue
        would stretch across the pause cut out there (measured: 5.8-51.0 s over a 40 s
        silence). It is kept to the region that holds most of it instead."""
        ends, removed = self._joints
        if not ends:
            return start, end
        first, last = self._region(start, False), self._region(end, True)
        first = min(first, last)  # an empty segment on a joint: the earlier region's end
        if first != last:

            def overlap(k: int) -> float:
                lo = ends[k - 1] if k else 0
                return min(end * SAMPLE_RATE, ends[k]) - max(start * SAMPLE_RATE, lo)

            first = last = max(range(first, last + 1), key=overlap)
            start = max(start, (ends[first - 1] if first else 0) / SAMPLE_RATE)
            end = min(end, ends[first] / SAMPLE_RATE)
        to_file = (round(start * SAMPLE_RATE) + removed[first]) / SAMPLE_RATE
        return to_file, (round(end * SAMPLE_RATE) + removed[last]) / SAMPLE_RATE

    def _region(self, t: float, is_end: bool) -> int:
        ends = self._joints[0]
        find = bisect.bisect_left if is_end else bisect.bisect_right
        return min(find(ends, round(t * SAMPLE_RATE)), len(ends) - 1)

    @cached_property
    def _joints(self) -> tuple[list[int], list[int]]:
        """Where each region ends in the speech-only audio, and the samples cut before it."""
        ends, removed, cut, previous_end = [], [], 0, 0
        for s, e in self.regions:
            cut += s - previous_end
            previous_end = e
            removed.append(cut)
            ends.append(e - cut)
        return ends, removed


def speech_method() -> str:
    """The detector `find_speech` can use: "silero" where faster-whisper's VAD (and
    onnxruntime) can be imported, else "energy", logged once: it drops only silence."""
    global _fallback_logged
    if _silero() is not None:
        return "silero"
    if not _fallback_logged:
        log.warning(
            "voice activity detection needs faster-whisper and onnxruntime (pip install "
            "'fitwhisper[ct2]'); using an energy gate instead, which skips digital silence "
            "but not noise"
        )
        _fallback_logged = True
    return "energy"


def find_speech(audio: np.ndarray, method: str = "silero") -> Speech:
    """The speech in 16 kHz mono `audio`, by Silero VAD or the energy gate."""
    if method == "silero":
        found = _silero()
        if found is not None:
            get_speech_timestamps, vad_options = found
            opts = vad_options(
                min_silence_duration_ms=round(1000 * MIN_SILENCE_S),
                speech_pad_ms=round(1000 * SPEECH_PAD_S),
            )
            chunks = get_speech_timestamps(audio.astype(np.float32, copy=False), opts)
            return Speech(tuple((int(c["start"]), int(c["end"])) for c in chunks), "silero")
    return Speech(energy_regions(audio), "energy")


def energy_regions(audio: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sample ranges louder than -60 dBFS, joined across pauses under `MIN_SILENCE_S` and
    padded by `SPEECH_PAD_S`: a gate against digital silence (noise passes it)."""
    n = -(-len(audio) // FRAME)
    frames = np.zeros(n * FRAME, np.float64)
    frames[: len(audio)] = audio
    rms = np.sqrt(np.mean(np.square(frames.reshape(n, FRAME)), axis=1))
    gap, pad = round(MIN_SILENCE_S * SAMPLE_RATE), round(SPEECH_PAD_S * SAMPLE_RATE)
    regions: list[tuple[int, int]] = []
    for i in np.flatnonzero(rms > SILENCE_RMS):
        start = max(0, int(i) * FRAME - pad)
        end = min(len(audio), (int(i) + 1) * FRAME + pad)
        if regions and start - regions[-1][1] < gap:  # a short pause: the same region
            regions[-1] = (regions[-1][0], end)
        else:
            regions.append((start, end))
    return tuple(regions)


def _silero():
    """faster-whisper's (get_speech_timestamps, VadOptions), or None where it or the
    onnxruntime it runs on is not installed."""
    try:
        import onnxruntime  # noqa: F401  (the VAD model runs on it)
        from faster_whisper.vad import VadOptions, get_speech_timestamps
    except ImportError:
        return None
    return get_speech_timestamps, VadOptions
