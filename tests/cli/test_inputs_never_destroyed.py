"""No command destroys what the user gave: an output that is, holds or lies inside an input
is refused before any work, and --force replaces only what the command wrote before.

Each case hashes every input file before and after the command.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from fitwhisper.cli import main


def _hashes(*roots: Path) -> dict[str, str]:
    files = [f for r in roots for f in ([r] if r.is_file() else sorted(r.rglob("*")))]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.is_file()}


@pytest.fixture
def run_folder(tiny_whisper_dir: Path, tmp_path: Path) -> Path:
    """A finished run's folder as train leaves it: final/ with the model, a log beside it."""
    run = tmp_path / "runs" / "a"
    shutil.copytree(tiny_whisper_dir, run / "final")
    (run / "train.log").write_text("a finished run\n")
    return run


@pytest.mark.parametrize("out", ["final", "."], ids=["the model folder", "the run folder"])
def test_export_onto_its_own_source_is_refused_with_force(
    run_folder: Path, out: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _hashes(run_folder)
    code = main(["export", str(run_folder / "final"), str(run_folder / out), "--force"])
    assert code == 1
    err = capsys.readouterr().err
    assert "the input MODEL" in err and "nothing was done" in err and "Traceback" not in err
    assert _hashes(run_folder) == before


def test_export_force_never_removes_a_folder_it_did_not_make(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own file")
    before = _hashes(out)
    assert main(["export", str(tiny_whisper_dir), str(out), "--format", "openai", "--force"]) == 1
    assert "did not write" in capsys.readouterr().err
    assert _hashes(out) == before
    # An earlier export of its own is replaced.
    shutil.rmtree(out)
    argv = ["export", str(tiny_whisper_dir), str(out), "--format", "openai"]
    assert main(argv) == 0
    assert json.loads((out / "fitwhisper_export.json").read_text())["format"] == "openai"
    assert main([*argv, "--force"]) == 0
    assert (out / "model.pt").is_file()


def test_transcribe_onto_its_own_recording_is_refused(
    tiny_whisper_dir: Path, tone_manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    talk = tone_manifest.parent / "clips" / "tone_0.wav"
    before = _hashes(talk)
    code = main(["transcribe", "--model", str(tiny_whisper_dir), str(talk),
                 "--output_file", str(talk)])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "--output_file" in err and "is the input audio" in err and "engine" not in err
    assert _hashes(talk) == before


def test_a_new_run_into_a_finished_runs_folder_is_refused(
    run_folder: Path, tone_manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _hashes(run_folder)
    argv = ["train", "--model", str(run_folder / "final"), "--train_manifest",
            str(tone_manifest), "--max_steps", "1", "--report_to", "none"]  # fmt: skip
    # Into the folder of the run whose model it trains from, and into a finished run's.
    assert main([*argv, "--output_dir", str(run_folder)]) == 1
    err = capsys.readouterr().err
    assert "holds the model of a finished run" in err
    assert "--output_dir" in err and "holds the input --model" in err
    assert _hashes(run_folder) == before


def test_the_rule_names_both_paths_and_how_they_meet(tmp_path: Path) -> None:
    from fitwhisper.output_guard import Output, output_problems

    model = tmp_path / "run" / "final"
    model.mkdir(parents=True)
    data = tmp_path / "train.jsonl"
    data.write_text("{}\n")
    inputs = {"MODEL": model, "--manifest": data, "hub id": "openai/whisper-small"}

    def why(path, kind="folder") -> str:
        found = output_problems([Output("OUT", path, kind)], inputs)
        return found[0] if found else ""

    assert "OUT " + str(model) + " is the input MODEL" in why(model)
    assert "holds the input MODEL" in why(tmp_path / "run")
    assert "lies inside the input MODEL" in why(model / "ct2")
    assert "is the input --manifest" in why(data, "file")
    # Another spelling of the same thing on disk: `..`, a symlink, a hard link.
    assert "is the input MODEL" in why(tmp_path / "run" / "x" / ".." / "final")
    (tmp_path / "link").symlink_to(model)
    assert "is the input MODEL" in why(tmp_path / "link")
    assert "lies inside the input MODEL" in why(tmp_path / "link" / "sub")
    (tmp_path / "hard.jsonl").hardlink_to(data)
    assert "is the input --manifest" in why(tmp_path / "hard.jsonl", "file")
    assert why(tmp_path / "exports") == ""
    # A folder that only receives files may hold the inputs (transcripts beside recordings).
    assert why(tmp_path, "files_into") == ""


def test_a_second_evaluate_into_a_folder_in_use_is_refused(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    """Two evaluations into one folder would each report the other's metrics.json: the
    second is refused at once while the first holds the folder (its lock, here held by a
    process standing in for it)."""
    import subprocess
    import sys

    out = tmp_path / "eval"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pathlib import Path\n"
         "from fitwhisper.folder_lock import output_folder\n"
         "with output_folder(Path(sys.argv[1]), 'evaluation'):\n"
         "    print('held', flush=True); time.sleep(60)\n", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        done = subprocess.run(
            [sys.executable, "-m", "fitwhisper", "evaluate", str(tiny_whisper_dir),
             str(tone_manifest), "--output_dir", str(out)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        holder.kill()
    assert done.returncode == 1
    assert f"{out} is in use by another evaluation (pid {holder.pid}" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "metrics.json").exists()
