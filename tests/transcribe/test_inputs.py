"""Which files `fitwhisper transcribe` takes, and what it says about the ones it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.errors import DataError
from fitwhisper.transcribe.inputs import collect_inputs


def test_files_folders_and_list_files_expand_in_order(tmp_path: Path) -> None:
    (tmp_path / "rec" / "sub").mkdir(parents=True)
    for name in ("rec/b.flac", "rec/sub/a.wav", "rec/notes.txt", "one.mp3", "listed.ogg"):
        (tmp_path / name).write_bytes(b"x")
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n\nlisted.ogg\n" + str(tmp_path / "one.mp3") + "\n")
    files, problems = collect_inputs(
        [str(tmp_path / "one.mp3"), str(tmp_path / "rec")], str(listing)
    )
    assert problems == []
    # one.mp3 is named twice and kept once; notes.txt is not audio.
    assert [f.relative_to(tmp_path).as_posix() for f in files] == [
        "one.mp3",
        "rec/b.flac",
        "rec/sub/a.wav",
        "listed.ogg",
    ]


def test_missing_file_and_folder_without_audio_are_problems_not_failures(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.md").write_text("no audio here")
    (tmp_path / "ok.wav").write_bytes(b"x")
    files, problems = collect_inputs(
        [str(tmp_path / "nope.wav"), str(tmp_path / "empty"), str(tmp_path / "ok.wav")]
    )
    assert files == [tmp_path / "ok.wav"]
    assert [p.format().splitlines()[0] for p in problems] == [
        f"error: {tmp_path / 'nope.wav'}: no such file",
        f"error: {tmp_path / 'empty'}: the folder holds no audio files",
    ]


def test_unreadable_list_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read the audio list"):
        collect_inputs([], str(tmp_path / "missing.txt"))
