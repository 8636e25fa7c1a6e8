"""The training order follows from the seed and the epoch alone: evaluating between epochs
(each data loader started draws from torch's global RNG) leaves the batches as they were."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from fitwhisper.cli import main
from fitwhisper.data.batching import EpochSeededLengthGroupedSampler


def test_each_epochs_order_is_transformers_grouped_order_drawn_from_seed_plus_epoch() -> None:
    from transformers.trainer_pt_utils import LengthGroupedSampler

    lengths = [100 + (37 * i) % 23 for i in range(40)]
    sampler = EpochSeededLengthGroupedSampler(4, lengths, seed=7)
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        torch.rand(5)  # draws from the global RNG between epochs change nothing
        order = list(sampler)
        g = torch.Generator().manual_seed(7 + epoch)
        assert order == list(LengthGroupedSampler(4, lengths=lengths, generator=g))
        assert order == list(sampler)  # the same epoch again: the same order
        orders.append(order)
    assert sorted(orders[0]) == list(range(40))
    assert orders[0] != orders[1] != orders[2]  # a new epoch, a new order


def _losses(run: Path) -> dict[int, float]:
    state = json.loads((run / "trainer_state.json").read_text())
    return {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}


def test_evaluating_each_epoch_leaves_the_training_batches_as_they_were(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    """Length-grouped order (`--group_by_duration`, and the default mixed input's batches of
    clips and windows); Trainer's plain random order is accelerate's seedable sampler."""

    def train(out: Path, *extra: str) -> dict[int, float]:
        argv = [
            "train",
            "--model", str(tiny_whisper_dir),
            "--train_manifest", str(tone_manifest),
            "--output_dir", str(out),
            "--per_device_train_batch_size", "2",
            "--num_train_epochs", "2",
            "--logging_steps", "1",
            "--learning_rate", "1e-3",
            "--encoder_input", "full",
            "--no-pack_clips",
            "--seed", "0",
            "-q",
            "--group_by_duration",
            *extra,
        ]  # fmt: skip
        assert main(argv) == 0
        return _losses(out)

    plain = train(tmp_path / "plain", "--save_strategy", "no")
    evaluated = train(
        tmp_path / "evaluated",
        "--eval_manifest", str(tone_manifest),
        "--eval_strategy", "epoch",
        "--save_strategy", "epoch",
        "--generation_max_length", "4",
    )  # fmt: skip
    assert (tmp_path / "evaluated" / "eval" / "before").is_dir()  # scored before training too
    assert sorted(plain) == list(range(1, 7))
    # fp32 on CPU, same batches in the same order: the same losses (tolerance 0).
    assert evaluated == plain
