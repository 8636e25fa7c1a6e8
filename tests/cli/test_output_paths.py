"""Output folders that cannot be written are refused before the work, not after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.cli import main


@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_an_output_folder_under_a_file_is_refused_before_the_model_runs(
    command: str, tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    out = a_file / "out"
    argv = {
        "evaluate": [
            "evaluate",
            str(tiny_whisper_dir),
            str(tone_manifest),
            "--output_dir",
            str(out),
        ],
        "export": ["export", str(tiny_whisper_dir), str(out)],
    }[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"cannot be made: {a_file} is a file, not a folder" in err
    assert "Traceback" not in err and a_file.read_text() == "mine\n"
