"""Fine-tuning: config in, run folder out. `Seq2SeqTrainer` owns the loop.

Run with `fitwhisper train` (or `fitwhisper demo` for a ready-made example). The run folder:

    RUN/fitwhisper.yaml   resolved configuration, versions, data hashes
    RUN/data_report.json  what the data check found and what was skipped
    RUN/checkpoint-N/     Trainer checkpoints
    RUN/final/            model + processor + generation config (from_pretrained-ready);
                          for LoRA runs the adapter, with processor and generation config
    RUN/eval/             predictions.jsonl and metrics.json of the final model
    RUN/logs/             TensorBoard events
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import platform
from dataclasses import dataclass
from pathlib import Path

import yaml

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError, DataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """Where a run's outputs went and what it measured."""

    output_dir: Path
    final_dir: Path
    train_rows: int
    eval_rows: int
    skipped_rows: int
    global_step: int
    train_loss: float | None
    eval_metrics: dict[str, float]


def train(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    *,
    callbacks: tuple = (),
) -> TrainResult:
    """Fine-tune `model_cfg.model` on `train_cfg.train_manifest` and score the result.

    Raises:
        ConfigError: conflicting options (all listed at once), before anything loads.
        DataError: rows unfit for training when `data_cfg.bad_rows == "error"`.
        ModelLoadError: the model cannot be resolved.
    """
    from transformers import Seq2SeqTrainer

    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.evaluate import make_scorer, metrics_fn
    from fitwhisper.methods import finish_final_dir, load_kwargs, method_of, prepare_for_training
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.resolve import load_model, load_processor

    validate(model_cfg, data_cfg, train_cfg)
    if method_of(model_cfg) != "full" and not model_cfg.use_lora:
        # Quantised weights cannot be trained directly; the run record says what ran.
        log.info("--use_8bit/--use_4bit train LoRA adapters on the quantised base: --use_lora on")
        model_cfg = dataclasses.replace(model_cfg, use_lora=True)
    out = Path(train_cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)

    # 1. Data: check every row before any weights load (the tokenizer is all it needs).
    processor = load_processor(model_cfg.model)
    train_rows, eval_rows, skipped = _checked_rows(data_cfg, train_cfg, processor, out)

    # 2. Model, with language and task in its generation config so the saved model
    #    transcribes correctly in any pipeline without extra arguments.
    #    The method (full, LoRA, 8-bit/4-bit + LoRA) decides how it loads and what trains.
    model = load_model(model_cfg.model, **load_kwargs(model_cfg, train_cfg))
    language = language_for(model, model_cfg.language)
    configure_generation(model, language, model_cfg.task)
    model = prepare_for_training(model, model_cfg, train_cfg)

    # 3. Datasets decode audio and make features as batches are drawn.
    train_ds = SpeechDataset(train_rows, processor, language=language, task=model_cfg.task)
    eval_ds = (
        SpeechDataset(eval_rows, processor, language=language, task=model_cfg.task)
        if eval_rows
        else None
    )
    collator = WhisperCollator(processor, model.config.decoder_start_token_id)

    # 4. Trainer.
    args = _training_arguments(train_cfg, has_eval=eval_ds is not None)
    compute_metrics = None
    if eval_ds is not None:
        metric, normalizer = make_scorer(language)
        compute_metrics = metrics_fn(
            processor.tokenizer, [r.text for r in eval_rows], metric, normalizer
        )
    _log_plan(train_cfg, len(train_rows), args)
    _write_run_record(out, model_cfg, data_cfg, train_cfg, language)
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        data_collator=collator,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=processor.feature_extractor,
        compute_metrics=compute_metrics,
        callbacks=[*_logging_callbacks(train_cfg, out), *callbacks],
    )

    # 5. Train and save a from_pretrained-ready model with its processor (LoRA: the adapter,
    #    usable on its own by `evaluate`, `merge` and PeftModel.from_pretrained).
    result = trainer.train()
    final_dir = out / "final"
    trainer.save_model(str(final_dir))
    finish_final_dir(final_dir, trainer.model, processor, model_spec=model_cfg.model)

    # 6. Score the final model on the held-out clips by generation.
    eval_metrics: dict[str, float] = {}
    if eval_ds is not None:
        from fitwhisper.evaluate import evaluate_model

        res = evaluate_model(
            trainer.model,
            processor,
            eval_ds,
            [r.text for r in eval_rows],
            [r.id for r in eval_rows],
            language=language,
            batch_size=train_cfg.per_device_eval_batch_size,
            generation_max_length=train_cfg.generation_max_length,
            collator=collator,
        )
        res.write(out / "eval")
        eval_metrics = {res.score.metric: res.score.normalized}
        log.info(
            "final %s on %d held-out clips: %.2f%% (%s)",
            res.score.metric.upper(),
            len(eval_rows),
            100 * res.score.normalized,
            res.score.normalizer,
        )
    return TrainResult(
        output_dir=out,
        final_dir=final_dir,
        train_rows=len(train_rows),
        eval_rows=len(eval_rows),
        skipped_rows=skipped,
        global_step=result.global_step,
        train_loss=result.training_loss,
        eval_metrics=eval_metrics,
    )


def validate(model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig) -> None:
    """Collect every cross-field problem and raise once, before anything loads."""
    problems: list[str] = []
    if not train_cfg.train_manifest:
        problems.append("--train_manifest is required")
    if train_cfg.fp16 and train_cfg.bf16:
        problems.append("--fp16 and --bf16 are both set; pick one")
    if (train_cfg.fp16 or train_cfg.bf16) and not _cuda_available():
        problems.append("--fp16/--bf16 need a CUDA GPU and none is visible; train in fp32 on CPU")
    if train_cfg.eval_strategy != "no" and not train_cfg.eval_manifest:
        problems.append(f"--eval_strategy {train_cfg.eval_strategy} needs --eval_manifest")
    if train_cfg.eval_strategy == "steps" and not train_cfg.eval_steps:
        problems.append("--eval_strategy steps needs --eval_steps")
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size",
                 "gradient_accumulation_steps", "generation_max_length"):  # fmt: skip
        if getattr(train_cfg, name) < 1:
            problems.append(f"--{name} must be at least 1, got {getattr(train_cfg, name)}")
    if train_cfg.max_steps < 1 and train_cfg.num_train_epochs <= 0:
        problems.append("set --max_steps or a positive --num_train_epochs")
    if data_cfg.min_audio_len >= data_cfg.max_audio_len:
        problems.append("--min_audio_len must be below --max_audio_len")
    if data_cfg.max_audio_len > 30:
        problems.append("--max_audio_len above 30 s: Whisper's window is 30 s")
    from fitwhisper.methods import problems as method_problems

    problems += method_problems(model_cfg, train_cfg)
    if problems:
        raise ConfigError(
            "the options conflict:\n  - " + "\n  - ".join(problems),
            hint="fix the options above; `fitwhisper train --help` explains each one",
        )


def _checked_rows(data_cfg: DataConfig, train_cfg: TrainConfig, processor, out: Path):
    from fitwhisper.data.check import apply_bad_row_policy, check_manifest
    from fitwhisper.data.manifest import load_manifest, select

    reports = {}
    rows = {}
    skipped = 0
    for split, path, limit in (
        ("train", train_cfg.train_manifest, data_cfg.max_train_samples),
        ("eval", train_cfg.eval_manifest, data_cfg.max_eval_samples),
    ):
        if not path:
            rows[split] = []
            continue
        manifest = load_manifest(
            path,
            audio_column=data_cfg.audio_column,
            text_column=data_cfg.text_column,
            language_column=data_cfg.language_column,
        )
        report = check_manifest(manifest, data_cfg, tokenizer=processor.tokenizer)
        report_path = out / f"data_report_{split}.csv"
        report.write(report_path)
        usable = apply_bad_row_policy(report, data_cfg, report_path=report_path)
        skipped += len(report.rows) - len(usable)
        rows[split] = select(usable, limit)
        reports[split] = {
            "manifest": str(path),
            "sha256": _sha256(path),
            "rows": len(report.rows),
            "usable": len(usable),
            "used": len(rows[split]),
            "problems": report.counts(),
        }
    if not rows["train"]:
        raise DataError(
            f"no usable training rows in {train_cfg.train_manifest}",
            hint="run `fitwhisper check-data` on it to see why",
        )
    (out / "data_report.json").write_text(json.dumps(reports, indent=2) + "\n")
    return rows["train"], rows["eval"], skipped


def _training_arguments(cfg: TrainConfig, *, has_eval: bool):
    from transformers import Seq2SeqTrainingArguments

    return Seq2SeqTrainingArguments(
        output_dir=cfg.output_dir,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        optim=cfg.optim,
        warmup_steps=cfg.warmup_steps,
        lr_scheduler_type=cfg.lr_scheduler_type,
        max_steps=cfg.max_steps,
        num_train_epochs=cfg.num_train_epochs,
        logging_steps=cfg.logging_steps,
        eval_strategy=cfg.eval_strategy if has_eval else "no",
        eval_steps=cfg.eval_steps,
        save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        fp16=cfg.fp16,
        bf16=cfg.bf16,
        # transformers 5 renamed gradient_checkpointing; our flag keeps the familiar name.
        activation_checkpointing=cfg.gradient_checkpointing,
        dataloader_num_workers=cfg.dataloader_num_workers,
        dataloader_pin_memory=_cuda_available(),
        predict_with_generate=True,
        generation_max_length=cfg.generation_max_length,
        generation_num_beams=1,
        # Our own TensorBoard callback writes into RUN/logs; wandb goes through Trainer.
        report_to=["wandb"] if cfg.report_to == "wandb" else "none",
        # SpeechDataset yields exactly the model's inputs; nothing to prune.
        remove_unused_columns=False,
        label_names=["labels"],
        disable_tqdm=not _tqdm_wanted(),
    )


def _logging_callbacks(cfg: TrainConfig, out: Path) -> list:
    if cfg.report_to != "tensorboard":
        return []
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    return [TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(out / "logs")))]


def _log_plan(cfg: TrainConfig, n_rows: int, args) -> None:
    processes = max(args.world_size, 1)
    effective = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * processes
    steps_per_epoch = max(1, -(-n_rows // effective))
    if cfg.max_steps > 0:
        steps, epochs = cfg.max_steps, cfg.max_steps / steps_per_epoch
    else:
        steps, epochs = int(steps_per_epoch * cfg.num_train_epochs), cfg.num_train_epochs
    log.info(
        "effective batch = %d x %d x %d process(es) = %d; %d training clips; "
        "%d optimizer steps (%.1f epochs)",
        cfg.per_device_train_batch_size,
        cfg.gradient_accumulation_steps,
        processes,
        effective,
        n_rows,
        steps,
        epochs,
    )


def _write_run_record(
    out: Path, model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig, language
) -> None:
    import torch
    import transformers

    import fitwhisper

    record = {
        "model": dataclasses.asdict(model_cfg),
        "data": dataclasses.asdict(data_cfg),
        "train": dataclasses.asdict(train_cfg),
        "resolved": {"language": language},
        "versions": {
            "fitwhisper": fitwhisper.__version__,
            "torch": str(torch.__version__),
            "transformers": str(transformers.__version__),
            "python": platform.python_version(),
        },
        "code_revision": _code_revision(),
    }
    (out / "fitwhisper.yaml").write_text(yaml.safe_dump(record, sort_keys=False))


def _code_revision() -> str | None:
    import subprocess

    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _sha256(path: str | Path) -> str | None:
    p = Path(path)
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _tqdm_wanted() -> bool:
    from fitwhisper.logs import progress_enabled

    return progress_enabled()
