"""Every audio format decodes to 16 kHz mono float32 of the right length."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from fitwhisper.data.audio import (
    AudioDecodeError,
    InMemoryAudio,
    load_audio,
    load_audio_with_info,
    probe_audio,
)
from fitwhisper.errors import DataError
from fitwhisper.whisper_facts import SAMPLE_RATE

SECONDS = 2.0


def _write(kind: str, tmp_path, audio):
    x8k, x16k, x48k = audio.tone(8000, SECONDS), audio.tone(16000, SECONDS), audio.tone(48000, 2)
    if kind == "flac_8k":
        sf.write(tmp_path / "a.flac", x8k, 8000)
        return tmp_path / "a.flac", 8000, 1
    if kind == "wav_stereo_44k":
        sf.write(tmp_path / "a.wav", audio.tone(44100, SECONDS, channels=2), 44100)
        return tmp_path / "a.wav", 44100, 2
    if kind == "mp3":
        sf.write(tmp_path / "a.mp3", x16k, 16000, format="MP3")
        return tmp_path / "a.mp3", 16000, 1
    if kind == "ogg":
        sf.write(tmp_path / "a.ogg", x16k, 16000, format="OGG", subtype="VORBIS")
        return tmp_path / "a.ogg", 16000, 1
    if kind == "opus":
        sf.write(tmp_path / "a.opus", x48k, 48000, format="OGG", subtype="OPUS")
        return tmp_path / "a.opus", 48000, 1
    if kind == "m4a":
        return audio.write_av(tmp_path / "a.m4a", x16k, 16000, "aac", "mp4"), 16000, 1
    if kind == "webm":
        return audio.write_av(tmp_path / "a.webm", x48k, 48000, "libopus", "webm"), 48000, 1
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["flac_8k", "wav_stereo_44k", "mp3", "ogg", "opus", "m4a", "webm"])
def test_every_format_loads_as_16k_mono_float32(kind, tmp_path, audio):
    path, sr, channels = _write(kind, tmp_path, audio)

    samples, info = load_audio_with_info(path)

    assert samples.dtype == np.float32 and samples.ndim == 1
    # AAC encoders add priming and padding (~0.1 s at 16 kHz); the others are exact.
    tolerance_s = 0.15 if kind == "m4a" else 0.01
    assert abs(samples.size / SAMPLE_RATE - SECONDS) <= tolerance_s
    assert (info.sample_rate_hz, info.channels) == (sr, channels)
    assert 0.2 < np.abs(samples).max() <= 1.0  # the tone survived decoding and resampling
    probed = probe_audio(path)
    assert (probed.sample_rate_hz, probed.channels) == (sr, channels)
    # Container metadata (PyAV's path) rounds the duration to the codec's frames.
    assert abs(probed.duration_s - SECONDS) <= max(tolerance_s, 0.05)


def test_stereo_is_averaged(tmp_path):
    left = np.full(1600, 0.5, dtype=np.float32)
    sf.write(tmp_path / "s.wav", np.stack([left, -left / 5], axis=1), 16000)

    np.testing.assert_allclose(load_audio(tmp_path / "s.wav"), 0.2, atol=1e-4)


def test_in_memory_bytes_and_arrays(audio):
    buf = io.BytesIO()
    sf.write(buf, audio.tone(8000, 1.0), 8000, format="FLAC")

    from_bytes = load_audio(InMemoryAudio("x", value={"bytes": buf.getvalue(), "path": None}))
    from_array = load_audio(
        InMemoryAudio("y", value={"array": audio.tone(32000, 1.0), "sampling_rate": 32000})
    )

    assert from_bytes.shape == from_array.shape == (16000,)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(DataError, match=r"audio file .*nope\.wav not found"):
        load_audio(tmp_path / "nope.wav")


def test_undecodable_file_names_it_and_both_decoders(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really a wave file" * 10)

    with pytest.raises(AudioDecodeError) as e:
        load_audio(bad)

    assert f"cannot decode audio {bad}" in e.value.message
    assert "soundfile said" in e.value.message and "FFmpeg said" in e.value.message
    assert "ffmpeg -i" in e.value.hint


def test_short_clips_are_padded_with_silence_as_in_training():
    import numpy as np

    from fitwhisper.data.audio import padded_like_training

    clip = np.linspace(-0.5, 0.5, 3 * 16_000, dtype=np.float32)
    padded = padded_like_training(clip)
    assert padded.shape == (30 * 16_000,) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[: clip.size], clip)
    assert not padded[clip.size :].any()
    long = np.ones(31 * 16_000, np.float32)
    assert padded_like_training(long) is long  # a long file seeks window by window itself
