"""Noise for `train --noise_dir`: recordings from a folder the user names, or coloured noise
made on the spot when none is named.

Both take a numpy Generator, so a clip's noise depends on nothing but its own generator
(data/augment.py derives one per seed, epoch and clip).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from fitwhisper.errors import ConfigError

# What soundfile and PyAV decode (data/audio.py); other files in the folder are ignored.
NOISE_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".webm")
_CACHED_FILES = 64  # decoded noise recordings kept per process (16 kHz float32)


@lru_cache(maxsize=8)
def noise_files(folder: str) -> tuple[Path, ...]:
    """The audio files under `folder` (recursively), sorted so every process and every run
    numbers them alike. ConfigError when there are none."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(
            f"--noise_dir {folder} is not a folder",
            hint="name a folder of noise recordings (WAV, FLAC, MP3, ...), or leave "
            "--noise_dir out to add generated coloured noise",
        )
    found = tuple(
        sorted(p for p in root.rglob("*") if p.suffix.lower() in NOISE_SUFFIXES and p.is_file())
    )
    if not found:
        raise ConfigError(
            f"--noise_dir {folder} holds no audio files ({', '.join(NOISE_SUFFIXES)})",
            hint="put noise recordings there, or leave --noise_dir out to add generated "
            "coloured noise",
        )
    return found


@lru_cache(maxsize=_CACHED_FILES)
def _decoded(path: Path) -> np.ndarray:
    from fitwhisper.data.audio import load_audio

    return load_audio(str(path))


def noise_from_folder(folder: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples of a recording under `folder` drawn by `rng`, from a random offset
    (a recording shorter than `n` is repeated)."""
    files = noise_files(folder)
    audio = _decoded(files[int(rng.integers(len(files)))])
    if len(audio) == 0:
        return np.zeros(n, dtype=np.float32)
    if len(audio) < n:
        audio = np.tile(audio, -(-n // len(audio)))
    start = int(rng.integers(len(audio) - n + 1))
    return audio[start : start + n]


def coloured_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples of noise whose power falls as 1/f^beta, beta drawn from [0, 2]: white
    (0) through pink (1) to brown (2), the range audiomentations' AddColorNoise covers."""
    beta = rng.uniform(0.0, 2.0)
    # White noise drawn in the frequency domain (complex Gaussian bins: what an FFT of white
    # noise is), shaped, then one inverse FFT.
    m = n // 2 + 1
    spectrum = rng.standard_normal(m, dtype=np.float32) + 1j * rng.standard_normal(
        m, dtype=np.float32
    )
    f = np.arange(m, dtype=np.float32)
    f[0] = 1.0  # no DC boost
    noise = np.fft.irfft(spectrum * f ** np.float32(-beta / 2), n)
    return noise.astype(np.float32)
