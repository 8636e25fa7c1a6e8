"""check-data finds every kind of bad row, names it, and decides fit or not."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from fitwhisper.cli import main
from fitwhisper.config import DataConfig
from fitwhisper.data.check import PROBLEMS, apply_bad_row_policy, check_manifest
from fitwhisper.data.manifest import load_manifest
from fitwhisper.data.segments import SEGMENT_PROBLEMS
from fitwhisper.errors import DataError


@pytest.fixture
def bad_manifest(tmp_path, audio):
    """A JSONL manifest with two good rows and one row per problem (label length aside)."""
    c = tmp_path / "clips"
    c.mkdir()
    good0 = audio.write_clip(c / "good0.wav", seconds=1.5, seed=0)
    good1 = audio.write_clip(c / "good1.flac", seconds=1.0, seed=1)
    shutil.copy(good0, c / "copy_of_good0.wav")
    shutil.copy(good1, c / "copy_of_good1.flac")
    (c / "garbage.wav").write_bytes(b"RIFF" + b"\x00garbage" * 50)
    sf.write(c / "empty.wav", np.zeros(0, dtype=np.float32), 16000)
    sf.write(c / "silent.wav", np.zeros(16000, dtype=np.float32), 16000)
    audio.write_clip(c / "short.wav", seconds=0.05, seed=2)
    audio.write_clip(c / "long.flac", seconds=31.0, sr=8000, seed=3)
    audio.write_clip(c / "untext.wav", seed=4)
    audio.write_clip(c / "latin1.wav", seed=5)
    audio.write_clip(c / "notext.wav", seed=6)
    lines = [
        ("clips/good0.wav", "a good clip"),
        ("clips/good1.flac", "another good clip"),
        ("clips/nowhere.wav", "missing"),
        ("clips/garbage.wav", "garbage"),
        ("clips/empty.wav", "empty"),
        ("clips/silent.wav", "silent"),
        ("clips/short.wav", "short"),
        ("clips/long.flac", "long"),
        ("clips/untext.wav", "  "),
        ("clips/copy_of_good0.wav", "different words"),
        ("clips/copy_of_good1.flac", "another good clip"),
    ]
    body = b"".join(json.dumps({"audio_path": a, "text": t}).encode() + b"\n" for a, t in lines)
    body += b'{"audio_path": "clips/latin1.wav", "text": "caf\xe9"}\n'
    body += b"{broken json\n"
    body += b'{"audio_path": "clips/notext.wav"}\n'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(body)
    return path


EXPECTED = {  # line -> problem
    3: "missing_file",
    4: "undecodable_audio",
    5: "empty_audio",
    6: "silent_audio",
    7: "too_short",
    8: "too_long",
    9: "empty_text",
    10: "duplicate_audio",
    11: "duplicate_pair",
    12: "bad_encoding",
    13: "unparsable_row",
    14: "missing_field",
}


def test_every_problem_is_found_on_its_row(bad_manifest):
    report = check_manifest(load_manifest(bad_manifest), DataConfig(), progress=False)

    found = {r.row.line: [p.kind for p in r.problems] for r in report.rows}
    assert found == {1: [], 2: [], **{line: [kind] for line, kind in EXPECTED.items()}}
    assert not report.ok
    assert report.counts() == {kind: 1 for kind in EXPECTED.values()}
    by_line = {r.row.line: r for r in report.rows}
    assert by_line[10].problems[0].detail == "same audio as bad.jsonl:1"
    assert by_line[11].problems[0].detail == "same audio and transcript as bad.jsonl:2"
    assert by_line[8].problems[0].detail == "31.00 s > --max_audio_len 30 s"
    assert (by_line[2].sample_rate_hz, by_line[2].channels) == (16000, 1)
    assert by_line[1].duration_s == pytest.approx(1.5)
    assert report.total_hours == pytest.approx(sum(r.duration_s or 0 for r in report.rows) / 3600)


def test_label_length_uses_the_tokenizer(tmp_path, audio, en_processor):
    audio.write_clip(tmp_path / "a.wav", seed=0)
    audio.write_clip(tmp_path / "b.wav", seed=1)
    rows = [
        {"audio_path": "a.wav", "text": "short"},
        {"audio_path": "b.wav", "text": "word " * 500},
    ]
    (tmp_path / "m.json").write_text(json.dumps(rows))
    m = load_manifest(tmp_path / "m.json")

    report = check_manifest(m, DataConfig(), tokenizer=en_processor.tokenizer, progress=False)

    assert report.rows[0].ok
    assert report.rows[0].label_tokens == 4  # <|startoftranscript|><|notimestamps|> short <eot>
    assert [p.kind for p in report.rows[1].problems] == ["label_too_long"]
    assert "> --max_label_tokens 448" in report.rows[1].problems[0].detail


def test_bad_row_policy_error_names_rows_and_the_fix(bad_manifest, tmp_path):
    report = check_manifest(load_manifest(bad_manifest), DataConfig(), progress=False)

    with pytest.raises(DataError) as e:
        apply_bad_row_policy(report, DataConfig(), report_path=tmp_path / "r.csv")

    assert e.value.message.startswith(f"12 of 14 rows of {bad_manifest} are unfit for training")
    assert "  bad.jsonl:3: missing_file (" in e.value.message
    assert "  ... and 7 more" in e.value.message
    assert "--bad_rows skip" in e.value.hint and "check-data" in e.value.hint
    assert str(tmp_path / "r.csv") in e.value.hint


def test_bad_row_policy_skip_counts_what_it_skips(bad_manifest, caplog):
    report = check_manifest(load_manifest(bad_manifest), DataConfig(), progress=False)

    with caplog.at_level("WARNING", logger="fitwhisper"):
        rows = apply_bad_row_policy(report, DataConfig(bad_rows="skip"))

    assert [r.line for r in rows] == [1, 2]
    assert f"Skipped 12 of 14 rows of {bad_manifest}: 1 unparsable_row" in caplog.text
    assert "1 duplicate_pair" in caplog.text


def test_report_files(bad_manifest, tmp_path):
    report = check_manifest(load_manifest(bad_manifest), DataConfig(), progress=False)

    report.write(tmp_path / "r.csv")
    report.write(tmp_path / "r.jsonl")

    with (tmp_path / "r.csv").open(encoding="utf-8") as f:
        csv_rows = list(csv.DictReader(f))
    json_rows = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(csv_rows) == len(json_rows) == 14
    assert csv_rows[2]["problems"] == json_rows[2]["problems"] == "missing_file"
    assert json_rows[0]["ok"] is True and json_rows[0]["duration_s"] == 1.5


def test_cli_lists_each_bad_row_and_exits_1(bad_manifest, tmp_path, capsys):
    code = main(["check-data", str(bad_manifest), "--report", str(tmp_path / "r.jsonl")])

    out, err = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in out + err
    for line, kind in EXPECTED.items():
        assert f"bad.jsonl:{line}  {kind}  " in out
    assert "rows fit for training        2  of 14" in out
    assert "NOT fit for training" in out
    assert "not checked (no --model given)" in out
    assert (tmp_path / "r.jsonl").is_file()


def test_cli_clean_manifest_exits_0(tmp_path, audio, capsys):
    audio.write_clip(tmp_path / "a.wav", seed=0)
    audio.write_clip(tmp_path / "b.wav", seed=1)
    (tmp_path / "m.csv").write_text("path,transcript\na.wav,hello\nb.wav,world\n")

    code = main(["check-data", str(tmp_path / "m.csv")])

    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "\nfit for training" in out and "rows with problems" not in out


def test_cli_file_level_error_is_one_message(tmp_path, capsys):
    code = main(["check-data", str(tmp_path / "missing.jsonl")])

    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith(f"error: manifest {tmp_path / 'missing.jsonl'} not found")
    assert "Traceback" not in err


def test_cli_caps_the_bad_row_list(tmp_path, capsys):
    lines = [json.dumps({"audio_path": f"gone{i}.wav", "text": "x"}) for i in range(60)]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")

    assert main(["check-data", str(tmp_path / "m.jsonl")]) == 1

    out = capsys.readouterr().out
    assert "m.jsonl:50  missing_file" in out and "m.jsonl:51  missing_file" not in out
    assert "... and 10 more, see --report FILE" in out


def test_every_problem_kind_is_described():
    more = {"label_too_long", "unknown_language", "nonfinite_audio", "clipped_audio"}
    more |= {"span_past_end", *SEGMENT_PROBLEMS}  # tests/data/test_recordings.py
    assert set(EXPECTED.values()) | more == set(PROBLEMS)


@pytest.fixture
def sample_problem_manifest(tmp_path, audio):
    """Rows: a good clip, a float WAV with 3 NaN and 1 Inf samples, a clip with 5% of its
    samples at full scale, and one with 0.5% (under the 1% rule)."""
    good = audio.tone(16000, 1.0, seed=0)
    nan = audio.tone(16000, 1.0, seed=1, freq=500.0)
    nan[[10, 500, 900]] = np.nan
    nan[1000] = np.inf
    clipped = audio.tone(16000, 1.0, seed=2, freq=600.0)
    clipped[::20] = 1.0  # 5%
    touching = audio.tone(16000, 1.0, seed=3, freq=700.0)
    touching[::200] = -1.0  # 0.5%
    for name, x in (("good", good), ("nan", nan), ("clipped", clipped), ("touch", touching)):
        sf.write(tmp_path / f"{name}.wav", x, 16000, subtype="FLOAT")
    lines = [{"audio_path": f"{n}.wav", "text": n} for n in ("good", "nan", "clipped", "touch")]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_nonfinite_samples_are_unfit_and_clipping_is_a_warning(sample_problem_manifest):
    report = check_manifest(load_manifest(sample_problem_manifest), DataConfig(), progress=False)

    found = {r.row.line: [p.kind for p in r.problems] for r in report.rows}
    assert found == {1: [], 2: ["nonfinite_audio"], 3: ["clipped_audio"], 4: []}
    assert report.rows[1].problems[0].detail == "4 NaN or Inf samples"
    assert report.rows[2].problems[0].detail.startswith("5.0% of samples at full scale")
    # Clipping warns; the row stays fit for training. The NaN row does not.
    assert [r.row.line for r in report.rows if r.ok] == [1, 3, 4]
    assert report.counts() == {"nonfinite_audio": 1, "clipped_audio": 1}
    assert report.counts(warnings=False) == {"nonfinite_audio": 1}
    with pytest.raises(DataError) as e:
        apply_bad_row_policy(report, DataConfig())
    assert e.value.message.startswith("1 of 4 rows")
    assert "m.jsonl:2: nonfinite_audio (4 NaN or Inf samples)" in e.value.message
    assert "clipped" not in e.value.message


def test_cli_flags_nan_audio_and_lists_clipping_as_a_warning(sample_problem_manifest, capsys):
    assert main(["check-data", str(sample_problem_manifest)]) == 1

    out = capsys.readouterr().out
    assert "m.jsonl:2  nonfinite_audio  4 NaN or Inf samples" in out
    assert "m.jsonl:3  clipped_audio  5.0% of samples at full scale" in out
    assert "(warning)" in out
    assert "rows fit for training        3  of 4" in out
