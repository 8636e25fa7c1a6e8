"""The transformers engine (the one `transcribe` picks on CUDA) out of GPU memory: the batch
is decoded again in halves and the run finishes with every file. CUDA's error is raised by
a patched `_generate` on CPU, as tests/memory/test_backoff.py does for training: the
decision is tested here, a real GPU's memory is not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fitwhisper.errors import OutOfMemoryError
from fitwhisper.transcribe.hf_engine import TransformersEngine
from fitwhisper.transcribe.options import TranscribeOptions

SR = 16000
OPTS = TranscribeOptions(
    batch_size=2, beam_size=1, vad=False, max_new_tokens=4, temperature_fallback=False, threads=2
)


def _tones(n: int) -> list[np.ndarray]:
    t = np.arange(SR) / SR
    return [(0.3 * np.sin(2 * np.pi * (300 + 50 * i) * t)).astype(np.float32) for i in range(n)]


def _running_out_above(engine: TransformersEngine, most: int, calls: list[int]) -> None:
    real = engine._generate

    def generate(audios, progress):
        calls.append(len(audios))
        if len(audios) > most:
            if progress:
                progress(0.5)  # part of the batch reported before the error
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(audios, progress)

    engine._generate = generate


def test_a_batch_out_of_memory_is_decoded_again_in_halves(
    tiny_whisper_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names, audios = [f"f{i}" for i in range(3)], _tones(3)
    plain = TransformersEngine(str(tiny_whisper_dir), OPTS, "cpu")
    reported: list[float] = []
    expected = [t.text for _, t in plain.stream(names, audios, reported.append)]

    engine = TransformersEngine(str(tiny_whisper_dir), OPTS, "cpu")
    calls: list[int] = []
    _running_out_above(engine, 1, calls)
    seconds: list[float] = []
    with caplog.at_level("WARNING", logger="fitwhisper.transcribe.hf_engine"):
        got = list(engine.stream(names, audios, seconds.append))

    assert [i for i, _ in got] == [0, 1, 2]
    assert [t.audio for _, t in got] == names
    assert [t.text for _, t in got] == expected  # the same greedy text, batch or not
    assert calls == [2, 1, 1, 1]  # 2 ran out; one at a time from then on
    assert engine.batch == 1
    assert sum(seconds) == pytest.approx(sum(reported))  # the failed batches taken back
    assert "out of memory transcribing 2 files at once: 1 at a time" in caplog.text


def test_one_file_out_of_memory_stops_with_advice(tiny_whisper_dir: Path) -> None:
    engine = TransformersEngine(str(tiny_whisper_dir), replace(OPTS, beam_size=5), "cpu")
    _running_out_above(engine, 0, [])
    with pytest.raises(OutOfMemoryError) as err:
        list(engine.stream(["a", "b"], _tones(2)))
    assert "one file at a time" in err.value.message and "beam search of 5" in err.value.message
    assert "--beam_size 1" in err.value.hint


def test_an_error_other_than_memory_is_not_retried(tiny_whisper_dir: Path) -> None:
    engine = TransformersEngine(str(tiny_whisper_dir), OPTS, "cpu")
    calls: list[int] = []

    def broken(audios, progress):
        calls.append(len(audios))
        raise RuntimeError("shape mismatch")

    engine._generate = broken
    with pytest.raises(RuntimeError, match="shape mismatch"):
        list(engine.stream(["a", "b"], _tones(2)))
    assert calls == [2] and engine.batch == 2
