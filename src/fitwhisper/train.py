"""Fine-tuning: config in, run folder out. `Seq2SeqTrainer` owns the loop.

Run with `fitwhisper train` (or `fitwhisper demo` for a ready-made example). The run folder:

    RUN/fitwhisper.yaml   resolved configuration, versions, data hashes
    RUN/data_report.json  what the data check found and what was skipped
    RUN/checkpoint-N/     Trainer checkpoints (model, processor, optimizer, RNG, ...);
                          fitwhisper_checkpoint.json marks one complete (see resume.py)
    RUN/trainer_state.json  the whole run's log history and best checkpoint
    RUN/final/            model + processor + generation config (from_pretrained-ready);
                          for LoRA runs the adapter, with processor and generation config
    RUN/eval/             predictions.jsonl and metrics.json of the final model;
                          regression.json: --regression_manifest before and after (guard.py)
    RUN/logs/             TensorBoard events
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError, DataError
from fitwhisper.precision import choose_precision, hardware, precision_problems

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
    resumed_from: Path | None = None
    best_checkpoint: Path | None = None


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
    from transformers import set_seed

    from fitwhisper.chinese_script import expected_script
    from fitwhisper.codeswitch import configure_no_language_token, dataset_language
    from fitwhisper.data.batching import training_data
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.evaluate import make_scorer, metrics_fn, scoring_language
    from fitwhisper.guard import prepare_rows
    from fitwhisper.memory.backoff import release_memory
    from fitwhisper.memory.watch import MemoryWatch
    from fitwhisper.methods import finish_final_dir, load_kwargs, method_of, prepare_for_training
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.presets import apply_model_preset
    from fitwhisper.models.resolve import load_model, load_processor
    from fitwhisper.resume import checkpoint_marker, fingerprint

    model_cfg = apply_model_preset(model_cfg)  # Breeze-ASR-25: zh, Traditional output
    validate(model_cfg, data_cfg, train_cfg)
    if method_of(model_cfg) != "full" and not model_cfg.use_lora:
        # Quantised weights cannot be trained directly; the run record says what ran.
        log.info("--use_8bit/--use_4bit train LoRA adapters on the quantised base: --use_lora on")
        model_cfg = dataclasses.replace(model_cfg, use_lora=True)
    out = Path(train_cfg.output_dir)

    # 0. Resume or start afresh; refuses a checkpoint whose options or data differ.
    manifests = _manifest_hashes(train_cfg, data_cfg)
    run_fingerprint = fingerprint(
        {"model": model_cfg, "data": data_cfg, "train": train_cfg}, manifests
    )
    resume_from = _prepare_output_dir(out, train_cfg, run_fingerprint)
    out.mkdir(parents=True, exist_ok=True)
    hub = {"cache_dir": model_cfg.cache_dir} if model_cfg.cache_dir else {}

    # 1. Data: check every row before any weights load (the tokenizer is all it needs).
    processor = load_processor(model_cfg.model, **hub)
    train_rows, eval_rows, skipped, durations = _checked_rows(
        data_cfg, train_cfg, processor, out, manifests
    )
    # Output script, language tokens, rehearsal rows and the regression set (guard.py).
    train_rows, eval_rows, regression = prepare_rows(
        model_cfg, data_cfg, train_cfg, processor, train_rows, eval_rows
    )
    durations = _with_rehearsal_durations(durations, train_rows)

    # 2. Model, with language and task in its generation config so the saved model
    #    transcribes correctly in any pipeline without extra arguments.
    #    The method (full, LoRA, 8-bit/4-bit + LoRA) decides how it loads and what trains.
    model = load_model(
        model_cfg.model,
        **hub,
        **load_kwargs(model_cfg, train_cfg),
        attn_implementation=train_cfg.attn_implementation,
    )
    language = language_for(model, model_cfg.language)
    configure_generation(model, language, model_cfg.task)
    if data_cfg.language_token == "none":
        configure_no_language_token(model, model_cfg.task)
    # --seed also fixes the LoRA adapters' random start (Trainer seeds only after this).
    set_seed(train_cfg.seed)
    model = prepare_for_training(model, model_cfg, train_cfg)

    # 3. Datasets decode audio and make features as batches are drawn.
    ds_language = dataset_language(data_cfg.language_token, language)
    train_ds = SpeechDataset(train_rows, processor, language=ds_language, task=model_cfg.task)
    eval_ds = (
        SpeechDataset(eval_rows, processor, language=ds_language, task=model_cfg.task)
        if eval_rows
        else None
    )
    collator = WhisperCollator(processor, model.config.decoder_start_token_id)
    # Packed windows, cached encoder outputs, length grouping, short encoder input
    # (data/batching.py).
    train_ds, train_collator = training_data(
        train_ds, durations, model, collator, train_cfg, language=language
    )

    # 4. Trainer.
    args = _training_arguments(
        train_cfg, has_eval=eval_ds is not None, best_metric=_best_metric(model_cfg, train_cfg)
    )
    compute_metrics = None
    if eval_ds is not None:
        # The clips' own language column counts, as in `fitwhisper evaluate`.
        metric, normalizer = make_scorer(scoring_language(eval_rows, language))
        compute_metrics = metrics_fn(
            processor.tokenizer, [r.text for r in eval_rows], metric, normalizer
        )
    resumed_step = _step_of(resume_from)
    # Steps count what the sampler draws: clips, or packed windows of several clips.
    unit = "packed windows" if train_cfg.pack_clips else "training clips"
    _log_plan(train_cfg, len(train_ds), args, resumed_step=resumed_step, unit=unit)
    _write_run_record(
        out, model_cfg, data_cfg, train_cfg, language, manifests=manifests, resumed_from=resume_from
    )
    if train_cfg.wandb_project:
        os.environ["WANDB_PROJECT"] = train_cfg.wandb_project  # read by Trainer's WandbCallback
    # Seq2SeqTrainer that halves the batch on OOM, keeping the effective batch (backoff.py).
    trainer = _trainer_class(train_cfg)(
        model=model,
        args=args,
        data_collator=train_collator,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        # The whole processor, so every checkpoint-N holds tokenizer and feature extractor
        # and loads as a model anywhere.
        processing_class=processor,
        compute_metrics=compute_metrics,
        memory_request=_memory_request(model_cfg, data_cfg, train_cfg, args),
        callbacks=[
            checkpoint_marker(run_fingerprint),
            MemoryWatch(),  # before TensorBoard's callback, which writes the figures it adds
            *_logging_callbacks(train_cfg, out, resumed_step),
            *_early_stopping(train_cfg),
            *callbacks,
        ],
    )

    if regression is not None:
        regression.score_before(trainer.model)  # the starting weights: Trainer loads later

    # 5. Train (Trainer restores weights, optimizer, scheduler, RNG and data position when
    #    resuming) and save a from_pretrained-ready model with its processor; with
    #    load_best_model_at_end, trainer.model is the best checkpoint's by now.
    result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    trainer.save_state()  # RUN/trainer_state.json: log history, best checkpoint
    final_dir = out / "final"
    trainer.save_model(str(final_dir))
    finish_final_dir(final_dir, trainer.model, processor, model_spec=model_cfg.model)

    # 6. Score the final model on the held-out clips by generation, after handing back what
    #    only training needed (gradients, optimizer states) so generation has the memory.
    eval_metrics: dict[str, float] = {}
    if eval_ds is not None:
        _free_training_memory(trainer)
        release_memory()
        from fitwhisper.evaluate import evaluate_model

        res = evaluate_model(
            trainer.model,
            processor,
            eval_ds,
            [r.text for r in eval_rows],
            [r.id for r in eval_rows],
            language=scoring_language(eval_rows, language),
            batch_size=train_cfg.per_device_eval_batch_size,
            generation_max_length=train_cfg.generation_max_length,
            collator=collator,
            output_script=None,  # the model's own output: its script share is the point
            expected_script=expected_script(model_cfg.output_script) or "auto",
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
        if "script" in (extra := res.extra_figures()):
            eval_metrics["script_share"] = extra["script"]["share_in_expected_script"]
    if regression is not None:
        if eval_ds is None:
            _free_training_memory(trainer)
            release_memory()
        report = regression.score_after(trainer.model, out / "eval")
        eval_metrics["regression_before"] = report.before.score.normalized
        eval_metrics["regression_after"] = report.after.score.normalized
    return TrainResult(
        output_dir=out,
        final_dir=final_dir,
        train_rows=len(train_rows),
        eval_rows=len(eval_rows),
        skipped_rows=skipped,
        global_step=result.global_step,
        train_loss=result.training_loss,
        eval_metrics=eval_metrics,
        resumed_from=resume_from,
        best_checkpoint=(
            Path(trainer.state.best_model_checkpoint)
            if trainer.state.best_model_checkpoint
            else None
        ),
    )


def _trainer_class(cfg: TrainConfig):
    """BackoffTrainer, with length-grouped batches when --group_by_duration asks."""
    from fitwhisper.data.batching import LengthGroupedTrainerMixin
    from fitwhisper.memory.backoff import BackoffTrainer

    class Trainer(LengthGroupedTrainerMixin, BackoffTrainer):
        group_by_length = cfg.group_by_duration

    return Trainer


def _memory_request(model_cfg: ModelConfig, data_cfg: DataConfig, cfg: TrainConfig, args):
    """This run as `predict_memory` fields, for the message when not even one clip fits."""
    request = {
        "model": model_cfg.model,
        "precision": "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32",
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "freeze_encoder": model_cfg.freeze_encoder,
        "use_lora": model_cfg.use_lora,
        "lora_r": model_cfg.lora_r,
        "use_8bit": model_cfg.use_8bit,
        "use_4bit": model_cfg.use_4bit,
        "max_audio_len": data_cfg.max_audio_len,
    }
    if cfg.optim in ("adamw_torch", "adamw_torch_fused", "adafactor"):
        request["optim"] = cfg.optim
    return request


def _free_training_memory(trainer) -> None:
    """Drop gradients and optimizer states once the model is saved (SPEC M5)."""
    trainer.model.zero_grad(set_to_none=True)
    if trainer.optimizer is not None:
        trainer.optimizer.state.clear()


def validate(model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig) -> None:
    """Collect every cross-field problem and raise once, before anything loads."""
    problems: list[str] = []
    if not train_cfg.train_manifest:
        problems.append("--train_manifest is required")
    problems += precision_problems(train_cfg.fp16, train_cfg.bf16, **hardware())
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
    if not 0 <= (fraction := train_cfg.packed_timestamp_fraction) <= 1:
        problems.append(f"--packed_timestamp_fraction must be in [0, 1], got {fraction}")
    if not 0 <= (share := train_cfg.packed_single_clip_share) < 1:
        problems.append(f"--packed_single_clip_share must be in [0, 1), got {share}")
    problems += _schedule_problems(train_cfg)
    problems += _best_model_problems(model_cfg, train_cfg)
    problems += _reporting_problems(train_cfg)
    problems += _output_dir_problems(train_cfg)
    from fitwhisper.methods import problems as method_problems

    problems += method_problems(model_cfg, train_cfg)
    from fitwhisper.guard import option_problems

    problems += option_problems(model_cfg, data_cfg, train_cfg)
    from fitwhisper.data.encoder_cache import option_problems as cache_problems

    problems += cache_problems(model_cfg, train_cfg)
    if problems:
        raise ConfigError(
            "the options conflict:\n  - " + "\n  - ".join(problems),
            hint="fix the options above; `fitwhisper train --help` explains each one",
        )


def _schedule_problems(cfg: TrainConfig) -> list[str]:
    problems = []
    if not 0 <= cfg.warmup_ratio < 1:
        problems.append(f"--warmup_ratio must be in [0, 1), got {cfg.warmup_ratio}")
    if cfg.warmup_steps < 0:
        problems.append(f"--warmup_steps must be 0 or more, got {cfg.warmup_steps}")
    if cfg.warmup_steps > 0 and cfg.warmup_ratio > 0:
        problems.append("--warmup_steps and --warmup_ratio are both set; pick one")
    return problems


def _best_model_problems(model_cfg: ModelConfig, cfg: TrainConfig) -> list[str]:
    from fitwhisper.scoring import metric_for_language

    problems = []
    run_metric = metric_for_language(model_cfg.language)
    if cfg.metric_for_best_model not in (None, run_metric, "loss"):
        problems.append(
            f"--metric_for_best_model {cfg.metric_for_best_model}: this run is scored by "
            f"{run_metric} (language {model_cfg.language or 'English'}); use {run_metric} or loss"
        )
    if cfg.load_best_model_at_end:
        if cfg.eval_strategy == "no":
            problems.append("--load_best_model_at_end needs --eval_strategy steps or epoch")
        elif cfg.save_strategy != cfg.eval_strategy:
            problems.append(
                "--load_best_model_at_end needs --save_strategy equal to --eval_strategy "
                f"(now save {cfg.save_strategy}, eval {cfg.eval_strategy})"
            )
        elif cfg.eval_strategy == "steps" and cfg.eval_steps and cfg.save_steps % cfg.eval_steps:
            problems.append(
                "--load_best_model_at_end needs --save_steps to be a multiple of --eval_steps "
                f"(now {cfg.save_steps} and {cfg.eval_steps})"
            )
    if cfg.early_stopping_patience is not None:
        if cfg.early_stopping_patience < 1:
            problems.append(
                f"--early_stopping_patience must be at least 1, got {cfg.early_stopping_patience}"
            )
        if cfg.eval_strategy == "no":
            problems.append("--early_stopping_patience needs --eval_strategy steps or epoch")
        if not cfg.load_best_model_at_end:
            problems.append("--early_stopping_patience needs --load_best_model_at_end")
    return problems


def _reporting_problems(cfg: TrainConfig) -> list[str]:
    import importlib.util

    problems = []
    if cfg.use_wandb and cfg.report_to == "none":
        problems.append("--use_wandb and --report_to none contradict each other; pick one")
    wandb = _reports_to(cfg) == "wandb"
    if wandb and importlib.util.find_spec("wandb") is None:
        problems.append(
            "--report_to wandb needs the wandb package, which is not installed: "
            "`pip install wandb` and `wandb login`, or use --report_to tensorboard"
        )
    if cfg.wandb_project and not wandb:
        problems.append("--wandb_project is set but nothing reports to W&B; add --report_to wandb")
    return problems


def _output_dir_problems(cfg: TrainConfig) -> list[str]:
    from fitwhisper.resume import checkpoints, is_complete

    problems = []
    found = checkpoints(cfg.output_dir)
    if cfg.resume and cfg.overwrite_output_dir:
        problems.append("--resume and --overwrite_output_dir contradict each other; pick one")
    elif cfg.resume == "latest" and not any(is_complete(c) for c in found):
        problems.append(
            f"--resume: no complete checkpoint in {cfg.output_dir}"
            + (f" ({len(found)} incomplete)" if found else "")
            + "; train without --resume to start afresh, or pass --resume PATH"
        )
    elif cfg.resume and cfg.resume != "latest" and not Path(cfg.resume).is_dir():
        problems.append(f"--resume {cfg.resume}: no such checkpoint folder")
    elif found and not cfg.resume and not cfg.overwrite_output_dir:
        names = ", ".join(c.name for c in found[-3:])
        problems.append(
            f"--output_dir {cfg.output_dir} already holds checkpoints of an earlier run "
            f"({'..., ' if len(found) > 3 else ''}{names}): add --resume to continue from the "
            "newest complete one, --overwrite_output_dir to start afresh (deletes them), or "
            "choose another --output_dir"
        )
    return problems


def _prepare_output_dir(out: Path, cfg: TrainConfig, run_fingerprint: dict) -> Path | None:
    """The checkpoint to resume from (checked against this run), or None for a fresh start;
    clears an earlier run's checkpoints and TensorBoard events with --overwrite_output_dir."""
    from fitwhisper.resume import (
        check_unchanged,
        checkpoints,
        find_checkpoint,
        remove_incomplete_after,
        step_of,
    )

    if cfg.resume:
        ckpt = find_checkpoint(out, cfg.resume)
        check_unchanged(ckpt, run_fingerprint, proceed=cfg.resume_despite_changes)
        remove_incomplete_after(out, step_of(ckpt))
        log.info("resuming from %s", ckpt)
        return ckpt
    if cfg.overwrite_output_dir:
        old = checkpoints(out)
        for ckpt in old:
            shutil.rmtree(ckpt)
        events = list(_logs_dir(cfg, out).glob("events.out.tfevents.*"))
        for f in events:
            f.unlink()
        if old or events:
            log.warning(
                "--overwrite_output_dir: deleted %d checkpoint(s) and %d TensorBoard event "
                "file(s) of an earlier run in %s",
                len(old),
                len(events),
                out,
            )
    return None


def _manifest_hashes(
    cfg: TrainConfig, data_cfg: DataConfig | None = None
) -> dict[str, dict[str, str | None]]:
    """Path and sha256 of each manifest file (None for folders: audiofolder, save_to_disk)."""
    rehearsal = data_cfg.rehearsal_manifest if data_cfg else None
    return {
        split: {"path": str(path), "sha256": _sha256(path)}
        for split, path in (
            ("train", cfg.train_manifest),
            ("eval", cfg.eval_manifest),
            ("rehearsal", rehearsal),
            ("regression", cfg.regression_manifest),
        )
        if path
    }


def _best_metric(model_cfg: ModelConfig, cfg: TrainConfig) -> str | None:
    """metric_for_best_model for Trainer: the run's own metric unless another is asked for."""
    if not (cfg.load_best_model_at_end or cfg.early_stopping_patience):
        return None
    from fitwhisper.scoring import metric_for_language

    return cfg.metric_for_best_model or metric_for_language(model_cfg.language)


def _early_stopping(cfg: TrainConfig) -> list:
    if not cfg.early_stopping_patience:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(cfg.early_stopping_patience, cfg.early_stopping_threshold)]


def _reports_to(cfg: TrainConfig) -> str:
    return "wandb" if cfg.use_wandb else cfg.report_to


def _logs_dir(cfg: TrainConfig, out: Path) -> Path:
    return Path(cfg.logging_dir) if cfg.logging_dir else out / "logs"


def _step_of(checkpoint: Path | None) -> int | None:
    from fitwhisper.resume import step_of

    return None if checkpoint is None else step_of(checkpoint)


def _with_rehearsal_durations(durations: list[float], train_rows: list) -> list[float]:
    """Durations for the rows `prepare_rows` appended (rehearsal rows, which the training data
    check did not measure): read from their headers, since packing and the short encoder
    window cut each clip at its duration."""
    from fitwhisper.data.audio import probe_audio

    extra = train_rows[len(durations) :]
    return [*durations, *(probe_audio(r.audio).duration_s for r in extra)]


def _checked_rows(
    data_cfg: DataConfig, train_cfg: TrainConfig, processor, out: Path, manifests: dict
):
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
        manifest = load_manifest(path, **data_cfg.manifest_columns())
        report = check_manifest(manifest, data_cfg, tokenizer=processor.tokenizer)
        report_path = out / f"data_report_{split}.csv"
        report.write(report_path)
        usable = apply_bad_row_policy(report, data_cfg, report_path=report_path)
        skipped += len(report.rows) - len(usable)
        rows[split] = select(usable, limit)
        if split == "train":
            measured = {r.row.index: r.duration_s for r in report.rows}
            durations = [measured.get(r.index) or 0.0 for r in rows[split]]
        reports[split] = {
            "manifest": str(path),
            "sha256": manifests[split]["sha256"],  # hashed once, in _manifest_hashes
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
    return rows["train"], rows["eval"], skipped, durations


def _training_arguments(cfg: TrainConfig, *, has_eval: bool, best_metric: str | None = None):
    from transformers import Seq2SeqTrainingArguments

    precision = choose_precision(cfg.fp16, cfg.bf16, **hardware())
    return Seq2SeqTrainingArguments(
        output_dir=cfg.output_dir,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        optim=cfg.optim,
        # transformers 5 folded warmup_ratio into warmup_steps: a float below 1 is a ratio.
        warmup_steps=cfg.warmup_ratio if cfg.warmup_ratio > 0 else cfg.warmup_steps,
        lr_scheduler_type=cfg.lr_scheduler_type,
        max_steps=cfg.max_steps,
        num_train_epochs=cfg.num_train_epochs,
        logging_steps=cfg.logging_steps,
        eval_strategy=cfg.eval_strategy if has_eval else "no",
        eval_steps=cfg.eval_steps,
        save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        load_best_model_at_end=cfg.load_best_model_at_end and has_eval,
        metric_for_best_model=best_metric,
        # Trainer guesses "higher is better" for any name not ending in "loss"; WER and CER
        # are error rates.
        greater_is_better=False if best_metric else None,
        seed=cfg.seed,
        fp16=precision == "fp16",
        bf16=precision == "bf16",
        # transformers 5 renamed gradient_checkpointing; our flag keeps the familiar name.
        activation_checkpointing=cfg.gradient_checkpointing,
        dataloader_num_workers=cfg.dataloader_num_workers,
        dataloader_pin_memory=_cuda_available(),
        predict_with_generate=True,
        generation_max_length=cfg.generation_max_length,
        generation_num_beams=1,
        # Our own TensorBoard callback writes into RUN/logs; wandb goes through Trainer.
        report_to=["wandb"] if _reports_to(cfg) == "wandb" else "none",
        # SpeechDataset yields exactly the model's inputs; nothing to prune.
        remove_unused_columns=False,
        label_names=["labels"],
        disable_tqdm=not _tqdm_wanted(),
    )


def _logging_callbacks(cfg: TrainConfig, out: Path, resumed_step: int | None = None) -> list:
    if _reports_to(cfg) != "tensorboard":
        return []
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    # On resume, TensorBoard hides what the stopped run logged after its checkpoint (those
    # steps are trained again), so the curves join without overlap.
    purge = None if resumed_step is None else resumed_step + 1
    writer = SummaryWriter(log_dir=str(_logs_dir(cfg, out)), purge_step=purge)
    return [TensorBoardCallback(tb_writer=writer)]


def _log_plan(
    cfg: TrainConfig,
    n_rows: int,
    args,
    *,
    resumed_step: int | None = None,
    unit: str = "training clips",
) -> None:
    processes = max(args.world_size, 1)
    effective = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * processes
    # Trainer: ceil(ceil(rows / (batch x processes)) / accumulation), which equals this.
    steps_per_epoch = max(1, -(-n_rows // effective))
    if cfg.max_steps > 0:
        steps, epochs = cfg.max_steps, cfg.max_steps / steps_per_epoch
    else:
        steps, epochs = math.ceil(steps_per_epoch * cfg.num_train_epochs), cfg.num_train_epochs
    log.info(
        "effective batch = %d x %d x %d process(es) = %d; %d %s; "
        "%d optimizer steps (%.1f epochs); precision %s",
        cfg.per_device_train_batch_size,
        cfg.gradient_accumulation_steps,
        processes,
        effective,
        n_rows,
        unit,
        steps,
        epochs,
        "bf16 mixed" if args.bf16 else "fp16 mixed" if args.fp16 else "fp32",
    )
    if resumed_step is not None:
        log.info(
            "resuming at step %d of %d (epoch %.2f): %d steps to go",
            resumed_step,
            steps,
            resumed_step / steps_per_epoch,
            max(steps - resumed_step, 0),
        )


# Per-invocation commands, not options of the run: a record reused with --config must not
# resume or delete anything by itself.
_NOT_RECORDED = ("resume", "resume_despite_changes", "overwrite_output_dir")


def _write_run_record(
    out: Path,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    language,
    *,
    manifests: dict | None = None,
    resumed_from: Path | None = None,
) -> None:
    import fitwhisper

    train_options = {
        k: v for k, v in dataclasses.asdict(train_cfg).items() if k not in _NOT_RECORDED
    }
    record = {
        "model": dataclasses.asdict(model_cfg),
        "data": dataclasses.asdict(data_cfg),
        "train": train_options,
        "resolved": {
            "language": language,
            "resumed_from": str(resumed_from) if resumed_from else None,
        },
        "manifests": manifests or {},
        "versions": {
            "fitwhisper": fitwhisper.__version__,
            "python": platform.python_version(),
            **_library_versions(),
        },
        "code_revision": _code_revision(),
    }
    (out / "fitwhisper.yaml").write_text(yaml.safe_dump(record, sort_keys=False))


def _library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape a run (absent ones left out)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "peft", "accelerate", "datasets"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


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
