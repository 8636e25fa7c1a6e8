"""`train --augment`: training items are augmented and held-out ones never, a resumed run
equals an uninterrupted one, the run record and model card say what was done, and the
encoder cache is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from fitwhisper.cli import main
from fitwhisper.data.augment import Augmenter
from fitwhisper.data.manifest import load_manifest


def _argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model",
        str(model),
        "--train_manifest",
        str(manifest),
        "--output_dir",
        str(out),
        "--logging_steps",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--save_total_limit",
        "none",
        "--learning_rate",
        "1e-3",
        "--seed",
        "0",
        "--no-score_before",
        "-q",
        *extra,
    ]


def _losses(run: Path) -> dict[int, tuple[float, float]]:
    state = json.loads((run / "trainer_state.json").read_text())
    return {e["step"]: (e["loss"], e["grad_norm"]) for e in state["log_history"] if "loss" in e}


def test_a_resumed_augmented_run_equals_the_uninterrupted_one(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch
) -> None:
    # Clips 0 and 1 alone, clips 2-5 in one window of several (data/mixed_windows.py):
    # three items, batch 1, so checkpoint-2 is mid-epoch and step 4 is in epoch 1.
    drawn: list[tuple[int, int]] = []
    for_clip = Augmenter.for_clip

    def noting(self, index):
        drawn.append((self.epoch, index))
        return for_clip(self, index)

    monkeypatch.setattr(Augmenter, "for_clip", noting)
    out = tmp_path / "run"
    argv = _argv(
        tiny_whisper_dir,
        tone_manifest,
        out,
        "--augment",
        "strong",
        "--packed_window_share",
        "0.4",
        "--per_device_train_batch_size",
        "1",
        "--max_steps",
        "4",
    )
    assert main(argv) == 0
    uninterrupted, drawn_then = _losses(out), list(drawn)
    # Every clip drawn in epoch 0, then epoch 1 begins with new draws.
    assert {i for e, i in drawn_then if e == 0} == set(range(6))
    assert any(e == 1 for e, _ in drawn_then)

    shutil.rmtree(out / "checkpoint-4")
    shutil.rmtree(out / "final")
    drawn.clear()
    assert main([*argv, "--resume"]) == 0
    resumed = _losses(out)
    assert {s: resumed[s] for s in (3, 4)} == {s: uninterrupted[s] for s in (3, 4)}
    # The resumed run drew for steps 3 and 4 what the uninterrupted one drew for them.
    assert drawn == drawn_then[-len(drawn) :]

    record = yaml.safe_load((out / "fitwhisper.yaml").read_text())
    assert record["train"]["augment"] == "strong"
    assert record["resolved"]["augmentation"]["speed_perturb"] == [0.9, 1.0, 1.1]
    card = (out / "final" / "README.md").read_text()
    assert "| `--augment` | `strong` |" in card
    assert "augmented on the fly (never the held-out clips): speed 0.9/1/1.1" in card


def test_training_items_are_augmented_held_out_items_never(
    tiny_whisper_dir: Path, tone_manifest: Path
) -> None:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.train import setup

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    rows = load_manifest(tone_manifest).rows
    run_rows = SimpleNamespace(
        train=rows, eval=rows, durations=[1.0 + 0.2 * i for i in range(6)], stream=None
    )
    train_cfg = TrainConfig(augment="strong", encoder_input="mixed")
    data = setup.datasets(
        run_rows, processor, model, ModelConfig(), DataConfig(), train_cfg, None, "fp32"
    )
    plain = SpeechDataset(rows, processor)
    assert data.augmenter is not None and data.eval_ds.augment is None
    for i in range(len(rows)):
        own = plain[i]["input_features"]
        np.testing.assert_array_equal(data.eval_ds[i]["input_features"], own)
        assert not np.array_equal(data.train_ds[i]["input_features"], own)
    # Trainer scores held-out clips with the training collator: they come out as they are.
    for collator in (data.train_collator, data.collator):
        batch = collator([data.eval_ds[i] for i in range(2)])
        for i in range(2):
            np.testing.assert_array_equal(
                batch["input_features"][i].numpy(), plain[i]["input_features"]
            )


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            ("--augment", "light", "--freeze_encoder", "--cache_encoder_outputs"),
            "--augment light (or an augmentation option) and --cache_encoder_outputs",
        ),
        (
            ("--time_mask_share", "0.1", "--freeze_encoder", "--cache_encoder_outputs"),
            "--cache_encoder_outputs: the cache holds",
        ),
        (("--noise_dir", "EMPTY"), "holds no audio files"),
        (("--noise_snr_db", "30,10"), "--noise_snr_db is a range LOW,HIGH; got 30 above 10"),
        (("--speed_perturb", "0.9,fast"), "--speed_perturb takes numbers"),
        (("--gain_db", "6"), "--gain_db takes 2 numbers"),
    ],
)
def test_augmentation_that_cannot_be_done_is_refused_in_one_paragraph(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys, extra, named
) -> None:
    (tmp_path / "EMPTY").mkdir()
    extra = tuple(str(tmp_path / "EMPTY") if e == "EMPTY" else e for e in extra)
    code = main(_argv(tiny_whisper_dir, tone_manifest, tmp_path / "run", *extra))
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert named in err
    assert not (tmp_path / "run").exists()
