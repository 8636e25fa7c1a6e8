"""Long recordings train: a recording with an SRT file beside it, a manifest whose rows point
into a recording (offset/duration) and one whose rows carry segments each make a run of a
tiny random Whisper, its windows and what was left out recorded in data_report.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.train import train


def _srt_time(s: float) -> str:
    ms = round(s * 1000)
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d},{ms % 1000:03d}"


CUES = [(0.5, 6.0, "the first words"), (7.0, 18.5, "then more"), (19.0, 28.0, "and a pause"),
        (29.0, 36.0, "after the join"), (37.5, 44.0, "the end")]  # fmt: skip


def _recording(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(45 * 16000) / 16000
    x = 0.3 * np.sin(2 * np.pi * (200 + 3 * t) * t) + 0.01 * np.random.default_rng(0).normal(
        size=t.size
    )
    path = folder / "talk.wav"
    sf.write(path, x.astype(np.float32), 16000)
    return path


def _source(kind: str, tmp_path: Path) -> Path:
    audio = _recording(tmp_path / "data")
    if kind == "srt":
        blocks = [f"{k}\n{_srt_time(a)} --> {_srt_time(b)}\n{t}\n" for k, (a, b, t) in
                  enumerate(CUES, start=1)]  # fmt: skip
        (audio.parent / "talk.srt").write_text("\n".join(blocks), encoding="utf-8")
        return audio.parent
    if kind == "offsets":
        rows = [
            {"audio": audio.name, "offset": a, "duration": b - a, "text": t} for a, b, t in CUES
        ]
    else:
        rows = [{"audio": audio.name, "segments": [{"start": a, "end": b, "text": t}
                                                   for a, b, t in CUES]}]  # fmt: skip
    path = audio.parent / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["srt", "offsets", "segments"])
def test_long_recordings_train(kind: str, tiny_whisper_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = train(
        ModelConfig(model=str(tiny_whisper_dir)),
        DataConfig(),
        TrainConfig(
            output_dir=str(out),
            train_manifest=str(_source(kind, tmp_path)),
            per_device_train_batch_size=2,
            max_steps=2,
            warmup_steps=0,
            eval_strategy="no",
            save_strategy="no",
            report_to="none",
            # Every window both ways across the two steps' draws: context and timestamps.
            previous_text_share=1.0,
            segment_timestamp_share=0.5,
            seed=0,
        ),
    )
    assert result.global_step == 2
    report = json.loads((out / "data_report.json").read_text())["train"]
    if kind == "offsets":  # five clips cut from the recording by their offsets
        assert report["used"] == 5 and "long_recordings" not in report
    else:  # 0.5-28.0 s is one window; 29.0 s ends the first at 28.0 and starts the second
        assert report["long_recordings"] == {
            "recordings": 1,
            "windows": 2,
            "segments_in_windows": 5,
            "segments_left_out": {},
            "left_out_examples": [],
        }


@pytest.mark.parametrize("asked", [False, True])
def test_clips_take_their_speakers_previous_clip_only_when_asked(
    asked: bool, tiny_whisper_dir: Path, tmp_path: Path, caplog
) -> None:
    """--speaker_context: the clips of a manifest with a speaker column train with their
    speaker's previous clip as context (the run says how many); without it, as before."""
    import logging

    audio = _recording(tmp_path / "data")
    rows = [
        {"audio": audio.name, "offset": a, "duration": b - a, "text": t, "speaker": "s1"}
        for a, b, t in CUES
    ]
    manifest = audio.parent / "train.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="fitwhisper"):
        result = train(
            ModelConfig(model=str(tiny_whisper_dir)),
            DataConfig(),
            TrainConfig(
                output_dir=str(tmp_path / "run"),
                train_manifest=str(manifest),
                per_device_train_batch_size=2,
                max_steps=1,
                eval_strategy="no",
                save_strategy="no",
                report_to="none",
                previous_text_share=1.0,
                speaker_context=asked,
            ),
        )
    assert result.global_step == 1
    said = [r.getMessage() for r in caplog.records if "previous clip as context" in r.getMessage()]
    assert said == (["4 training clips have their speaker's previous clip as context; 100% of "
                     "them train with it (--previous_text_share)"] if asked else [])  # fmt: skip
