"""The run folder: one run at a time, checked before anything loads, and left as it was by a
user error (one paragraph, exit 1, no traceback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fitwhisper.cli import main

REPO = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
}


def _argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train", "--model", str(model), "--train_manifest", str(manifest),
        "--output_dir", str(out), "--max_steps", "2", "--save_steps", "2",
        "--per_device_train_batch_size", "2", "-q", *extra,
    ]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, tuple[int, int]] | None:
    """Each entry of `folder` (recursively) with its size and modification time."""
    if not folder.exists():
        return None
    if folder.is_file():
        return {"": (folder.stat().st_size, folder.stat().st_mtime_ns)}
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    }


def _user_error(argv: list[str], capsys) -> str:
    """Run the command; it must fail with a one-paragraph error and no traceback."""
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_a_second_run_into_a_busy_folder_is_refused_naming_the_holder(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    # Another process holds the folder, as a running `train` does.
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time; from pathlib import Path; "
            "from fitwhisper.folder_lock import output_folder\n"
            "with output_folder(Path(sys.argv[1])):\n"
            "    print('held', flush=True); time.sleep(600)"
        ), str(out)],
        env=ENV, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _snapshot(out)
        err = _user_error(_argv(tiny_whisper_dir, tone_manifest, out), capsys)
        assert f"{out} is in use by another training run (pid {holder.pid} on " in err
        assert "hint: wait for that run to end" in err
        assert _snapshot(out) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # A killed holder's lock goes with its process: the stale file blocks nothing.
    assert (out / ".fitwhisper.lock").exists()
    assert main(_argv(tiny_whisper_dir, tone_manifest, out)) == 0
    assert (out / "final" / "model.safetensors").is_file()
    assert not (out / ".fitwhisper.lock").exists()  # a run that ends removes its lock


def test_output_dir_that_cannot_be_a_folder_is_refused_before_anything_loads(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    before = _snapshot(a_file)
    err = _user_error(_argv(tiny_whisper_dir, tone_manifest, a_file), capsys)
    assert f"--output_dir {a_file} is a file, not a folder" in err
    assert _snapshot(a_file) == before

    under = a_file / "run"
    err = _user_error(_argv(tiny_whisper_dir, tone_manifest, under), capsys)
    assert f"--output_dir {under} cannot be made: {a_file} is a file" in err
    assert _snapshot(a_file) == before


def _read_only_folder() -> Path | None:
    """A folder nobody may write in, root included (sysfs refuses new files)."""
    try:
        (Path("/sys") / "fitwhisper-probe").mkdir()
    except OSError:
        return Path("/sys")
    return None


@pytest.mark.skipif(_read_only_folder() is None, reason="no folder here refuses root")
def test_output_dir_that_cannot_be_written_is_refused(
    tiny_whisper_dir: Path, tone_manifest: Path, capsys
) -> None:
    out = _read_only_folder() / "fitwhisper-run"
    err = _user_error(_argv(tiny_whisper_dir, tone_manifest, out), capsys)
    assert f"--output_dir {out} cannot be written" in err
    assert not out.exists()


def test_model_folder_without_weights_is_refused_and_no_run_folder_is_made(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    import shutil

    copy = tmp_path / "half-copied"
    shutil.copytree(tiny_whisper_dir, copy)
    (copy / "model.safetensors").unlink()
    out = tmp_path / "run"
    err = _user_error(_argv(copy, tone_manifest, out), capsys)
    assert f"{copy} has a Whisper config.json but no weights" in err
    assert not out.exists()


# Where a full disk strikes: (options, the folder being written).
FULL_DISK_CASES = {
    "checkpoint": (("--save_strategy", "steps"), "checkpoint-2"),
    "final": (("--save_strategy", "no"), "final.partial"),
}


def test_a_full_disk_while_saving_is_one_paragraph_and_leaves_no_half_written_folder(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # A file-size limit makes every write past 1 MB fail as a full disk does (EFBIG, the
    # same path through safetensors and torch.save as ENOSPC).
    import resource

    def limit_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    # Both cases run at once: each process spends seconds importing on one core.
    runs = {}
    for case, (extra, _) in FULL_DISK_CASES.items():
        argv = _argv(tiny_whisper_dir, tone_manifest, tmp_path / case, *extra)
        runs[case] = subprocess.Popen(
            [sys.executable, "-m", "fitwhisper", *argv],
            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=limit_file_size,
        )  # fmt: skip
    stderr = {case: run.communicate(timeout=600)[1] for case, run in runs.items()}
    for case, (_, written) in FULL_DISK_CASES.items():
        out, err = tmp_path / case, stderr[case]
        assert runs[case].returncode == 1, (case, err)
        assert "Traceback" not in err, case
        assert f"error: could not write {out / written}: " in err, (case, err)
        assert "(is the disk full?)" in err, case
        assert "--resume from its last whole checkpoint" in err, case
        assert not (out / written).exists(), case  # of no use, and its room is needed
        assert not (out / "final").exists(), case


def test_run_folder_made_for_a_run_that_failed_at_once_is_removed(tmp_path: Path) -> None:
    from fitwhisper.errors import DataError
    from fitwhisper.folder_lock import LOCK_FILE, output_folder

    out = tmp_path / "new" / "run"
    with pytest.raises(DataError), output_folder(out):
        assert (out / LOCK_FILE).is_file()
        raise DataError("no usable rows")
    assert not (tmp_path / "new").exists()
    # A folder that was there before stays, with what it held.
    out.mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(DataError), output_folder(out):
        raise DataError("no usable rows")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_run_killed_during_its_first_save_points_to_one_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only an incomplete checkpoint (a kill while the first one was saved): `--resume`
    and a fresh run both name --overwrite_output_dir, never each other."""
    import fitwhisper.models.resolve as resolve
    from fitwhisper.cli import main

    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(resolve, "resolve_model", loaded)
    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "model.safetensors").write_bytes(b"\0" * 8)  # no marker
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"audio": "a.wav", "text": "x"}\n')
    argv = ["train", "--model", "offline/tiny.en", "--train_manifest", str(manifest),
            "--output_dir", str(run)]  # fmt: skip
    for extra in ([], ["--resume"]):
        assert main([*argv, *extra]) == 1
        message = capsys.readouterr().err.split("\n\nhint:")[0]
        assert "--overwrite_output_dir" in message, message
        assert "add --resume" not in message and "without --resume" not in message
