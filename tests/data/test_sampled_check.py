"""`train --check sample:N`: the check decodes N rows drawn at random and reads only the
others' headers; a header-only clip that fails when training loads it is replaced by the
next item, logged and counted in data_report.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
from tests.conftest import write_tone

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.data import check as check_module
from fitwhisper.data.late_check import (
    RECORD_FILE,
    ReplacingUnfit,
    UnfitClip,
    load_training_audio,
    record_failures,
)
from fitwhisper.data.sampled_check import sample_size, sampled_rows
from fitwhisper.data.usable import usable_rows
from fitwhisper.errors import ConfigError, DataError

ROWS, SAMPLE = 12, 4


def _manifest(folder: Path) -> tuple[Path, dict[int, str]]:
    """12 rows; two rows outside the sample hold a silent and a NaN clip (their headers
    are fine), one a file that is no audio at all (its header fails)."""
    unsampled = sorted(set(range(ROWS)) - sampled_rows(ROWS, SAMPLE))
    bad = {unsampled[0]: "silent", unsampled[1]: "nan", unsampled[2]: "garbage"}
    rows = []
    for i in range(ROWS):
        clip = folder / f"clips/{i}.wav"
        kind = bad.get(i)
        if kind is None:
            write_tone(clip, 1.0 + 0.05 * i, freq=300.0 + 40 * i)
        elif kind == "garbage":
            clip.write_bytes(b"this is not audio at all" * 40)
        else:
            audio = np.zeros(16_000, np.float32)
            if kind == "nan":
                audio[::2] = np.nan
            soundfile.write(str(clip), audio, 16_000, subtype="FLOAT")
        rows.append({"audio_path": f"clips/{i}.wav", "text": f"clip number {i}"})
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, bad


def test_check_values() -> None:
    assert sample_size("full") is None
    assert sample_size("sample:250") == 250
    for wrong in ("sample:0", "sample:-3", "sample:", "sample:x", "half", ""):
        with pytest.raises(ConfigError, match="neither full nor sample:N"):
            sample_size(wrong)
    # The same rows every run; all of them when the sample is as large as the data.
    assert sampled_rows(100, 10) == sampled_rows(100, 10) and len(sampled_rows(100, 10)) == 10
    assert sampled_rows(5, 10) == frozenset(range(5))


def test_a_sampled_check_decodes_only_its_sample(tmp_path: Path, monkeypatch) -> None:
    path, bad = _manifest(tmp_path)
    decoded = []
    real = check_module.load_audio_with_info

    def counting(source):
        decoded.append(Path(source).name)
        return real(source)

    monkeypatch.setattr(check_module, "load_audio_with_info", counting)
    data = usable_rows(path, DataConfig(bad_rows="skip"), sample=SAMPLE)

    assert sorted(decoded) == sorted(f"{i}.wav" for i in sampled_rows(ROWS, SAMPLE))
    # The header catches the file that is no audio; silence and NaN need the samples.
    garbage = next(i for i, kind in bad.items() if kind == "garbage")
    assert [s.split()[0].rsplit(":", 1)[1] for s in data.skipped] == [str(garbage + 1)]
    header_only = {r.index for r in data.rows if r.header_only}
    assert header_only == set(range(ROWS)) - sampled_rows(ROWS, SAMPLE) - {garbage}
    # Durations still come for every row (packing and trimming cut clips at them).
    assert all(d > 0.9 for d in data.durations)
    summary = data.summary(path, None)
    assert (summary["decoded"], summary["decoded_unfit"], summary["header_only"]) == (4, 0, 8)

    # A full check of the same data decodes every clip the sampled one did not.
    decoded.clear()
    full = usable_rows(path, DataConfig(bad_rows="skip"))
    assert len(decoded) == ROWS - SAMPLE
    assert len(full.skipped) == 3 and not any(r.header_only for r in full.rows)


def test_a_header_only_clip_is_checked_when_loaded(tmp_path: Path) -> None:
    path, bad = _manifest(tmp_path)
    rows = usable_rows(path, DataConfig(bad_rows="skip"), sample=SAMPLE).rows
    by_index = {r.index: r for r in rows}
    silent = next(i for i, kind in bad.items() if kind == "silent")
    nan = next(i for i, kind in bad.items() if kind == "nan")
    with pytest.raises(UnfitClip, match="silent_audio"):
        load_training_audio(by_index[silent])
    with pytest.raises(UnfitClip, match="nonfinite_audio"):
        load_training_audio(by_index[nan])
    good = next(r for r in rows if r.header_only and r.index not in bad)
    assert load_training_audio(good).size > 0


class _Items:
    """Items 0..n-1, those in `unfit` failing as an unfit clip does."""

    lengths = [1.0, 2.0, 3.0, 4.0, 5.0]

    def __init__(self, unfit: set[int]) -> None:
        self.unfit = unfit

    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int) -> dict:
        if i in self.unfit:

            class _Row:
                line, id = i + 1, f"clip-{i}"

            raise UnfitClip(_Row, [check_module.Problem("silent_audio", "peak 0")])
        return {"item": i}


def test_unfit_items_are_replaced_by_the_next_and_counted(tmp_path: Path) -> None:
    (tmp_path / "data_report.json").write_text(json.dumps({"train": {"used": 5}}))
    items = ReplacingUnfit(_Items({1, 2, 4}), tmp_path / RECORD_FILE)
    assert [items[i]["item"] for i in range(5)] == [0, 3, 3, 3, 0]  # 4 wraps round to 0
    assert items.lengths == _Items.lengths  # the length-grouped sampler still sees them
    # Each failing row once in the report, however often it was met.
    assert record_failures(tmp_path) == 3
    report = json.loads((tmp_path / "data_report.json").read_text())
    failed = report["train"]["failed_while_training"]
    assert failed["rows"] == 3 and [e["id"] for e in failed["first"]] == [
        "clip-1",
        "clip-2",
        "clip-4",
    ]
    with pytest.raises(DataError, match="items in a row"):
        ReplacingUnfit(_Items(set(range(5))), tmp_path / RECORD_FILE)[0]


def test_training_on_a_sampled_check_skips_the_clips_that_fail(
    tiny_whisper_dir: Path, tmp_path: Path
) -> None:
    from fitwhisper.train import train, validate

    path, bad = _manifest(tmp_path)
    out = tmp_path / "run"
    cfg = TrainConfig(
        output_dir=str(out),
        train_manifest=str(path),
        check=f"sample:{SAMPLE}",
        per_device_train_batch_size=4,
        num_train_epochs=1,
        eval_strategy="no",
        save_strategy="no",
        seed=0,
    )
    with pytest.raises(ConfigError, match="neither full nor sample:N"):
        validate(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(), _with(cfg, "sample"))
    result = train(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(bad_rows="skip"), cfg)

    assert result.global_step == 3  # 11 usable rows (the garbage file skipped), batch 4
    report = json.loads((out / "data_report.json").read_text())["train"]
    assert report["decoded"] == SAMPLE and report["header_only"] == ROWS - SAMPLE
    failed = report["failed_while_training"]
    silent_nan = {i + 1 for i, kind in bad.items() if kind != "garbage"}
    assert failed["rows"] == 2 and {e["line"] for e in failed["first"]} == silent_nan


def _with(cfg: TrainConfig, check: str) -> TrainConfig:
    import dataclasses

    return dataclasses.replace(cfg, check=check)
