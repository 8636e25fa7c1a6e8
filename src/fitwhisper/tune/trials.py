"""One trial of `fitwhisper tune`: the user's options with the sampled ones written over
them, fitted to the GPU's memory by the planner, trained as a normal run in its own folder
(STUDY/trials/trial-NNN), scored on the held-out clips by generation.

Each evaluation during training reports its error to Optuna, whose pruner stops a trial
that is doing worse than the others did at the same step. A trial the planner says will not
fit is pruned before any model loads; one that runs out of memory anywhere (the training
step's back-off gave up, or the first optimizer step, an evaluation, a save) is pruned once
its memory is handed back, and the study goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.tune.folds import Fold
from fitwhisper.tune.space import Dimension

log = logging.getLogger(__name__)

TRIALS_DIR = "trials"


def trial_dir(study_dir: Path, number: int) -> Path:
    return study_dir / TRIALS_DIR / f"trial-{number:03d}"


class SurplusTrial(Exception):
    """A trial asked for after the study's --n_trials were claimed (Objective)."""


@dataclasses.dataclass
class Objective:
    """What Optuna calls once per trial: the held-out error of a run with its parameters."""

    model_cfg: ModelConfig
    data_cfg: DataConfig
    train_cfg: TrainConfig
    space: dict[str, Dimension]
    fixed: dict[str, Any]
    study_dir: Path
    explicit: set[str]
    budget_bytes: int | None  # GPU memory a trial must fit; None: not checked (no GPU)
    folds: list[Fold] = dataclasses.field(default_factory=list)  # --folds; none: eval_manifest
    n_trials: int = 1 << 30  # --n_trials: a trial asked for beyond them is not run
    calls: int = 0  # trials this process ran (the study may hold other processes' too)

    def __call__(self, trial) -> float:
        import optuna
        from optuna.storages import RetryHeartbeatStaleTrialCallback

        from fitwhisper.train import train
        from fitwhisper.tune.study import SURPLUS, claimed_before

        # Other processes on the study may have claimed the last trials since this one
        # asked: it stops here, recorded as surplus (failed, not counted, not listed).
        if claimed_before(trial.study, trial.number) >= self.n_trials:
            trial.set_user_attr(SURPLUS, True)
            trial.study.stop()
            raise SurplusTrial(
                f"trial {trial.number} not run: the study's {self.n_trials} trials are "
                "claimed by the processes sharing it"
            )
        self.calls += 1

        # A retried trial (its process was killed) carries on in the killed one's folder.
        frozen = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == trial.number)
        with warnings.catch_warnings():  # "experimental" since Optuna 2.8
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            first = RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen)
        out = trial_dir(self.study_dir, trial.number if first is None else first)
        # The first trial keeps the user's own values that lie outside the space, unsampled.
        own = trial.user_attrs.get("own", {}) if trial.user_attrs.get("baseline") else {}
        outside = {n for n, v in own.items() if n in self.space and not self.space[n].contains(v)}
        sampled = {
            name: dim.suggest(trial, name)
            for name, dim in self.space.items()
            if name not in outside
        }
        model_cfg, train_cfg = options_for(
            self.model_cfg,
            self.train_cfg,
            sampled | self.fixed,
            self.explicit,
            judged_in_training=not self.folds,
        )
        train_cfg = dataclasses.replace(train_cfg, output_dir=str(out), **_restart(out))
        if self.budget_bytes is not None:
            model_cfg, train_cfg = fitted(model_cfg, self.data_cfg, train_cfg, self.budget_bytes)
        trial.set_user_attr("run_dir", str(out))
        trial.set_user_attr("per_device_train_batch_size", train_cfg.per_device_train_batch_size)
        trial.set_user_attr("gradient_accumulation_steps", train_cfg.gradient_accumulation_steps)
        log.info("trial %d: %s", trial.number, ", ".join(f"{k}={v}" for k, v in sampled.items()))
        if self.folds:
            return self._cross_validated(trial, model_cfg, train_cfg, set(sampled))
        # The planner was wrong, or there was no plan (no GPU figure): pruned.
        with pruned_when_out_of_memory():
            result = train(
                model_cfg,
                self.data_cfg,
                train_cfg,
                callbacks=(PruningReporter(trial),),
                explicit=self.explicit | set(sampled),
            )
        value = result.eval_metrics[result.metric]
        trial.set_user_attr("metric", result.metric)
        return value

    def _cross_validated(self, trial, model_cfg, train_cfg: TrainConfig, sampled: set) -> float:
        """The trial trained once per fold, each scoring the fold it left out; its error is
        over every fold's clips. A fold scored before the trial's process was killed is not
        trained again. Optuna's pruner hears the pooled error after each fold."""
        import optuna

        from fitwhisper.train import train

        out = Path(train_cfg.output_dir)
        scored: list[dict] = []
        for fold in self.folds:
            run = out / f"fold-{fold.number}"
            if not _scored(run):
                fold_cfg = dataclasses.replace(
                    train_cfg,
                    train_manifest=str(fold.train),
                    eval_manifest=str(fold.held_out),
                    output_dir=str(run),
                    **_restart(run),
                )
                with pruned_when_out_of_memory():
                    result = train(
                        model_cfg, self.data_cfg, fold_cfg, explicit=self.explicit | sampled
                    )
                trial.set_user_attr("metric", result.metric)
                _drop_models(run)  # the fold's model is a means: best_config trains on all
            scored += _predictions(run)
            error = pooled_error(scored)
            trial.report(error, fold.number)
            if trial.should_prune():
                raise optuna.TrialPruned(f"{error:.4f} after fold {fold.number}")
        _write_pooled(out, scored, self.train_cfg, self.data_cfg)
        return pooled_error(scored)


@contextlib.contextmanager
def pruned_when_out_of_memory():
    """A trial's run that runs out of memory, wherever (fitwhisper's OutOfMemoryError from
    the back-off, or torch's from an optimizer step, evaluation or save, also as the cause
    of another error), ends as a pruned trial: the error's frames, which hold the model and
    its optimizer, are let go and the GPU's cache emptied before Optuna draws the next."""
    import optuna

    from fitwhisper.memory.backoff import release_memory

    try:
        yield
    except Exception as e:
        said = out_of_memory(e)
        if said is None:
            raise
    else:
        return
    # Out of the except block: the traceback, and the tensors its frames hold, are gone.
    release_memory()
    log.warning("trial pruned: out of memory: %s", said)
    raise optuna.TrialPruned(f"out of memory: {said}")


def out_of_memory(e: BaseException) -> str | None:
    """What an out-of-memory error says, if `e` is one or was caused by one; else None."""
    from fitwhisper.errors import OutOfMemoryError
    from fitwhisper.memory.backoff import is_oom

    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OutOfMemoryError):
            return e.message
        if is_oom(e):
            return (str(e).strip().splitlines() or [type(e).__name__])[0]
        e = e.__cause__ or e.__context__
    return None


def options_for(
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    values: dict[str, Any],
    explicit: set[str],
    *,
    judged_in_training: bool = True,
) -> tuple[ModelConfig, TrainConfig]:
    """The configs with `values` written over them (each name is a field of one of the two),
    and evaluations during training, for the pruner, unless the user chose otherwise
    (`judged_in_training` False: --folds, whose pruner hears after each fold; a checkpoint
    each epoch still, for a resume)."""
    model_names = {f.name for f in dataclasses.fields(ModelConfig)}
    model_cfg = dataclasses.replace(
        model_cfg, **{k: v for k, v in values.items() if k in model_names}
    )
    train_cfg = dataclasses.replace(
        train_cfg, **{k: v for k, v in values.items() if k not in model_names}
    )
    if not judged_in_training:
        if train_cfg.save_strategy == "no" and "save_strategy" not in explicit:
            train_cfg = dataclasses.replace(train_cfg, save_strategy="epoch", save_total_limit=1)
    elif train_cfg.eval_strategy == "no" and "eval_strategy" not in explicit:
        if train_cfg.max_steps > 0:
            steps = max(1, train_cfg.max_steps // 3)
            train_cfg = dataclasses.replace(train_cfg, eval_strategy="steps", eval_steps=steps)
        else:
            train_cfg = dataclasses.replace(train_cfg, eval_strategy="epoch")
    if train_cfg.save_strategy == "no" and "save_strategy" not in explicit:
        # A checkpoint at each evaluation, the last one only: a killed trial resumes there.
        train_cfg = dataclasses.replace(
            train_cfg,
            save_strategy=train_cfg.eval_strategy,
            save_steps=train_cfg.eval_steps or train_cfg.save_steps,
            save_total_limit=1,
        )
    # The starting weights score the same in every trial; the study's first trial (the
    # user's own options) is the baseline instead.
    return model_cfg, dataclasses.replace(train_cfg, score_before=False)


def pooled_error(scored: list[dict]) -> float:
    """The error over the clips of several folds: their errors over their reference units
    (words or characters), as one set's WER or CER is counted."""
    units = sum(r["ref_units"] for r in scored)
    return sum(r["errors"] for r in scored) / units if units else 0.0


def _scored(run: Path) -> bool:
    from fitwhisper.report.compare import predictions_file

    return (run / "eval" / "metrics.json").is_file() and predictions_file(run).is_file()


def _predictions(run: Path) -> list[dict]:
    from fitwhisper.report.compare import predictions_file
    from fitwhisper.report.gather import read_jsonl

    return read_jsonl(predictions_file(run))


def _drop_models(run: Path) -> None:
    import shutil

    for folder in (run / "final", *run.glob("checkpoint-*")):
        shutil.rmtree(folder, ignore_errors=True)


def _write_pooled(out: Path, scored: list[dict], user_cfg: TrainConfig, data_cfg) -> None:
    """The trial folder as a run's, for the table, the choice and best_config.yaml: every
    fold's clips in eval/predictions.jsonl, and the first fold's run record with your own
    training manifest (best_config.yaml trains on all of it) and no held-out one."""
    import json

    import yaml

    from fitwhisper.train.record import manifest_hashes

    (out / "eval").mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in scored)
    (out / "eval" / "predictions.jsonl").write_text(lines, encoding="utf-8")
    record = yaml.safe_load((out / "fold-0" / "fitwhisper.yaml").read_text(encoding="utf-8"))
    record["train"]["train_manifest"] = user_cfg.train_manifest
    record["train"]["eval_manifest"] = None
    record["data"]["max_train_samples"] = data_cfg.max_train_samples
    record["manifests"] = manifest_hashes(user_cfg, data_cfg)
    (out / "fitwhisper.yaml").write_text(yaml.safe_dump(record, sort_keys=False), encoding="utf-8")


def _restart(out: Path) -> dict[str, Any]:
    """How a trial starts in `out`: afresh, or from the last checkpoint a killed run left."""
    from fitwhisper.train.checkpoints import checkpoints, is_complete

    if any(is_complete(c) for c in checkpoints(out)):
        return {"resume": "latest", "overwrite_output_dir": False}
    return {"resume": None, "overwrite_output_dir": out.exists()}


def fitted(
    model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig, budget_bytes: int
) -> tuple[ModelConfig, TrainConfig]:
    """The trial's per-device batch, accumulation and checkpointing from the memory planner,
    keeping its effective batch; pruned (before any model loads) when nothing fits."""
    import optuna

    from fitwhisper.errors import ConfigError
    from fitwhisper.memory.fit import apply_settings, fit_run
    from fitwhisper.method import method_of

    try:
        plan = fit_run(
            model_cfg,
            data_cfg,
            train_cfg,
            budget_bytes,
            methods=(method_of(model_cfg).name,),
            optimizers=(train_cfg.optim,),
        )
    except ConfigError as e:
        raise optuna.TrialPruned(
            f"does not fit {budget_bytes / 2**30:.2f} GiB: {e.message}"
        ) from None
    return apply_settings(plan.settings(), model_cfg, train_cfg)


class PruningReporter(TrainerCallback):
    """Reports each evaluation's error to the trial; ends the run where Optuna prunes it
    (raised from here, the run saves and scores nothing more)."""

    def __init__(self, trial) -> None:
        self.trial = trial

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        error = next((metrics[k] for k in ("eval_wer", "eval_cer") if k in (metrics or {})), None)
        if error is None:
            return
        self.trial.report(error, state.global_step)
        if self.trial.should_prune():
            import optuna

            raise optuna.TrialPruned(f"{error:.4f} at step {state.global_step}")
