"""Evaluation and checkpoint strategies on a tiny random Whisper: the best checkpoint by WER
becomes final/, early stopping stops a run that does not improve, TensorBoard gets the
curves, the run record carries hashes and versions, conflicting options are reported
together before anything loads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.train import train, validate

# Two clips to train on, two to score: the cost of each step and evaluation stays small.
_SMALL = DataConfig(max_train_samples=2, max_eval_samples=2)


def _cfg(out: Path, manifest: Path, **kw) -> TrainConfig:
    base = {
        "output_dir": str(out),
        "train_manifest": str(manifest),
        "eval_manifest": str(manifest),
        "per_device_train_batch_size": 2,
        "per_device_eval_batch_size": 2,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "generation_max_length": 4,  # scoring cost only; WER is still real
        "seed": 0,
    }
    return TrainConfig(**{**base, **kw})


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same(a: dict, b: dict) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_best_checkpoint_by_wer_becomes_final(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch
) -> None:
    # Script the WER of the three evaluations so the best one is known: step 2.
    import fitwhisper.evaluate as ev

    scripted = iter([0.6, 0.3, 0.9])

    def metrics_fn(tokenizer, references, metric, normalizer):
        return lambda pred: {metric: next(scripted)}

    monkeypatch.setattr(ev, "metrics_fn", metrics_fn)
    out = tmp_path / "run"
    result = train(
        ModelConfig(model=str(tiny_whisper_dir)),
        _SMALL,
        _cfg(
            out,
            tone_manifest,
            max_steps=3,
            eval_strategy="steps",
            eval_steps=1,
            save_strategy="steps",
            save_steps=1,
            save_total_limit=None,
            load_best_model_at_end=True,
        ),
    )
    state = json.loads((out / "trainer_state.json").read_text())
    assert Path(state["best_model_checkpoint"]) == out / "checkpoint-2"
    assert state["best_metric"] == 0.3  # lower is better: not the 0.9 of the last step
    assert result.best_checkpoint == out / "checkpoint-2"
    final = _weights(out / "final")
    assert _same(final, _weights(out / "checkpoint-2"))
    assert not _same(final, _weights(out / "checkpoint-3"))

    # Each checkpoint is self-contained: processor files beside the weights, loadable.
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    ckpt = out / "checkpoint-2"
    assert {"tokenizer.json", "processor_config.json", "generation_config.json"} <= {
        p.name for p in ckpt.iterdir()
    }
    WhisperProcessor.from_pretrained(ckpt)
    WhisperForConditionalGeneration.from_pretrained(ckpt)


def test_early_stopping_stops_a_run_that_does_not_improve(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    # Learning rate 1e-12 (0 is refused): an update far below a float32 weight's precision,
    # so the weights do not change, and neither does the WER. The first
    # evaluation sets the best; two more without improvement stop the run at step 3 of 20.
    out = tmp_path / "run"
    result = train(
        ModelConfig(model=str(tiny_whisper_dir)),
        _SMALL,
        _cfg(
            out,
            tone_manifest,
            learning_rate=1e-12,
            max_steps=20,
            eval_strategy="steps",
            eval_steps=1,
            save_strategy="steps",
            save_steps=1,
            load_best_model_at_end=True,
            early_stopping_patience=2,
        ),
    )
    assert result.global_step == 3
    state = json.loads((out / "trainer_state.json").read_text())
    wers = [e["eval_wer"] for e in state["log_history"] if "eval_wer" in e]
    assert len(wers) == 3 and len(set(wers)) == 1


def test_tensorboard_gets_train_and_eval_curves_and_the_record_is_complete(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(
        ModelConfig(model=str(tiny_whisper_dir)),
        _SMALL,
        _cfg(out, tone_manifest, max_steps=2, eval_strategy="steps", eval_steps=1),
    )
    acc = EventAccumulator(str(out / "logs"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/learning_rate", "eval/loss", "eval/wer"} <= tags
    assert [e.step for e in acc.Scalars("eval/wer")] == [1, 2]
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2]
    assert acc.Scalars("train/learning_rate")[0].value == pytest.approx(1e-3)

    record = yaml.safe_load((out / "fitwhisper.yaml").read_text())
    sha = hashlib.sha256(tone_manifest.read_bytes()).hexdigest()
    assert record["manifests"]["train"] == {"path": str(tone_manifest), "sha256": sha}
    assert record["manifests"]["eval"]["sha256"] == sha
    from importlib.metadata import version

    for lib in ("torch", "transformers", "peft", "accelerate", "datasets"):
        assert record["versions"][lib] == version(lib)
    assert record["train"]["eval_strategy"] == "steps"


def test_new_conflicts_are_reported_together_before_loading(tmp_path: Path) -> None:
    import importlib.util

    (tmp_path / "run" / "checkpoint-4").mkdir(parents=True)
    cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        train_manifest="train.json",
        eval_manifest="dev.json",
        warmup_steps=100,
        warmup_ratio=0.1,
        eval_strategy="no",
        load_best_model_at_end=True,
        metric_for_best_model="cer",
        early_stopping_patience=3,
        report_to="wandb",
    )
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(model="no/such-model", language="en"), DataConfig(), cfg)
    msg = e.value.message
    expected = [
        "--warmup_steps and --warmup_ratio are both set",
        "--load_best_model_at_end needs --eval_strategy steps or epoch",
        "--early_stopping_patience needs --eval_strategy steps or epoch",
        # checkpoint-4 is an empty folder (a run killed in its first save): no --resume.
        f"--output_dir {tmp_path / 'run'} holds only incomplete checkpoints of an earlier "
        "run that was stopped while saving (checkpoint-4): nothing to resume from; pass "
        "--overwrite_output_dir",
    ]
    if importlib.util.find_spec("wandb") is None:
        expected.append("--report_to wandb needs the wandb package, which is not installed")
    for line in expected:
        assert line in msg
    assert msg.count("\n  - ") == len(expected)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"eval_strategy": "steps", "eval_steps": 2, "save_strategy": "epoch"},
            "--load_best_model_at_end needs --save_strategy equal to --eval_strategy "
            "(now save epoch, eval steps)",
        ),
        (
            {"eval_strategy": "steps", "eval_steps": 2, "save_strategy": "steps", "save_steps": 5},
            "--load_best_model_at_end needs --save_steps to be a multiple of --eval_steps "
            "(now 5 and 2)",
        ),
    ],
)
def test_best_model_needs_matching_eval_and_save(options: dict, problem: str) -> None:
    cfg = TrainConfig(
        train_manifest="t.json", eval_manifest="d.json", load_best_model_at_end=True, **options
    )
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(), DataConfig(), cfg)
    assert problem in e.value.message


def test_use_wandb_with_report_to_none_and_a_stray_project_are_conflicts() -> None:
    cfg = TrainConfig(train_manifest="t.json", use_wandb=True, report_to="none")
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(), DataConfig(), cfg)
    assert "--use_wandb and --report_to none contradict each other" in e.value.message
    cfg = TrainConfig(train_manifest="t.json", wandb_project="asr")
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(), DataConfig(), cfg)
    assert "--wandb_project is set but nothing reports to W&B" in e.value.message


@pytest.mark.slow
def test_chinese_run_keeps_the_best_by_cer_and_checkpoints_carry_language_and_task(
    tiny_multilingual_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = train(
        ModelConfig(model=str(tiny_multilingual_dir), language="zh"),
        _SMALL,
        _cfg(
            out,
            tone_manifest,
            max_steps=2,
            eval_strategy="steps",
            eval_steps=1,
            save_strategy="steps",
            save_steps=1,
            load_best_model_at_end=True,
        ),
    )
    state = json.loads((out / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "eval_cer" in e] == [1, 2]
    assert result.best_checkpoint is not None and "cer" in result.eval_metrics
    from transformers import GenerationConfig

    for ckpt in (out / "checkpoint-1", out / "checkpoint-2", out / "final"):
        gen = GenerationConfig.from_pretrained(ckpt)
        assert (gen.language, gen.task) == ("zh", "transcribe")


@pytest.mark.parametrize(
    ("options", "resumed", "expected"),
    [
        # 10 clips, 4 x 2 x 1 = 8 a step: 2 steps an epoch (Trainer rounds each up).
        ({"num_train_epochs": 2.5}, None, "= 8; 10 training clips; 5 optimizer steps (2.5 epochs)"),
        ({"max_steps": 3}, None, "= 8; 10 training clips; 3 optimizer steps (1.5 epochs)"),
        ({"max_steps": 7}, 4, "resuming at step 4 of 7 (epoch 2.00): 3 steps to go"),
    ],
)
def test_the_plan_line_counts_steps_like_trainer(
    options: dict, resumed: int | None, expected: str, caplog
) -> None:
    from types import SimpleNamespace

    from fitwhisper.train.trainer import log_plan

    cfg = TrainConfig(per_device_train_batch_size=4, gradient_accumulation_steps=2, **options)
    with caplog.at_level("INFO", logger="fitwhisper.train"):
        log_plan(
            cfg, 10, SimpleNamespace(world_size=1, fp16=False, bf16=False), resumed_step=resumed
        )
    assert "effective batch = 4 x 2 x 1 process(es) = 8" in caplog.text
    assert expected in caplog.text
