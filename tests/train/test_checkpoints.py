"""Checkpoints judged by their contents: a damaged one is skipped for the one before, a kill
during rotation never loses the last whole one, and a run resumed at its last step ends as
the uninterrupted run did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.train.test_resume import _losses, _train_argv

from fitwhisper.cli import main
from fitwhisper.train.checkpoints import (
    MARKER,
    checkpoints,
    is_complete,
    problem,
    rotate,
    step_of,
    write_marker,
)

REPO = Path(__file__).resolve().parents[2]
KILLER = Path(__file__).with_name("kill_at_removal.py")


def _fake_checkpoint(run: Path, step: int, *, marked: bool = True) -> Path:
    ckpt = run / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(os.urandom(2000))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if marked:
        write_marker(ckpt, {"global_step": step, "fingerprint": {}})
    return ckpt


def test_marker_records_each_file_and_catches_truncation_loss_and_change(tmp_path: Path) -> None:
    ckpt = _fake_checkpoint(tmp_path, 2)
    marker = json.loads((ckpt / MARKER).read_text())
    assert marker["files"]["model.safetensors"]["size"] == 2000
    assert "sha256" in marker["files"]["trainer_state.json"]
    assert problem(ckpt) is None

    with open(ckpt / "model.safetensors", "r+b") as f:
        f.truncate(1000)
    assert problem(ckpt) == "damaged: model.safetensors is 1000 bytes, 2000 when it was written"

    ckpt = _fake_checkpoint(tmp_path, 4)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    assert "trainer_state.json changed since it was written" in problem(ckpt)

    ckpt = _fake_checkpoint(tmp_path, 6)
    (ckpt / "model.safetensors").unlink()
    assert problem(ckpt) == "damaged: model.safetensors is missing"

    unmarked = _fake_checkpoint(tmp_path, 8, marked=False)
    assert problem(unmarked).startswith("incomplete")
    # A marker of an earlier fitwhisper (no file list): its presence is what counts.
    (unmarked / MARKER).write_text(json.dumps({"complete": True, "fingerprint": {}}))
    assert is_complete(unmarked)


def test_rotation_keeps_the_newest_whole_and_the_best_and_drops_husks_first(
    tmp_path: Path,
) -> None:
    for step in (2, 4, 6):
        _fake_checkpoint(tmp_path, step)
    husk = _fake_checkpoint(tmp_path, 8, marked=False)  # a kill mid-write
    removed = rotate(tmp_path, 2, best=tmp_path / "checkpoint-2")
    # Four folders, two kept: the unmarked husk goes first, then the oldest not protected.
    assert removed == [husk, tmp_path / "checkpoint-4"]
    assert [step_of(c) for c in checkpoints(tmp_path)] == [2, 6]
    # A limit of 1 still keeps both the newest whole one and the best.
    assert rotate(tmp_path, 1, best=tmp_path / "checkpoint-2") == []
    assert rotate(tmp_path, 1, best=None) == [tmp_path / "checkpoint-2"]
    assert rotate(tmp_path, None, best=None) == []


def _argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    # Batch 1 over six clips: six steps an epoch, so the runs here end mid-epoch.
    return _train_argv(model, manifest, out, "--per_device_train_batch_size", "1", *extra)


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = _weights(a), _weights(b)
    return wa.keys() == wb.keys() and all(bool((wa[k] == wb[k]).all()) for k in wa)


def test_truncated_checkpoint_falls_back_to_the_one_before(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    argv = _argv(tiny_whisper_dir, tone_manifest, out, "--max_steps", "4",
                 "--save_total_limit", "none")  # fmt: skip
    assert main(argv) == 0
    uninterrupted = _losses(out)

    # The newest checkpoint's weights cut short after it was marked (a disk fault).
    weights = out / "checkpoint-4" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    (out / "trainer_state.json").unlink()
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert f"skipping {out / 'checkpoint-4'}: damaged: model.safetensors is" in err
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    resumed = _losses(out)
    assert {s: resumed[s] for s in (3, 4)} == {s: uninterrupted[s] for s in (3, 4)}
    assert is_complete(out / "checkpoint-4")  # written again, whole


def test_resume_at_the_last_step_ends_as_the_uninterrupted_run(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # Six clips, batch 1, four steps: the run ends mid-epoch, where Trainer would train one
    # step more on resume (it takes the next batch before it checks the step count).
    ref, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    argv = _argv(tiny_whisper_dir, tone_manifest, ref, "--max_steps", "4")
    assert main(argv) == 0
    # The same run, stopped after its last checkpoint, before final/ (a kill there).
    argv[argv.index(str(ref))] = str(killed)
    assert main(argv) == 0
    import shutil

    shutil.rmtree(killed / "final")
    (killed / "trainer_state.json").unlink()

    assert main([*argv, "--resume"]) == 0
    state = json.loads((killed / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert _losses(killed) == _losses(ref)
    assert _same_weights(killed / "final", ref / "final")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_kill_during_rotation_always_resumes_to_the_uninterrupted_losses(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # --save_total_limit 1: each checkpoint after the first removes the one before it.
    def argv(out: Path) -> list[str]:
        return _argv(tiny_whisper_dir, tone_manifest, out, "--max_steps", "6",
                     "--save_total_limit", "1")  # fmt: skip

    ref = tmp_path / "uninterrupted"
    assert main(argv(ref)) == 0
    uninterrupted = _losses(ref)
    assert [step_of(c) for c in checkpoints(ref)] == [6]
    # One checkpoint's removals: each file (the marker first), then the folder itself.
    per_checkpoint = sum(1 for p in (ref / "checkpoint-6").rglob("*")) + 1
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    # Kill at the first rotation (step 4 removing checkpoint-2, marker first): just after
    # its marker went, midway through its files, and before the empty folder goes. The three
    # runs start together (each spends seconds importing on one core); each resumes after.
    moments = (2, per_checkpoint // 2, per_checkpoint)
    runs = {
        moment: subprocess.Popen(
            [sys.executable, str(KILLER), str(moment), *argv(tmp_path / f"killed-at-{moment}")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for moment in moments
    }
    stderr = {moment: run.communicate(timeout=600)[1] for moment, run in runs.items()}
    for moment, killed in runs.items():
        out = tmp_path / f"killed-at-{moment}"
        assert killed.returncode == -9, f"moment {moment}: not killed\n{stderr[moment]}"
        assert not (out / "final").exists()
        whole = [step_of(c) for c in checkpoints(out) if is_complete(c)]
        assert whole == [4], f"moment {moment}: whole checkpoints {whole}"  # 2 is a husk

        assert main([*argv(out), "--resume"]) == 0, f"moment {moment}"
        resumed = _losses(out)
        assert {s: resumed[s] for s in (5, 6)} == {s: uninterrupted[s] for s in (5, 6)}
        assert [step_of(c) for c in checkpoints(out)] == [6]
        assert _same_weights(out / "final", ref / "final")
