"""Subtitles from a file longer than one 30 s window: no cue overlaps the one before or
goes back in time, in every engine and mode, and no text is lost on the way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
from tests.transcribe.test_long_audio import _cues

from fitwhisper.cli import main

pytestmark = pytest.mark.slow

SR = 16_000
GAP_S = 0.5


def _file(shared_data: Path, out: Path, folder: str, start: int, seconds: float) -> Path:
    """Clips of `folder` from row `start` laid end to end with 0.5 s pauses, just past
    `seconds` (over one 30 s window, to keep the test short)."""
    from fitwhisper.data.audio import load_audio

    rows = [
        json.loads(x) for x in (shared_data / folder / "manifest.jsonl").read_text().splitlines()
    ]
    rows = [r for r in rows if r.get("kind", "sentence") == "sentence"][start:]
    parts, t = [], 0.0
    for r in rows:
        audio = load_audio(shared_data / folder / r["audio"])
        parts += [audio, np.zeros(int(GAP_S * SR), np.float32)]
        t += len(audio) / SR + GAP_S
        if t > seconds:
            break
    soundfile.write(str(out), np.concatenate(parts), SR)
    return out


@pytest.fixture(scope="module")
def mandarin(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 43 s of read AISHELL sentences; in ct2's batched mode, before the fix, the first
    # chunk's last cue ran to 33.84 s and the next began at 33.58 s.
    return _file(shared_data, tmp_path_factory.mktemp("zh") / "zh.flac", "aishell-s0150", 112, 40)


@pytest.fixture(scope="module")
def english(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _file(shared_data, tmp_path_factory.mktemp("en") / "en.flac", "speechocean-train", 0, 32)


def _check(out: Path, stem: str) -> None:
    cues = _cues((out / f"{stem}.srt").read_text())
    assert len(cues) >= 2
    assert all(s <= e for s, e, _ in cues)
    overlaps = [(a, b) for a, b in zip(cues, cues[1:], strict=False) if b[0] < a[1]]
    assert not overlaps
    data = json.loads((out / f"{stem}.json").read_text())
    assert data["text"] == "".join(s["text"] for s in data["segments"]).strip()
    assert cues[-1][1] > 30.0  # past the first window


@pytest.mark.parametrize(
    ("mode", "timestamps"), [("batched", "segment"), ("batched", "word"), ("sequential", "segment")]
)
def test_ct2_cues_never_overlap(mandarin: Path, tmp_path: Path, mode: str, timestamps: str):
    argv = ["transcribe", "--model", "offline/base", "--language", "zh", "--engine", "ct2",
            "--mode", mode, "--timestamps", timestamps, str(mandarin), "--output_dir",
            str(tmp_path), "--output_format", "srt,json"]  # fmt: skip
    assert main(argv) == 0
    _check(tmp_path, "zh")


def test_transformers_cues_never_overlap(english: Path, tmp_path: Path):
    argv = ["transcribe", "--model", "offline/tiny.en", "--engine", "transformers",
            "--no_temperature_fallback", str(english), "--output_dir", str(tmp_path),
            "--output_format", "srt,json"]  # fmt: skip
    assert main(argv) == 0
    _check(tmp_path, "en")
