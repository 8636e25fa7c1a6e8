"""The ct2 engine gives faster-whisper's encoder the log-mel frames training computes: a
short clip padded with silence, not its log-mel filled with zeros (`ct2_padding`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _training_features(audio: np.ndarray) -> np.ndarray:
    """What fitwhisper's training and evaluation feed the encoder for `audio` at 30 s."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor()(audio, sampling_rate=16_000, return_tensors="np")[
        "input_features"
    ][0]


def _encoded(engine, audios) -> list[np.ndarray]:
    """Every feature row faster-whisper's encoder got while `engine` transcribed."""
    rows: list[np.ndarray] = []
    encode = engine.model.encode

    def recording(features):
        rows.extend(np.asarray(features).reshape(-1, *np.shape(features)[-2:]))
        return encode(features)

    engine.model.encode = recording
    engine.transcribe([f"clip{i}" for i in range(len(audios))], audios)
    return rows


@pytest.mark.parametrize(
    ("window", "clips", "mode"),
    [
        ("full", 2, "auto"),  # clips batched across files, 30 s windows
        ("short", 2, "auto"),  # the same on the short window: its 1 s margin is silence
        ("full", 1, "auto"),  # a lone clip: faster-whisper's sequential transcribe
        ("full", 2, "sequential"),
    ],
)
def test_short_clips_reach_the_encoder_padded_with_silence_as_in_training(
    tiny_whisper_dir: Path, window: str, clips: int, mode: str
) -> None:
    pytest.importorskip("faster_whisper")
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.options import TranscribeOptions
    from fitwhisper.transcribe.run import EngineChoice, make_engine

    rng = np.random.default_rng(0)
    audios = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16_000, 24_000)]
    audios = audios[:clips]
    opts = TranscribeOptions(vad=False, max_new_tokens=4, compute_type="float32",
                             encoder_window=window, mode=mode)  # fmt: skip
    engine = make_engine(resolve_model(str(tiny_whisper_dir)), opts,
                         EngineChoice("ct2", "cpu", "test"))  # fmt: skip
    rows = _encoded(engine, audios)
    expected = [_training_features(a) for a in audios]
    assert len(rows) == len(audios)
    for got in rows:
        width = got.shape[-1]
        assert width == (250 if window == "short" else 3000)
        # Each row is one clip's training frames (sorted by length on the short window).
        errors = [np.abs(got - e[:, :width]).max() for e in expected]
        assert min(errors) < 1e-4, errors


def test_a_segment_decoded_from_the_padding_alone_is_dropped(tiny_whisper_dir: Path) -> None:
    """A lone clip goes to faster-whisper's sequential transcribe padded to 30 s; a segment
    that starts after the clip's end was read from that silence and is not kept."""
    pytest.importorskip("faster_whisper")
    from types import SimpleNamespace

    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.options import TranscribeOptions
    from fitwhisper.transcribe.run import EngineChoice, make_engine

    opts = TranscribeOptions(vad=False, max_new_tokens=4, compute_type="float32")
    engine = make_engine(resolve_model(str(tiny_whisper_dir)), opts,
                         EngineChoice("ct2", "cpu", "test"))  # fmt: skip
    seen = []

    def transcribe(audio, **kw):
        seen.append(len(audio))
        seg = dict(words=None, avg_logprob=-0.1, no_speech_prob=0.1, compression_ratio=1.0)
        segments = [SimpleNamespace(start=0.0, end=1.4, text=" one", **seg),
                    SimpleNamespace(start=1.5, end=3.0, text=" you", **seg)]  # fmt: skip
        return iter(segments), SimpleNamespace(language="en")

    engine.model.transcribe = transcribe
    (t,) = engine.transcribe(["clip"], [np.zeros(24_000, dtype=np.float32)])  # 1.5 s
    assert seen == [30 * 16_000]
    assert [s.text for s in t.segments] == [" one"] and t.duration_s == 1.5
