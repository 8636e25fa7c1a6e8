"""Every manifest format loads into the same rows; bad rows become row problems."""

from __future__ import annotations

import csv
import json

import pytest

from fitwhisper.data.audio import InMemoryAudio, load_audio
from fitwhisper.data.manifest import load_manifest, select
from fitwhisper.errors import DataError

TEXTS = ["first clip", "第二個 clip", "third, with a comma"]


@pytest.fixture
def clips(tmp_path, audio):
    (tmp_path / "clips").mkdir()
    return [audio.write_clip(tmp_path / "clips" / f"c{i}.wav", seed=i) for i in range(3)]


def _records(clips):
    return [
        {"audio_path": f"clips/{c.name}", "text": t, "language": "zh" if i == 1 else "en"}
        for i, (c, t) in enumerate(zip(clips, TEXTS, strict=True))
    ]


def _assert_rows(manifest, clips):
    assert [r.text for r in manifest.rows] == TEXTS
    assert [r.audio for r in manifest.rows] == clips  # relative paths resolved, absolute
    assert all(r.audio.is_absolute() for r in manifest.rows)
    assert [r.index for r in manifest.rows] == [0, 1, 2]
    assert all(r.problem is None for r in manifest.rows)


def test_json_list_the_seeds_format(tmp_path, clips):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_records(clips), ensure_ascii=False, indent=2), encoding="utf-8")

    m = load_manifest(path)

    assert m.format == "json" and m.audio_column == "audio_path" and m.text_column == "text"
    _assert_rows(m, clips)
    assert [r.line for r in m.rows] == [2, 7, 12]  # where each object starts in the file
    assert [r.language for r in m.rows] == ["en", "zh", "en"]


def test_jsonl(tmp_path, clips):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in _records(clips)]
    path.write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n", encoding="utf-8")

    m = load_manifest(path)

    _assert_rows(m, clips)
    assert [r.line for r in m.rows] == [1, 3, 4]  # blank lines still count


@pytest.mark.parametrize("suffix,delimiter", [(".csv", ","), (".tsv", "\t")])
def test_csv_and_tsv(tmp_path, clips, suffix, delimiter):
    path = tmp_path / f"m{suffix}"
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["audio_path", "text", "language"], delimiter=delimiter)
        w.writeheader()
        w.writerows(_records(clips))

    m = load_manifest(path)

    assert m.format == suffix[1:]
    _assert_rows(m, clips)
    assert [r.line for r in m.rows] == [2, 3, 4]  # the header is line 1


def test_audiofolder(tmp_path, clips):
    with (tmp_path / "metadata.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file_name", "transcription"])
        w.writerows([f"clips/{c.name}", t] for c, t in zip(clips, TEXTS, strict=True))

    m = load_manifest(tmp_path)

    assert m.format == "audiofolder" and m.audio_column == "file_name"
    assert m.text_column == "transcription"
    _assert_rows(m, clips)


def test_saved_dataset_with_path_column(tmp_path, clips):
    import datasets

    ds = datasets.Dataset.from_dict(
        {"audio": [f"../clips/{c.name}" for c in clips], "sentence": TEXTS}
    )
    ds.save_to_disk(str(tmp_path / "ds"))

    m = load_manifest(tmp_path / "ds")

    assert m.format == "datasets" and (m.audio_column, m.text_column) == ("audio", "sentence")
    _assert_rows(m, clips)
    assert [r.line for r in m.rows] == [1, 2, 3]


def test_saved_dataset_with_audio_feature(tmp_path, clips):
    """save_to_disk embeds an Audio column's bytes; rows read them lazily from the dataset."""
    import datasets

    ds = datasets.Dataset.from_dict({"audio": [str(c) for c in clips], "text": TEXTS})
    ds.cast_column("audio", datasets.Audio(sampling_rate=16000)).save_to_disk(str(tmp_path / "ds"))
    for c in clips:
        c.unlink()  # prove nothing reads the original files

    m = load_manifest(tmp_path / "ds")

    assert all(isinstance(r.audio, InMemoryAudio) for r in m.rows)
    assert str(m.rows[2].audio) == "ds[2] (c2.wav)"
    assert [r.text for r in m.rows] == TEXTS
    assert load_audio(m.rows[2].audio).shape == (16000,)


def test_row_problems_do_not_stop_loading(tmp_path, clips):
    good = json.dumps({"audio_path": "clips/c0.wav", "text": "fine"}).encode()
    path = tmp_path / "m.jsonl"
    path.write_bytes(
        good
        + b"\n{not json\n"
        + b'{"audio_path": "clips/c1.wav"}\n'
        + b'{"text": "no audio"}\n'
        + b'{"audio_path": "clips/c2.wav", "text": "caf\xe9 in latin-1"}\n'
        + b"[1, 2]\n"
    )

    rows = load_manifest(path).rows

    assert [(r.line, r.problem) for r in rows] == [
        (1, None),
        (2, "unparsable_row"),
        (3, "missing_field"),
        (4, "missing_field"),
        (5, "bad_encoding"),
        (6, "unparsable_row"),
    ]
    assert rows[4].text == "caf\ufffd in latin-1"  # shown, with the bad byte replaced
    assert "not valid JSON" in rows[1].detail


def test_missing_column_lists_the_columns(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("wav_file,words\na.wav,hello\n", encoding="utf-8")

    with pytest.raises(DataError) as e:
        load_manifest(path)

    assert "has no audio column" in e.value.message and "wav_file, words" in e.value.message
    assert e.value.hint == "name the audio column with --audio_column"
    m = load_manifest(path, audio_column="wav_file", text_column="words")
    assert m.rows[0].text == "hello"
    with pytest.raises(DataError, match="has no column 'speech'"):
        load_manifest(path, audio_column="speech")


def test_file_level_errors_name_the_path(tmp_path):
    with pytest.raises(DataError, match=r"manifest .*nope\.jsonl not found"):
        load_manifest(tmp_path / "nope.jsonl")
    (tmp_path / "m.txt").write_text("a.wav hello\n")
    with pytest.raises(DataError, match="unknown manifest type '.txt'") as e:
        load_manifest(tmp_path / "m.txt")
    assert "audiofolder" in e.value.hint
    (tmp_path / "broken.json").write_text('[{"audio_path": "a.wav", "text": "x"},\n{oops}]')
    with pytest.raises(DataError, match="not a valid JSON list: .* at line 2"):
        load_manifest(tmp_path / "broken.json")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="has no rows"):
        load_manifest(tmp_path / "empty.jsonl")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="without metadata.csv"):
        load_manifest(tmp_path / "folder")


def test_select():
    assert select([1, 2, 3], None) == [1, 2, 3]
    assert select([1, 2, 3], 2) == [1, 2]
    assert select([1, 2, 3], 10) == [1, 2, 3]


def _load_in_thread(path):
    """load_manifest(path) in a thread, so a reader that blocks (the bug) fails the test
    instead of hanging it: returns the exception raised, or the thread if still blocked."""
    import threading

    outcome = {}

    def load():
        try:
            load_manifest(path)
        except Exception as e:  # noqa: BLE001 - handed to the test
            outcome["error"] = e

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(30)  # a hang guard, not a timing check: the refusal needs no I/O at all
    return outcome.get("error", t)


def test_a_fifo_manifest_is_refused_unread(tmp_path):
    import os

    fifo = tmp_path / "train.jsonl"
    os.mkfifo(fifo)
    result = _load_in_thread(fifo)
    if not isinstance(result, Exception):  # blocked in open(): unblock it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_manifest opened the FIFO")
    assert isinstance(result, DataError)
    assert result.message == (
        f"manifest {fifo} is a FIFO (named pipe), not a file or folder: not read"
    )
    assert "save a stream to a file first" in result.hint


def test_a_character_device_manifest_is_refused_unread():
    from pathlib import Path

    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    result = _load_in_thread(Path("/dev/zero"))
    assert isinstance(result, DataError)
    assert (
        result.message == "manifest /dev/zero is a character device, not a file or folder: not read"
    )
