"""`tune`: the options checked, the study opened, its trials run (each a `train` run, one
after another or shared with other processes), the best trials kept and the config chosen.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.tune_config import TuneConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneResult:
    study_dir: Path
    table: str  # trials.md, ending with the reason for the chosen trial
    best_trial: int | None  # the lowest held-out error
    best_error: float | None
    chosen_trial: int | None  # the one best_config.yaml holds (TuneConfig.choose)
    best_config: Path | None
    trials_run_here: int


def search_space(model_cfg: ModelConfig, train_cfg: TrainConfig, tune_cfg: TuneConfig):
    """The dimensions and the fixed options of this search (defaults, then --search)."""
    from fitwhisper.method import method_of
    from fitwhisper.models.presets import apply_model_preset
    from fitwhisper.tune.space import apply_overrides, default_space

    method = method_of(apply_model_preset(model_cfg)).name
    space = default_space(method, by_epochs=train_cfg.max_steps <= 0)
    return apply_overrides(space, tune_cfg.search)


def tune(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    tune_cfg: TuneConfig,
    *,
    explicit: set[str] | None = None,
) -> TuneResult:
    """Run (or continue) the study in `train_cfg.output_dir` until it holds
    `tune_cfg.n_trials` finished or pruned trials.

    Raises:
        ConfigError: no held-out manifest, a launcher, an unreadable search space or
            storage, or options `train` refuses (checked once, before the first trial).
    """
    import optuna

    from fitwhisper.output_guard import claim_folder
    from fitwhisper.recipes import RECIPE_OPTIONS, with_epochs_for_data, with_recipe
    from fitwhisper.train import ranks
    from fitwhisper.tune.folds import write_folds
    from fitwhisper.tune.results import BEST_CONFIG, keep_best_finals, write_results
    from fitwhisper.tune.space import own_values
    from fitwhisper.tune.study import (
        COUNTED_STATES,
        counted,
        judged_alike,
        open_study,
        setting_up,
        settle_stale_trials,
        storage_for,
    )
    from fitwhisper.tune.trials import Objective, SurplusTrial

    _check(model_cfg, data_cfg, train_cfg, tune_cfg, ranks.world_size())
    # The method's recipe and the epochs for this much data first (recipes.py), as `train`
    # applies them: the baseline trial is what `train` would run; the values are settled
    # for every trial.
    train_cfg, _ = with_recipe(model_cfg, train_cfg, explicit)
    rows = _training_rows(data_cfg, train_cfg)
    train_cfg, _ = with_epochs_for_data(train_cfg, rows, 1, explicit)
    explicit = set(explicit or ()) | set(RECIPE_OPTIONS)
    space, fixed = search_space(model_cfg, train_cfg, tune_cfg)
    _check_fixed(model_cfg, data_cfg, train_cfg, fixed, explicit, tune_cfg)
    study_dir = Path(train_cfg.output_dir)
    claim_folder(study_dir, "tune")
    # Optuna logs a failed trial with its traceback; the error itself reaches the user as
    # every fitwhisper error does (one paragraph), so only its errors are shown.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    name = tune_cfg.study_name or study_dir.resolve().name
    with setting_up(study_dir):
        storage = storage_for(study_dir, tune_cfg.storage, tune_cfg.heartbeat_s)
        study = open_study(storage, name, train_cfg.seed)
        judged_alike(study, tune_cfg, train_cfg.seed, study_dir)
        folds = (
            write_folds(
                train_cfg.train_manifest,
                data_cfg,
                tune_cfg.folds,
                tune_cfg.speaker_column,
                train_cfg.seed,
                study_dir,
            )
            if tune_cfg.folds > 1
            else []
        )
        # The user's own options run first, and again if that trial failed (a bad row,
        # fixed since): the table's baseline. A killed one is rerun by its retry instead.
        if not any(
            t.user_attrs.get("baseline") and t.state.name != "FAIL"
            for t in study.get_trials(deepcopy=False)
        ):
            own = own_values(model_cfg, train_cfg, space)
            # Optuna records a value outside its range only with a warning: those the trial
            # takes from the user's options unsampled (trials.Objective), shown from "own".
            study.enqueue_trial(
                {k: v for k, v in own.items() if space[k].contains(v)},
                user_attrs={"baseline": True, "own": own},
                skip_if_exists=False,  # a failed one with these values may be there
            )
    settle_stale_trials(study, tune_cfg.heartbeat_s)
    remaining = tune_cfg.n_trials - counted(study)
    objective = None
    if remaining > 0:
        objective = Objective(
            model_cfg,
            data_cfg,
            train_cfg,
            space,
            fixed,
            study_dir,
            explicit,
            _memory_budget(train_cfg),
            folds,
            n_trials=tune_cfg.n_trials,
        )
        states = tuple(getattr(optuna.trial.TrialState, s) for s in COUNTED_STATES)
        study.optimize(
            objective,
            n_trials=remaining,
            callbacks=[
                optuna.study.MaxTrialsCallback(tune_cfg.n_trials, states=states),
                keep_best_finals(tune_cfg.keep_best),
            ],
            gc_after_trial=True,
            catch=(SurplusTrial,),
        )
    else:
        log.info("the study already holds %d counted trials", counted(study))
    table, choice = write_results(study, study_dir, tune_cfg.choose)
    return TuneResult(
        study_dir=study_dir,
        table=table,
        best_trial=choice.lowest.number if choice else None,
        best_error=choice.lowest.value if choice else None,
        chosen_trial=choice.trial.number if choice else None,
        best_config=study_dir / BEST_CONFIG if choice else None,
        trials_run_here=objective.calls if objective is not None else 0,
    )


def _training_rows(data_cfg: DataConfig, train_cfg: TrainConfig) -> int:
    """The training manifest's rows (as --max_train_samples keeps them), for the epochs a
    small set trains (recipes.py); `train` counts the rows its data check kept, which a
    readable manifest (checked by `_check`) differs from only by the rows it skips."""
    from fitwhisper.data.manifest import load_manifest, select

    manifest = load_manifest(train_cfg.train_manifest, **data_cfg.manifest_columns())
    return len(select(manifest.rows, data_cfg.max_train_samples))


def _check(model_cfg, data_cfg, train_cfg: TrainConfig, tune_cfg: TuneConfig, world: int) -> None:
    """What `tune` needs, and `train`'s own checks of the options, before any trial."""
    from fitwhisper.train.validation import validate

    if tune_cfg.folds > 1 and train_cfg.eval_manifest:
        raise ConfigError(
            f"--folds {tune_cfg.folds} judges each trial on the training speakers it left "
            "out; --eval_manifest would judge it a second way",
            hint="give one: --folds N (cross-validation over the training manifest's "
            "speakers) or --eval_manifest (clips of other speakers)",
        )
    if tune_cfg.folds == 1 and not train_cfg.eval_manifest:
        raise ConfigError(
            "tune needs --eval_manifest or --folds: each trial is judged by its error on "
            "held-out clips",
            hint="hold out clips the training never sees, ideally of other speakers "
            "(`fitwhisper check-data` counts them), and pass them as --eval_manifest; or "
            "give --folds 3 to judge each trial on every training speaker by a run that "
            "left that speaker out (needs a speaker column)",
        )
    if world > 1:
        raise ConfigError(
            "tune runs each trial in one process; it was started by a launcher",
            hint="start one `fitwhisper tune` per GPU (CUDA_VISIBLE_DEVICES=N) with the same "
            "--output_dir or --storage: they share one study",
        )
    if train_cfg.deepspeed:
        raise ConfigError(
            f"tune --deepspeed {train_cfg.deepspeed}: tune runs its trials one after another "
            "in one process, and DeepSpeed's engines (their partitioned weights, optimizer "
            "states and the process group) are not handed back between them, so each trial "
            "would start with less GPU memory than the last",
            hint="tune without --deepspeed on a model that fits one GPU (--use_lora, "
            "--gradient_checkpointing, a smaller batch), then train best_config.yaml with "
            "--deepspeed",
        )
    from fitwhisper.output_guard import Output, check_outputs
    from fitwhisper.train.validation import train_inputs

    # The study folder itself, then each trial's as train checks its run folder.
    study = Output(
        "--output_dir",
        train_cfg.output_dir,
        "folder",
        replace=train_cfg.overwrite_output_dir,
        replace_flag="--overwrite_output_dir",
    )
    check_outputs([study], train_inputs(model_cfg, data_cfg, train_cfg))
    probe = dataclasses.replace(train_cfg, output_dir=str(Path(train_cfg.output_dir) / "trials"))
    validate(model_cfg, data_cfg, probe)


def _check_fixed(model_cfg, data_cfg, train_cfg, fixed: dict, explicit, tune_cfg) -> None:
    """The options with the values `--search NAME=VALUE` fixes, checked as `train` checks
    them, before the first trial (a value fine alone may conflict with another option:
    num_train_epochs=0 without --max_steps)."""
    from fitwhisper.train.validation import validate
    from fitwhisper.tune.trials import options_for

    if not fixed:
        return
    fixed_model, fixed_train = options_for(
        model_cfg, train_cfg, fixed, set(explicit), judged_in_training=tune_cfg.folds <= 1
    )
    probe = dataclasses.replace(fixed_train, output_dir=str(Path(train_cfg.output_dir) / "trials"))
    try:
        validate(fixed_model, data_cfg, probe)
    except ConfigError as e:
        said = ", ".join(f"--search {k}={v}" for k, v in fixed.items())
        raise ConfigError(f"with {said}: {e.message}", hint=e.hint) from e


def _memory_budget(train_cfg: TrainConfig) -> int | None:
    """The GPU memory each trial must fit: --gpu_memory, else the visible GPU's; None on a
    machine without CUDA and no --gpu_memory (nothing to fit)."""
    from fitwhisper.memory.search import detected_gpu_memory, parse_memory

    if train_cfg.gpu_memory:
        return parse_memory(train_cfg.gpu_memory)
    return detected_gpu_memory()
