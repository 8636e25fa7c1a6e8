"""What the data check keeps of one decoded clip (numbers, never samples), and the
problems only its samples show. Read by the check (data/check.py) and by training, which
checks the samples of clips a sampled check read by header only (data/late_check.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from fitwhisper.data.audio import AudioInfo
from fitwhisper.data.manifest import Row
from fitwhisper.data.segments import TOLERANCE_S
from fitwhisper.whisper_facts import SAMPLE_RATE

SILENCE_PEAK = 1e-4  # peak |sample| below this (-80 dBFS) counts as a silent clip
# A clip is clipped when more than CLIPPED_SHARE of its samples sit at full scale
# (|x| >= CLIPPED_LEVEL; int16's 32767 is 0.99997). Speech peaks touch full scale now and
# then; one sample in a hundred there is distortion a listener hears.
CLIPPED_LEVEL = 0.999
CLIPPED_SHARE = 0.01


@dataclass(frozen=True)
class Problem:
    kind: str  # a key of data/check.py's PROBLEMS
    detail: str


@dataclass
class AudioFacts:
    problem: Problem | None = None
    sample_rate_hz: int | None = None
    channels: int | None = None
    duration_s: float | None = None
    peak: float | None = None
    digest: str | None = None
    nonfinite: int = 0  # NaN or Inf samples
    clipped_share: float = 0.0  # share of samples at full scale
    span_past_end: str | None = None  # an offset/duration beyond the recording: how far
    decoded: bool = True  # False: the header's facts only (data/sampled_check.py `probe_facts`)


def content_problems(audio: AudioFacts) -> list[Problem]:
    """A decoded clip's problems that only its samples show."""
    if audio.digest is None:
        return [Problem("empty_audio", "0 samples")]
    if audio.nonfinite:
        return [Problem("nonfinite_audio", f"{audio.nonfinite:,} NaN or Inf samples")]
    if audio.peak is not None and audio.peak < SILENCE_PEAK:
        return [Problem("silent_audio", f"peak {audio.peak:.1e} < {SILENCE_PEAK:g}")]
    return []


def decoded_problems(samples: np.ndarray) -> list[Problem]:
    """What only a clip's samples show (no samples, NaN or Inf, silence), for a clip whose
    header alone was checked, as training loads it (data/late_check.py)."""
    info = AudioInfo(SAMPLE_RATE, 1, samples.size / SAMPLE_RATE)
    return content_problems(facts(samples, info))


def facts(samples: np.ndarray, info, past_end: str | None = None) -> AudioFacts:
    """Numbers about a decoded clip: all the check keeps of it."""
    magnitude = np.abs(samples)
    finite = np.isfinite(magnitude)
    nonfinite = int(samples.size - np.count_nonzero(finite))
    if nonfinite:
        magnitude = magnitude[finite]  # the peak of the samples that are numbers
    return AudioFacts(
        sample_rate_hz=info.sample_rate_hz,
        channels=info.channels,
        duration_s=info.duration_s,
        peak=float(magnitude.max()) if magnitude.size else 0.0,
        nonfinite=nonfinite,
        span_past_end=past_end,
        clipped_share=(
            float(np.count_nonzero(magnitude >= CLIPPED_LEVEL)) / samples.size
            if samples.size
            else 0.0
        ),
        # Content, not path: the same clip copied or re-encoded losslessly is a duplicate.
        digest=(
            hashlib.blake2b(samples.tobytes(), digest_size=16).hexdigest() if samples.size else None
        ),
    )


def span_past_end(row: Row, recording_s: float) -> str | None:
    """How a row's offset/duration reaches past the end of its recording, or None."""
    end = row.offset_s + (row.duration_s or 0.0)
    if max(row.offset_s, end) <= recording_s + TOLERANCE_S:
        return None
    return (
        f"offset {row.offset_s:g} s + duration {row.duration_s or 0:g} s > "
        f"the recording's {recording_s:.2f} s"
    )
