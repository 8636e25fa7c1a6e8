"""Fine-tuning: config in, run folder out. `Seq2SeqTrainer` owns the loop.

`train` is the whole run as numbered steps; each step's work lives in a sibling module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.method import method_of

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
    skipped_steps: int = 0  # optimizer steps dropped for a non-finite loss or gradient
    metric: str = "wer"  # the held-out clips' metric, a key of eval_metrics when scored


def train(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    *,
    callbacks: tuple = (),
    explicit: set[str] | None = None,
) -> TrainResult:
    """Fine-tune `model_cfg.model` on `train_cfg.train_manifest` and score the result.

    Args:
        callbacks: more Trainer callbacks.
        explicit: the option names the user gave (flags, config-file keys), which
            `--plan` checks and `--auto_fit` keeps; None: those that differ from defaults.

    Raises:
        ConfigError: conflicting options (all listed at once), before anything loads.
        DataError: rows unfit for training when `data_cfg.bad_rows == "error"`.
        ModelLoadError: the model cannot be resolved.
        DivergenceError: a NaN/Inf loss, gradient or weight, at the step named (guard.py).
    """
    from fitwhisper.folder_lock import LOCK_FILE, output_folder
    from fitwhisper.output_guard import MARKER, claim_folder
    from fitwhisper.train import ranks, setup
    from fitwhisper.train.run_plan import resolve_options
    from fitwhisper.train.validation import validate

    # 0. Options: a memory plan (--plan, --auto_fit), presets, method, encoder input and
    #    precision decided once (run_plan.py), all checked at once, and the output folder
    #    writable, before anything loads or is written.
    model_cfg, train_cfg, choices = resolve_options(model_cfg, data_cfg, train_cfg, explicit)
    validate(model_cfg, data_cfg, train_cfg, precision=choices.precision)
    if train_cfg.push_to_hub:
        from fitwhisper.train.hub import check_reachable

        check_reachable(train_cfg.hub_model_id)  # before training, not after it
    if train_cfg.deepspeed:
        ranks.alone_as_a_group()  # no launcher: DeepSpeed would look for MPI instead
    ranks.start()  # under torchrun/accelerate launch: join the other processes (ranks.py)

    # 1. The model spec resolves and its tokenizer loads before the run folder is made
    #    (a download or conversion once, by the main process; the others find it cached).
    with ranks.main_first("loading the model and its tokenizer"):
        resolved = setup.resolve(model_cfg)
        processor = setup.processor(resolved, model_cfg)

    # 2. One run per folder (lock.py); a folder this run made goes again on an early error.
    with output_folder(Path(train_cfg.output_dir), ignore=(MARKER,)) as out:
        if ranks.is_main():  # a new or empty folder is marked as a run's (output_guard)
            claim_folder(out, "train", ignore=(LOCK_FILE,))
        return _train_in(
            out, resolved, processor, model_cfg, data_cfg, train_cfg, choices, callbacks
        )


def _train_in(
    out: Path,
    resolved,
    processor,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    choices,
    callbacks: tuple,
) -> TrainResult:
    """The run, with its folder locked: resume or start, data, model, Trainer, final/."""
    from fitwhisper.data import late_check
    from fitwhisper.train import ranks, record, resume, rows, run_plan, setup, streamed

    # 3. Resume or start afresh; refuses a checkpoint whose options or data differ.
    manifests = record.manifest_hashes(train_cfg, data_cfg)
    fingerprint = resume.fingerprint(
        {"model": model_cfg, "data": data_cfg, "train": train_cfg}, manifests
    )

    # Several processes: the main one decides (and clears what --overwrite_output_dir asks,
    # and a fresh run's record of unfit clips, which every process appends to later).
    def prepare() -> Path | None:
        found = resume.prepare_output_dir(out, train_cfg, fingerprint)
        late_check.start_record(out, resumed=found is not None)
        return found

    resume_from = ranks.on_main(prepare, "preparing the run folder")

    # 4. Data: check every row before any weights load (the tokenizer is all it needs);
    #    output script, language tokens, rehearsal rows and the regression set (rows.py).
    #    Checked once, by the main process, which writes the reports; the rest wait for it.
    checked = ranks.on_main(
        lambda: rows.checked_rows(data_cfg, train_cfg, processor.tokenizer, out, manifests),
        "checking the data",
    )
    run_rows, regression = rows.prepare_rows(model_cfg, data_cfg, train_cfg, processor, checked)
    # With the training rows counted and the held-out rows' languages known, the plan is
    # whole (run_plan.py): a small set trains more epochs (recipes.py).
    train_cfg, choices = run_plan.with_epochs_for_data(
        choices, train_cfg, run_rows.n_train, ranks.world_size()
    )
    if run_rows.stream is not None:  # a stream has no length: its epochs become steps
        train_cfg = streamed.with_steps(train_cfg, run_rows.n_train, ranks.world_size())
    plan = run_plan.decided(
        choices,
        model_cfg,
        train_cfg,
        run_rows.eval,
        out,
        clip_cost_s=setup.clip_cost_of(run_rows.train, processor, model_cfg, train_cfg),
        streamed=run_rows.stream is not None,
    )

    # 5-6. Model and datasets; then the Trainer.
    model, language, data = _model_and_data(
        resolved, processor, run_rows, model_cfg, data_cfg, train_cfg, plan
    )
    if ranks.is_main():
        record.write_run_record(
            out,
            model_cfg,
            data_cfg,
            train_cfg,
            language,
            manifests=manifests,
            resumed_from=resume_from,
        )
    if train_cfg.wandb_project:
        os.environ["WANDB_PROJECT"] = train_cfg.wandb_project  # read by Trainer's WandbCallback
    resumed_step = None if resume_from is None else resume.step_of(resume_from)
    if not ranks.is_main():
        regression = None  # scored by the main process alone, before and after
    _score_starting_weights(model, processor, data, model_cfg, train_cfg, out, plan, regression)
    trainer = setup.trainer(
        model,
        processor,
        data,
        model_cfg,
        data_cfg,
        train_cfg,
        plan,
        fingerprint=fingerprint,
        callbacks=callbacks,
        resumed_step=resumed_step,
    )

    # 7. Train (Trainer restores weights, optimizer, scheduler, RNG and data position when
    #    resuming; a run resumed at its last step only loads that checkpoint) and save a
    #    from_pretrained-ready model with its processor, written aside and renamed into
    #    place; with load_best_model_at_end, trainer.model is the best checkpoint's.
    if resume_from is not None and run_rows.stream is not None:
        workers = train_cfg.dataloader_num_workers
        streamed.resume(data.train_ds, resume_from, ranks.rank(), ranks.world_size(), workers)
    with deterministic_kernels(plan.deterministic):
        step, loss = resume.train_or_finish(trainer, resume_from, data.n_train)
    if run_rows.stream is not None:
        streamed.record_skips(out, trainer)
    elif ranks.is_main():
        late_check.record_failures(out)
    trainer.save_state()  # RUN/trainer_state.json: log history, best checkpoint
    final_dir = _save_final(trainer, processor, out, model_cfg)

    # 8. Score the final model on the held-out clips by generation, and the regression set
    #    (the main process; the others are done).
    metrics = {}
    if ranks.is_main():
        metrics = _score_final(
            trainer, processor, data, model_cfg, train_cfg, out, regression, plan
        )
    if ranks.is_main():
        _publish(out, final_dir, train_cfg)
    best = trainer.state.best_model_checkpoint
    return TrainResult(
        output_dir=out,
        final_dir=final_dir,
        train_rows=run_rows.n_train,
        eval_rows=len(run_rows.eval),
        skipped_rows=run_rows.skipped,
        global_step=step,
        train_loss=loss,
        eval_metrics=metrics,
        resumed_from=resume_from,
        best_checkpoint=Path(best) if best else None,
        skipped_steps=trainer.nonfinite_guard.skipped,
        metric=plan.metric,
    )


@contextlib.contextmanager
def deterministic_kernels(on: bool):
    """torch's deterministic algorithms while the block runs (the run plan decides when),
    the process's setting restored after. Uninitialised memory is not filled with NaN
    (torch's debugging aid that comes with the mode): it costs time and changes no result."""
    import torch
    import torch.utils.deterministic as det

    if not on:
        yield
        return
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        det.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True)
    det.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        det.fill_uninitialized_memory = saved[2]


def _model_and_data(resolved, processor, run_rows, model_cfg, data_cfg, train_cfg, plan):
    """The model (the method decides how it loads and what trains; --seed also fixes the
    LoRA adapters' random start, as Trainer seeds only after this), its language, and the
    datasets, which decode audio and make features as batches are drawn."""
    from transformers import set_seed

    from fitwhisper.train import setup

    model, language = setup.model(resolved, model_cfg, data_cfg, train_cfg, plan.precision)
    set_seed(train_cfg.seed)
    model = setup.prepare(model, model_cfg, train_cfg)
    data = setup.datasets(
        run_rows,
        processor,
        model,
        model_cfg,
        data_cfg,
        train_cfg,
        language,
        plan.precision,
        log_mel=plan.input_path.log_mel,
    )
    return model, language, data


def _score_starting_weights(
    model, processor, data, model_cfg, train_cfg, out: Path, plan, regression
) -> None:
    """The regression set and the held-out clips with the starting weights, by the main
    process (Trainer loads a resumed checkpoint later); the others wait for it here, not in
    the Trainer's first collective (which gives up in minutes, ranks.py)."""
    from fitwhisper.train import ranks

    if regression is not None:
        regression.score_before(model)
    if ranks.is_main():
        _score_before(model, processor, data, model_cfg, train_cfg, out, plan)
    ranks.wait_for_main("scoring the starting weights")


def _publish(out: Path, final_dir: Path, train_cfg: TrainConfig) -> None:
    """What the main process writes from a finished run: the model card (README.md, from
    the run's files), RUN/report.html (a failure is a warning, never the run's), and
    final/ on the Hub with --push_to_hub."""
    from fitwhisper.models.card import write_run_card
    from fitwhisper.report import report_quietly

    write_run_card(out, final_dir)
    if (page := report_quietly(out)) is not None:
        log.info("report: %s", page)
    if train_cfg.push_to_hub:
        from fitwhisper.train.hub import push_final

        push_final(final_dir, train_cfg.hub_model_id)


def _save_final(trainer, processor, out: Path, model_cfg: ModelConfig) -> Path:
    """RUN/final/, written into RUN/final.partial/ and renamed into place: a run stopped
    while writing it leaves a folder named as unfinished, never a final/ that fails to load."""
    from fitwhisper.train import ranks
    from fitwhisper.train.master_weights import write_fp32_master_weights
    from fitwhisper.train.method_loading import finish_final_dir

    final_dir, partial, old = out / "final", out / "final.partial", out / "final.old"

    def clear() -> None:
        for stale in (partial, old):
            shutil.rmtree(stale, ignore_errors=True)

    def finish() -> None:
        finish_final_dir(partial, trainer.model, processor, model_spec=model_cfg.model)
        if final_dir.exists():  # an earlier run's (--overwrite_output_dir): replaced only now
            final_dir.rename(old)
        partial.rename(final_dir)
        shutil.rmtree(old, ignore_errors=True)

    ranks.on_main(clear, "clearing an unfinished final/")
    try:
        # Every process calls save_model (FSDP and ZeRO-3 gather the shards for it); the
        # main one writes, then completes the folder and renames it while the others wait.
        trainer.save_model(str(partial))
        write_fp32_master_weights(trainer, partial)  # DeepSpeed in 16 bits: as DDP saves
        ranks.on_main(finish, "writing final/")
    except Exception as e:
        if ranks.is_main():
            shutil.rmtree(partial, ignore_errors=True)  # a full disk, most often: free room
        from fitwhisper.paths import as_storage_error

        if (storage := as_storage_error(e, partial, training=True)) is not None:
            raise storage from e
        raise
    return final_dir


def _score_final(trainer, processor, data, model_cfg, train_cfg, out: Path, regression, plan):
    """The final model on the held-out clips (RUN/eval/) and the regression set, after
    handing back what only training needed (gradients, optimizer states)."""
    from fitwhisper.memory.backoff import release_memory
    from fitwhisper.train.held_out import score_held_out
    from fitwhisper.train.trainer import free_training_memory
    from fitwhisper.train.window_choice import settle_window

    metrics: dict[str, float] = {}
    if data.eval_ds is None and regression is None:
        return metrics | settle_window(trainer.model, out / "final", None, None)
    model = trainer.model
    if getattr(trainer, "is_deepspeed_enabled", False) or getattr(
        trainer, "is_fsdp_enabled", False
    ):
        model = _reloaded_final(out / "final")
    else:
        free_training_memory(trainer)
    release_memory()
    res = None
    if data.eval_ds is not None:
        res = score_held_out(
            model,
            processor,
            data,
            model_cfg,
            train_cfg,
            out / "eval",
            language=plan.scoring_language,
            when="final",
            model_name=str(out / "final"),
        )
        metrics[res.score.metric] = res.score.normalized
        if "script" in (extra := res.extra_figures()):
            metrics["script_share"] = extra["script"]["share_in_expected_script"]

    def score_short():
        return score_held_out(
            model,
            processor,
            data,
            model_cfg,
            train_cfg,
            out / "eval" / "short_window",
            language=plan.scoring_language,
            when="short-window",
            window="short",
            model_name=str(out / "final"),
        ).score

    metrics |= settle_window(model, out / "final", score_short, res.score if res else None)
    if regression is not None:
        report = regression.score_after(model, out / "eval")
        metrics["regression_before"] = report.before.score.normalized
        metrics["regression_after"] = report.after.score.normalized
    return metrics


def _score_before(model, processor, data, model_cfg, train_cfg, out: Path, plan) -> None:
    """The held-out clips with the starting weights (RUN/eval/before/), once per run folder:
    the base's figure beside the final one in the model card."""
    before = out / "eval" / "before"
    if data.eval_ds is None or not train_cfg.score_before or (before / "metrics.json").is_file():
        return
    if method_of(model_cfg).quantised:
        # Generating with the quantised base before training breaks the bf16 training that
        # follows ("a view of a leaf Variable ... in-place", tests/train/test_quantised_cpu.py);
        # until that is understood, such runs score the held-out clips after training only.
        log.info(
            "--score_before skipped for an 8-bit/4-bit run; the model card shows no before figure"
        )
        return
    from fitwhisper.train.held_out import score_held_out

    score_held_out(
        model,
        processor,
        data,
        model_cfg,
        train_cfg,
        before,
        language=plan.scoring_language,
        when="before fine-tuning",
        model_name=model_cfg.model,
    )


def _reloaded_final(final_dir: Path):
    """final/ loaded afresh for the main process to score alone, DeepSpeed switched off.

    The training model cannot be scored by one process under DeepSpeed or FSDP: its weights
    are split across the processes (each forward pass gathers them from all, a collective
    the others, done, never join). So the DeepSpeed config transformers keeps global is
    dropped (from_pretrained would partition the model it loads), accelerate's shared state
    and its environment flag are reset (the process group stays), and the saved model,
    whole, is loaded in fp32 (a LoRA adapter on its base, which is loaded unquantised even
    when --use_8bit/--use_4bit trained it).
    """
    import torch
    from accelerate.state import AcceleratorState
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from fitwhisper.models.resolve import load_model

    unset_hf_deepspeed_config()
    os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)  # set by Accelerator; new ones read it
    AcceleratorState._reset_state()
    return load_model(str(final_dir), dtype=torch.float32)
