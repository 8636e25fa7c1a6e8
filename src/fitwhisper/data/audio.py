"""Audio decoding: any file or in-memory clip to 16 kHz mono float32, as Whisper expects.

soundfile (libsndfile) decodes WAV, FLAC, MP3, OGG/Opus without spawning anything; PyAV
(bundled FFmpeg) takes over for what libsndfile cannot read (M4A/AAC, WebM, MP4, ...).
Channels are averaged and soxr resamples. Used by `check-data`, training and transcription.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fitwhisper.errors import DataError
from fitwhisper.whisper_facts import SAMPLE_RATE, WINDOW_SAMPLES

CONVERT_COMMAND = f"ffmpeg -i IN -ar {SAMPLE_RATE} -ac 1 OUT.flac"  # any audio as Whisper hears it

_CONVERT_HINT = (
    f"convert it to WAV or FLAC (e.g. `{CONVERT_COMMAND}`), or remove the row; "
    "with `--bad_rows skip` such rows are left out and counted"
)


class AudioDecodeError(DataError):
    """An audio file (or in-memory clip) that exists but cannot be decoded."""


@dataclass(frozen=True)
class AudioInfo:
    """What a clip is, before downmixing and resampling."""

    sample_rate_hz: int
    channels: int
    duration_s: float


class InMemoryAudio:
    """A clip that lives in a `datasets` dataset rather than in a file of its own.

    Holds either an (already memory-mapped) dataset plus row index, read only when the clip is
    loaded, or a small array/bytes value directly. Either way nothing is decoded or copied to
    disk until `load_audio` asks for it, so 10,000 such rows cost no audio memory.
    """

    __slots__ = ("_dataset", "_index", "_column", "_value", "name")

    def __init__(
        self,
        name: str,
        *,
        dataset: Any = None,
        index: int | None = None,
        column: str | None = None,
        value: dict | None = None,
    ) -> None:
        self.name = name
        self._dataset, self._index, self._column, self._value = dataset, index, column, value

    def value(self) -> dict:
        """The stored `{"bytes"|"array", "sampling_rate", "path"}` dict."""
        if self._value is not None:
            return self._value
        return self._dataset[self._index][self._column]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"InMemoryAudio({self.name!r})"


AudioSource = str | os.PathLike | InMemoryAudio


def padded_like_training(audio: np.ndarray, samples: int = WINDOW_SAMPLES) -> np.ndarray:
    """A clip shorter than one window with silence appended up to it, as transformers'
    feature extractor pads every clip in training and evaluation. faster-whisper and
    openai-whisper instead pad a short clip's log-mel with zeros, which the model never saw
    in training: on a fine-tune whose clips sit near a decision, that moves words (measured:
    CER +3.25 points on 24 Mandarin clips, the source's CER exactly with this).
    Longer audio is returned as it is."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1 or audio.size >= samples:
        return audio
    return np.pad(audio, (0, samples - audio.size))


def load_audio(source: AudioSource) -> np.ndarray:
    """Decode a clip to Whisper's input.

    Args:
        source: a file path (any format soundfile or FFmpeg reads) or an `InMemoryAudio`.

    Returns:
        (samples,) float32 in [-1, 1], mono, 16 kHz.

    Raises:
        DataError: the file does not exist.
        AudioDecodeError: it exists but neither soundfile nor PyAV can decode it.
    """
    return load_audio_with_info(source)[0]


def load_audio_with_info(source: AudioSource) -> tuple[np.ndarray, AudioInfo]:
    """`load_audio` plus the clip's original sample rate, channels and duration."""
    data, sr = _decode(source)  # (frames, channels) float32
    info = AudioInfo(sample_rate_hz=sr, channels=data.shape[1], duration_s=data.shape[0] / sr)
    return _as_whisper_input(data, sr), info


def _as_whisper_input(data: np.ndarray, sr: int) -> np.ndarray:
    """(frames, channels) at `sr` as mono 16 kHz float32."""
    mono = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
    if sr != SAMPLE_RATE and mono.size:
        import soxr

        mono = soxr.resample(mono, sr, SAMPLE_RATE)
    return np.ascontiguousarray(mono, dtype=np.float32)


def load_span_with_info(
    source: AudioSource, offset_s: float, duration_s: float | None
) -> tuple[np.ndarray, AudioInfo]:
    """`duration_s` seconds of a recording from `offset_s` (to its end when None), as
    `load_audio` returns them, and the whole recording's info. soundfile seeks to the span
    and reads it alone, so a window of an hour-long WAV or FLAC costs its 30 s; other
    formats are decoded whole and cut. A span past the end comes back short (the data check
    reports it)."""
    if not isinstance(source, InMemoryAudio):
        import soundfile as sf

        path = _existing(source)
        try:
            with sf.SoundFile(str(path)) as f:
                sr, total = f.samplerate, f.frames
                start = min(max(0, round(offset_s * sr)), total)
                frames = total - start if duration_s is None else round(duration_s * sr)
                f.seek(start)
                data = f.read(max(0, frames), dtype="float32", always_2d=True)
            info = AudioInfo(sr, data.shape[1], total / sr)
            return _as_whisper_input(data, sr), info
        except (sf.LibsndfileError, RuntimeError):
            pass  # not a format libsndfile reads: decoded whole below
    samples, info = load_audio_with_info(source)
    start = round(offset_s * SAMPLE_RATE)
    end = None if duration_s is None else start + round(duration_s * SAMPLE_RATE)
    return np.ascontiguousarray(samples[start:end]), info


def load_row_audio(row) -> np.ndarray:
    """A manifest row's audio: its span of the recording where it has an `offset_s`
    (data/manifest.py Row), else the whole file."""
    if row.offset_s is None:
        return load_audio(row.audio)
    return load_span_with_info(row.audio, row.offset_s, row.duration_s)[0]


def probe_audio(source: AudioSource) -> AudioInfo:
    """Sample rate, channels and duration, from the header where the format allows.

    soundfile reads only the header; PyAV reads the container's metadata and decodes only
    when the container does not state a duration.
    """
    if isinstance(source, InMemoryAudio):
        return load_audio_with_info(source)[1]
    path = _existing(source)
    import soundfile as sf

    try:
        i = sf.info(str(path))
        return AudioInfo(i.samplerate, i.channels, i.frames / i.samplerate)
    except (sf.LibsndfileError, RuntimeError):
        pass
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                raise AudioDecodeError(
                    f"{path} has no audio stream", hint="point the row at an audio file"
                )
            stream = container.streams.audio[0]
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / av.time_base
            else:
                return load_audio_with_info(path)[1]
            return AudioInfo(stream.rate, stream.codec_context.layout.nb_channels, duration)
    except av.FFmpegError as e:
        raise AudioDecodeError(f"cannot read audio file {path}: {e}", hint=_CONVERT_HINT) from e


def _existing(source: str | os.PathLike) -> Path:
    path = Path(source)
    if not path.is_file():
        raise DataError(
            f"audio file {path} not found",
            hint="relative paths in a manifest resolve against the manifest's folder",
        )
    return path


def _decode(source: AudioSource) -> tuple[np.ndarray, int]:
    """(frames, channels) float32 and the sample rate, by soundfile, else PyAV."""
    if isinstance(source, InMemoryAudio):
        return _decode_value(source)
    path = _existing(source)
    return _decode_file(str(path), str(path))


def _decode_value(source: InMemoryAudio) -> tuple[np.ndarray, int]:
    value = source.value()
    if value is None:
        raise AudioDecodeError(f"{source.name}: the audio value is empty", hint=_CONVERT_HINT)
    if value.get("array") is not None:
        sr = value.get("sampling_rate")
        if not sr:
            raise AudioDecodeError(
                f"{source.name}: an audio array without a sampling_rate",
                hint="store the sampling rate next to the array, as datasets' Audio feature does",
            )
        data = np.asarray(value["array"], dtype=np.float32)
        # datasets stores (samples,) mono or (channels, samples) multi-channel arrays.
        data = data[:, None] if data.ndim == 1 else data.T
        return data, int(sr)
    if value.get("bytes"):
        return _decode_file(io.BytesIO(value["bytes"]), source.name)
    if value.get("path"):
        return _decode(value["path"])
    raise AudioDecodeError(f"{source.name}: neither bytes, array nor path", hint=_CONVERT_HINT)


def _decode_file(file: str | io.BytesIO, name: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    try:
        data, sr = sf.read(file, dtype="float32", always_2d=True)
        return data, int(sr)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        # libsndfile has no AAC or Matroska/WebM; FFmpeg does.
        sf_error = e
    if isinstance(file, io.BytesIO):
        file.seek(0)
    try:
        return _decode_av(file)
    except Exception as av_error:  # PyAV raises many FFmpegError subclasses and ValueError
        raise AudioDecodeError(
            f"cannot decode audio {name}: soundfile said '{sf_error}'; FFmpeg said '{av_error}'",
            hint=_CONVERT_HINT,
        ) from av_error


def _decode_av(file: str | io.BytesIO) -> tuple[np.ndarray, int]:
    import av

    with av.open(file) as container:
        if not container.streams.audio:
            raise ValueError("no audio stream")
        stream = container.streams.audio[0]
        # Planar float keeps each channel a row of `to_ndarray()`, whatever the codec's format.
        resampler = av.AudioResampler(format="fltp")
        chunks: list[np.ndarray] = []
        sr = stream.rate
        for frame in container.decode(stream):
            sr = frame.sample_rate
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray())
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray())
    if not chunks:
        return np.zeros((0, max(1, stream.channels)), dtype=np.float32), int(sr or SAMPLE_RATE)
    return np.concatenate(chunks, axis=1).T.astype(np.float32, copy=False), int(sr)
