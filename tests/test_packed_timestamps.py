"""A model fine-tuned on packed windows (timestamped labels, the
default) still produces timestamps on audio longer than 30 s, through `fitwhisper transcribe`
with the transformers engine (long-form `generate`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tests.digit_strings import make_digit_strings

pytestmark = pytest.mark.slow


def test_packed_fine_tune_keeps_timestamps_on_long_audio(shared_data: Path, tmp_path: Path) -> None:
    import soundfile

    from fitwhisper.cli import main

    data = make_digit_strings(shared_data / "fsdd-train", tmp_path / "d", n_train=24, n_eval=16)
    run = tmp_path / "run"
    code = main(
        ["train", "--model", "offline/tiny.en", "--train_manifest", str(data.train_manifest),
         "--output_dir", str(run), "--max_steps", "3", "--per_device_train_batch_size", "2",
         "--learning_rate", "1e-4", "--save_strategy", "no", "--report_to", "none", "-q",
         "--pack_clips"]
    )  # fmt: skip
    assert code == 0
    record = (run / "fitwhisper.yaml").read_text()
    assert "pack_clips: true" in record  # trained on packed windows

    # About 40 s of held-out digit strings, one after another with 1 s of silence.
    rows = [json.loads(x) for x in data.eval_manifest.read_text().splitlines()]
    pieces = []
    for r in rows:
        audio, sr = soundfile.read(str(data.eval_manifest.parent / r["audio"]), dtype="float32")
        assert sr == 8000
        pieces += [np.repeat(audio, 2), np.zeros(16_000, dtype=np.float32)]  # to 16 kHz
    audio = np.concatenate(pieces)
    assert len(audio) / 16_000 > 30

    wav = tmp_path / "long.wav"
    soundfile.write(str(wav), audio, 16_000)
    out = tmp_path / "long.json"
    code = main(
        ["transcribe", str(wav), "--model", str(run / "final"), "--engine", "transformers",
         "--output_format", "json", "--output_file", str(out), "-q"]
    )  # fmt: skip
    assert code == 0
    segments = json.loads(out.read_text())["segments"]
    starts = [s["start"] for s in segments]
    ends = [s["end"] for s in segments]
    # Several timed segments, in order, reaching past the first 30 s window.
    assert len(segments) >= 4, segments
    assert starts == sorted(starts) and all(e >= s for s, e in zip(starts, ends, strict=True))
    assert max(ends) > 30, ends
