"""Resuming a stopped run: the newest complete checkpoint, refused when the run changed, and
(slow) a run killed with SIGKILL that resumes to exactly the losses of an uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fitwhisper.cli import main
from fitwhisper.train.checkpoints import MARKER, checkpoints, is_complete, step_of

REPO = Path(__file__).resolve().parents[2]
KILL_AFTER_CHECKPOINT = Path(__file__).with_name("kill_after_checkpoint.py")


def _train_argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model", str(model),
        "--train_manifest", str(manifest),
        "--output_dir", str(out),
        "--logging_steps", "1",
        "--save_strategy", "steps",
        "--save_steps", "2",
        "--save_total_limit", "none",
        "--learning_rate", "1e-3",
        "--seed", "0",
        "-q",
        *extra,
    ]  # fmt: skip


def _losses(run: Path) -> dict[int, tuple[float, float]]:
    """(training loss, gradient norm) per step, from the run's trainer_state.json."""
    state = json.loads((run / "trainer_state.json").read_text())
    return {e["step"]: (e["loss"], e["grad_norm"]) for e in state["log_history"] if "loss" in e}


def test_resume_refuses_a_changed_run_then_proceeds_when_told(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    # One step is all of the two clips used; checkpoint-2 after two steps.
    base = _train_argv(
        tiny_whisper_dir,
        tone_manifest,
        out,
        *("--per_device_train_batch_size", "2", "--max_train_samples", "2"),
    )
    assert main([*base, "--max_steps", "2"]) == 0
    assert is_complete(out / "checkpoint-2")
    capsys.readouterr()

    # Training again into the same folder without --resume would overwrite: refused.
    assert main([*base, "--max_steps", "2"]) == 1
    err = capsys.readouterr().err
    assert "already holds checkpoints of an earlier run (checkpoint-2)" in err
    assert "add --resume" in err and "--overwrite_output_dir" in err

    # A changed option is named, field by field.
    assert main([*base, "--max_steps", "2", "--learning_rate", "2e-3", "--resume"]) == 1
    err = capsys.readouterr().err
    assert "differs from the one that wrote" in err
    assert "--learning_rate: 0.001 in the checkpoint, now 0.002" in err
    assert "manifest" not in err.split("hint:")[0]
    assert "--resume_despite_changes" in err

    # A changed manifest is named with its hashes.
    lines = tone_manifest.read_text().splitlines()
    lines[0] = lines[0].replace("tone number 0", "tone number zero")
    tone_manifest.write_text("\n".join(lines) + "\n")
    assert main([*base, "--max_steps", "2", "--resume"]) == 1
    err = capsys.readouterr().err
    assert f"train manifest {tone_manifest} changed: sha256 " in err
    assert "--learning_rate" not in err

    # Options that do not change what is learnt may differ (logging, eval batch, workers).
    from fitwhisper.train.resume import RESUMABLE_CHANGES

    assert {"logging_steps", "per_device_eval_batch_size", "report_to"} <= RESUMABLE_CHANGES

    # Told to proceed, it continues from step 2 to the new end.
    assert main([*base, "--max_steps", "4", "--resume", "--resume_despite_changes"]) == 0
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert sorted(_losses(out)) == [1, 2, 3, 4]  # steps 1-2 restored, 3-4 trained now
    import yaml

    record = yaml.safe_load((out / "fitwhisper.yaml").read_text())
    assert record["resolved"]["resumed_from"] == str(out / "checkpoint-2")
    assert "resume" not in record["train"]  # a record reused with --config resumes nothing


def test_resume_takes_the_newest_complete_checkpoint(tmp_path: Path, caplog) -> None:
    from fitwhisper.train.resume import find_checkpoint, remove_unusable_after

    for step, complete in ((2, True), (4, True), (6, False)):
        ckpt = tmp_path / f"checkpoint-{step}"
        ckpt.mkdir()
        (ckpt / "model.safetensors").write_bytes(b"\0" * 10)
        if complete:
            (ckpt / MARKER).write_text(json.dumps({"complete": True, "fingerprint": {}}))
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name: ignored
    assert [step_of(c) for c in checkpoints(tmp_path)] == [2, 4, 6]
    assert find_checkpoint(tmp_path, "latest") == tmp_path / "checkpoint-4"
    assert "skipping" in caplog.text and "checkpoint-6: incomplete" in caplog.text
    assert remove_unusable_after(tmp_path, 4) == [tmp_path / "checkpoint-6"]
    assert not (tmp_path / "checkpoint-6").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "sampling",
    [
        ("--no-pack_clips",),
        # transformers' LengthGroupedSampler on the clips' durations (data/batching.py)
        ("--no-pack_clips", "--group_by_duration"),
        # clips 0 and 1 alone, clips 2-5 in one window of several (data/mixed_windows.py)
        ("--encoder_input", "mixed", "--packed_window_share", "0.4"),
    ],
    ids=["random", "group_by_duration", "clips_and_windows"],
)
def test_killed_run_resumes_to_the_losses_of_an_uninterrupted_run(
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    sampling: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }

    def argv(out: Path, *extra: str) -> list[str]:
        # Batch 1 over six clips: six steps an epoch, so the kill lands mid-epoch and the
        # resumed run crosses an epoch boundary (data order of a new epoch).
        argv = _train_argv(tiny_whisper_dir, tone_manifest, out, *extra)
        return [*argv, "--per_device_train_batch_size", "1", "--max_steps", "8", *sampling]

    # 1. Start a run in a process of its own that SIGKILLs itself the moment its second
    #    checkpoint is complete; while it starts, run the uninterrupted one here. (Neither the
    #    resumed nor the uninterrupted run needs a kill: both run in this process, with the
    #    same torch threads.)
    killed, ref = tmp_path / "killed", tmp_path / "uninterrupted"
    proc = subprocess.Popen(
        [sys.executable, str(KILL_AFTER_CHECKPOINT), "4", *argv(killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert main(argv(ref)) == 0
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stderr
    assert not (killed / "final").exists(), "the run finished before it was killed"
    resumed_at = max(step_of(c) for c in checkpoints(killed) if is_complete(c))
    assert resumed_at == 4

    # A checkpoint the kill cut short (written by hand: model only, no marker).
    partial = killed / f"checkpoint-{resumed_at + 2}"
    partial.mkdir(exist_ok=True)
    (partial / "model.safetensors").write_bytes(b"\0" * 100)

    # 2. The same command with --resume continues from the newest complete checkpoint.
    capsys.readouterr()
    assert main(argv(killed, "--resume")) == 0
    assert f"skipping {partial}: incomplete" in capsys.readouterr().err
    state = json.loads((killed / "trainer_state.json").read_text())
    assert state["global_step"] == 8

    # 3. The uninterrupted run (step 1) has the same seed.
    if "--packed_window_share" in sampling:  # the run did train on a window: 1 of 3 items
        record = json.loads((ref / "final" / "config.json").read_text())
        assert record["fitwhisper_encoder_input"]["packed_window_share"] == round(1 / 3, 4)

    # fp32 on CPU, same operations in the same order: losses and gradient norms agree
    # exactly (tolerance 0).
    resumed, uninterrupted = _losses(killed), _losses(ref)
    assert sorted(resumed) == list(range(1, 9))
    after = {s: loss for s, loss in resumed.items() if s > resumed_at}
    assert after == {s: uninterrupted[s] for s in after}

    # TensorBoard shows one curve: the steps the killed run logged past its checkpoint are
    # purged, the resumed run's take their place.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(killed / "logs"))
    acc.Reload()
    curve = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert sorted(curve) == list(range(1, 9))
    assert curve == pytest.approx({s: loss for s, (loss, _) in uninterrupted.items()})


def test_overwrite_output_dir_clears_an_earlier_run(tmp_path: Path) -> None:
    from fitwhisper.config import TrainConfig
    from fitwhisper.train.resume import prepare_output_dir

    for name in ("checkpoint-2", "checkpoint-4", "logs", "final"):
        (tmp_path / name).mkdir()
    (tmp_path / "logs" / "events.out.tfevents.1.host").write_bytes(b"x")
    cfg = TrainConfig(output_dir=str(tmp_path), overwrite_output_dir=True)
    assert prepare_output_dir(tmp_path, cfg, {}) is None
    assert checkpoints(tmp_path) == [] and not list((tmp_path / "logs").iterdir())
    assert (tmp_path / "final").is_dir()  # replaced by the new run's when it ends


def test_lora_run_resumes_to_the_losses_of_an_uninterrupted_run(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # Trainer checkpoints of a PeftModel hold the adapter only; resuming must restore it
    # with optimizer, scheduler and data position, as for a full model. The "crash" here is
    # a removed last checkpoint (the SIGKILL path is the test above).
    out = tmp_path / "run"
    argv = _train_argv(tiny_whisper_dir, tone_manifest, out, "--use_lora", "--lora_r", "4")
    argv += ["--per_device_train_batch_size", "2", "--max_steps", "4"]
    assert main(argv) == 0
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()
    uninterrupted = _losses(out)
    assert sorted(uninterrupted) == [1, 2, 3, 4]

    import shutil

    shutil.rmtree(out / "checkpoint-4")
    shutil.rmtree(out / "final")
    assert main([*argv, "--resume"]) == 0
    resumed = _losses(out)
    assert sorted(resumed) == [1, 2, 3, 4]
    assert {s: resumed[s] for s in (3, 4)} == {s: uninterrupted[s] for s in (3, 4)}
    assert (out / "final" / "adapter_config.json").is_file()
