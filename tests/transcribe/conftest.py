"""Audio files for the transcription tests, written into the test's tmp folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def make_tone() -> Callable[..., Path]:
    """`make_tone(path, seconds, freq=440)`: a 16 kHz tone with a little seeded noise."""
    import soundfile

    def make(path: Path, seconds: float, freq: float = 440.0) -> Path:
        rng = np.random.default_rng(int(freq * 1000 + seconds * 10))
        t = np.arange(int(seconds * 16_000)) / 16_000
        audio = 0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)
        soundfile.write(str(path), audio.astype(np.float32), 16_000)
        return path

    return make
