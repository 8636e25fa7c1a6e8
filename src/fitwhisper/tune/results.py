"""What a study leaves in its folder: the best trials' models (the rest pruned to their
logs), the table of trials with Optuna's parameter importances (trials.md), and the best
trial's options as a config `train --config` takes (best_config.yaml)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

BEST_CONFIG = "best_config.yaml"
TABLE = "trials.md"
REPORT = "report.html"
# Options of a trial's run record that belong to that run, not to its recipe.
_RUN_ONLY = ("output_dir", "resume", "overwrite_output_dir", "resume_despite_changes")


def keep_best_finals(keep: int):
    """An Optuna callback: after each trial, only the `keep` best finished trials keep their
    final/ model; every finished trial drops its checkpoints (kept for a resume only)."""

    def callback(study, trial) -> None:
        import optuna

        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        ranked = sorted(done, key=lambda t: t.value)
        for rank, t in enumerate(ranked):
            run = Path(t.user_attrs.get("run_dir", ""))
            if not run.is_dir():
                continue
            for checkpoint in run.glob("checkpoint-*"):
                shutil.rmtree(checkpoint, ignore_errors=True)
            if rank >= keep:
                shutil.rmtree(run / "final", ignore_errors=True)

    return callback


def write_results(study, study_dir: Path) -> str:
    """trials.md, best_config.yaml and report.html in `study_dir`; returns the table for
    the terminal."""
    table = trials_table(study)
    (study_dir / TABLE).write_text(table + "\n", encoding="utf-8")
    best = best_trial(study)
    if best is not None:
        write_best_config(best, study_dir / BEST_CONFIG)
        write_study_report(study, best, study_dir / REPORT)
    return table


def write_study_report(study, best, path: Path) -> None:
    """The best trial against the study's first (the user's own options), clip by clip, on
    the report page (fitwhisper.report); the best alone when it is the first. A page that
    cannot be written is a warning: the search's results are in trials.md."""
    from fitwhisper.report import write_report

    first = next(
        (t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("baseline")), None
    )
    best_run = Path(best.user_attrs["run_dir"])
    try:
        if first is None or first.value is None or first.number == best.number:
            write_report(best_run, output=path)
        else:
            write_report(Path(first.user_attrs["run_dir"]), best_run, output=path)
    except Exception as e:  # noqa: BLE001 (the report must never fail the search)
        log.warning("the study's report page was not written: %s", e)


def best_trial(study):
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return min(done, key=lambda t: t.value) if done else None


def write_best_config(trial, path: Path) -> None:
    """The best trial's run record without what belongs to that run alone: `train --config
    best_config.yaml --output_dir DIR` trains the same recipe."""
    record = yaml.safe_load((Path(trial.user_attrs["run_dir"]) / "fitwhisper.yaml").read_text())
    config = {part: record[part] for part in ("model", "data", "train")}
    for key in _RUN_ONLY:
        config["train"].pop(key, None)
    header = (
        f"# fitwhisper tune: trial {trial.number}, held-out "
        f"{trial.user_attrs.get('metric', 'error').upper()} {100 * trial.value:.2f}%\n"
        f"# reproduce: fitwhisper train --config {path.name} --output_dir DIR\n"
    )
    path.write_text(header + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def trials_table(study) -> str:
    """Every trial (state, error, parameters, batch the plan chose), best first, and the
    parameters' importances when Optuna can tell them."""
    import optuna

    trials = study.get_trials(deepcopy=False)
    names = sorted(
        {k for t in trials for k in t.params}
        | {k for t in trials for k in t.user_attrs.get("own", {})}
    )
    header = ["trial", "state", "error", *names, "batch x accumulation"]
    rows = []
    order = sorted(trials, key=lambda t: (t.value is None, t.value or 0.0, t.number))
    for t in order:
        own = t.user_attrs.get("own", {})  # the first trial: the user's options, in or out
        error = f"{100 * t.value:.2f}%" if t.value is not None else _last_report(t)
        batch = t.user_attrs.get("per_device_train_batch_size")
        steps = t.user_attrs.get("gradient_accumulation_steps")
        rows.append(
            [
                str(t.number),
                t.state.name.lower(),
                error,
                *(_show(t.params.get(n, own.get(n))) for n in names),
                f"{batch} x {steps}" if batch else "",
            ]
        )
    lines = [_row(header), _row(["---"] * len(header)), *(_row(r) for r in rows)]
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(done) >= 2 and names:
        try:
            importances = optuna.importance.get_param_importances(study)
        except (RuntimeError, ValueError) as e:  # e.g. every trial drew the same values
            log.info("parameter importances unavailable: %s", e)
        else:
            lines += ["", "Parameter importance (Optuna, fANOVA):", ""]
            lines += [f"- {name}: {value:.2f}" for name, value in importances.items()]
    return "\n".join(lines)


def _last_report(trial) -> str:
    if trial.intermediate_values:
        step = max(trial.intermediate_values)
        return f"({100 * trial.intermediate_values[step]:.2f}% at step {step})"
    return ""


def _show(value) -> str:
    if value is None:
        return ""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
