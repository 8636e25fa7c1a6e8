"""The training path on a tiny random Whisper: it learns, writes a complete run folder, and
rejects conflicting options before anything loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.train import train, validate


class _LossLog:
    """A TrainerCallback that keeps every logged training loss."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        losses: list[float] = []
        self.losses = losses

        class _CB(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "loss" in logs:
                    losses.append(float(logs["loss"]))

        self.callback = _CB()


def test_training_lowers_loss_and_writes_a_complete_run(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    loss_log = _LossLog()
    result = train(
        ModelConfig(model=str(tiny_whisper_dir)),
        DataConfig(),
        TrainConfig(
            output_dir=str(out),
            train_manifest=str(tone_manifest),
            eval_manifest=str(tone_manifest),
            per_device_train_batch_size=6,
            per_device_eval_batch_size=6,
            learning_rate=3e-3,
            warmup_steps=0,
            max_steps=12,
            logging_steps=1,
            eval_strategy="no",
            save_strategy="no",
            generation_max_length=16,
            seed=0,
        ),
        callbacks=(loss_log.callback,),
    )

    # The same six clips every step: a learning model must fit them. It starts near
    # ln(vocabulary) = 10.9 nats; 12 steps take it well below.
    assert len(loss_log.losses) == 12
    assert loss_log.losses[-1] < loss_log.losses[0] - 2.0
    assert all(b < a for a, b in zip(loss_log.losses[:4], loss_log.losses[1:5], strict=True))
    assert result.global_step == 12
    assert (result.train_rows, result.eval_rows, result.skipped_rows) == (6, 6, 0)

    # The saved model loads and carries a processor.
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    WhisperForConditionalGeneration.from_pretrained(result.final_dir)
    WhisperProcessor.from_pretrained(result.final_dir)

    # Run record, data report, predictions and TensorBoard events are all there.
    record = yaml.safe_load((out / "fitwhisper.yaml").read_text())
    assert record["train"]["max_steps"] == 12
    assert record["versions"]["transformers"]
    report = json.loads((out / "data_report.json").read_text())
    assert report["train"]["used"] == 6 and len(report["train"]["sha256"]) == 64
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    assert metrics["metric"] == "wer"
    assert len((out / "eval" / "predictions.jsonl").read_text().splitlines()) == 6
    assert "wer" in result.eval_metrics
    assert list((out / "logs").glob("events.out.tfevents.*"))

    # The held-out clips were scored with the starting weights too, and the model card in
    # final/ (the Hub's format) carries the run's own figures.
    before = json.loads((out / "eval" / "before" / "metrics.json").read_text())
    assert before["metric"] == "wer" and before["n_utterances"] == 6
    # ...named as scored, with `fitwhisper evaluate`'s figure for the starting weights (tests
    # that need a zero-shot score read this one instead of evaluating again).
    from fitwhisper.evaluate import evaluate_manifest

    assert (before["model"], before["manifest"]) == (str(tiny_whisper_dir), str(tone_manifest))
    zero_shot = evaluate_manifest(
        str(tiny_whisper_dir), tone_manifest, generation_max_length=16, batch_size=6
    ).metrics()
    assert (before["wer"], before["wer_raw"]) == (zero_shot["wer"], zero_shot["wer_raw"])
    from huggingface_hub import ModelCard

    card = ModelCard.load(result.final_dir / "README.md")
    (res,) = card.data.eval_results
    assert (res.metric_type, res.metric_value) == ("wer", round(100 * metrics["wer"], 2))
    assert card.data.pipeline_tag == "automatic-speech-recognition"
    assert f"{round(100 * before['wer'], 2)}% |" in card.text  # before, beside after
    assert "training: 6 clips used of 6 rows" in card.text
    assert (result.final_dir / "fitwhisper.yaml").is_file()  # what "Reproduce" points at


def test_conflicting_options_are_reported_together_before_loading(tmp_path: Path) -> None:
    cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        train_manifest="",
        fp16=True,
        bf16=True,
        eval_strategy="steps",
        eval_steps=None,
        per_device_train_batch_size=0,
    )
    with pytest.raises(ConfigError) as e:
        # A model that does not exist: the check must fail before trying to load it.
        validate(ModelConfig(model="no/such-model"), DataConfig(max_audio_len=40), cfg)
    msg = e.value.message
    for expected in (
        "--train_manifest is required",
        "--fp16 and --bf16",
        "needs --eval_manifest",
        "--per_device_train_batch_size must be at least 1",
        "--max_audio_len must be in (0, 30] (Whisper's window is 30 s), got 40",
    ):
        assert expected in msg
    assert not (tmp_path / "run").exists()
