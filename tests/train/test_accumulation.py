"""Gradient accumulation keeps the loss scale: batch 2 x accumulation 2 trains like batch 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitwhisper.cli import main


def _first_step(model: Path, manifest: Path, out: Path, batch: int, accumulation: int):
    argv = [
        "train", "--model", str(model), "--train_manifest", str(manifest),
        "--output_dir", str(out), "--max_steps", "1", "--logging_steps", "1",
        "--per_device_train_batch_size", str(batch),
        "--gradient_accumulation_steps", str(accumulation),
        "--max_train_samples", "4", "--seed", "0", "--report_to", "none", "-q",
        # Every clip at 30 s: trimmed batches (the default) end at their own longest clip,
        # so a batch of 4 and two of 2 would not hold the same frames.
        "--encoder_input", "full",
    ]  # fmt: skip
    assert main(argv) == 0
    state = json.loads((out / "trainer_state.json").read_text())
    (entry,) = [e for e in state["log_history"] if "loss" in e]
    return entry["loss"], entry["grad_norm"]


def test_accumulated_step_has_the_loss_and_gradient_of_the_whole_batch(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # Same four clips, same initial weights: one batch of 4, or two micro-batches of 2.
    # Without dividing by the accumulation steps both figures would double.
    whole = _first_step(tiny_whisper_dir, tone_manifest, tmp_path / "a", 4, 1)
    accumulated = _first_step(tiny_whisper_dir, tone_manifest, tmp_path / "b", 2, 2)
    assert accumulated[0] == pytest.approx(whole[0], rel=1e-3)
    assert accumulated[1] == pytest.approx(whole[1], rel=1e-3)
