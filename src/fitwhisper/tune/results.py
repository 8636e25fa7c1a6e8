"""What a study leaves in its folder: the best trials' models (the rest pruned to their
logs), the table of trials with Optuna's parameter importances (trials.md), and the chosen
trial's options as a config `train --config` takes (best_config.yaml).

The chosen trial is the one with the lowest held-out error only when it beats the first
trial (the user's own options) by more than chance, clip by clip (--choose significant):
on a small held-out set the lowest of many trials is often the luckiest. Measured on
speechocean762 (bench/RESULTS-quality.md): the lowest of 12 trials led the user's options
by 1.6 points on its 10 validation speakers (-3.8 to +0.3) and lost by 1.0 on 20 unseen.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class ChosenTrial:
    """The trial best_config.yaml holds, the trial with the lowest error, and why."""

    trial: Any  # optuna FrozenTrial
    lowest: Any
    reason: str


def write_results(study, study_dir: Path, rule: str) -> tuple[str, ChosenTrial | None]:
    """trials.md, best_config.yaml and report.html in `study_dir`; returns the table for
    the terminal (with the choice's reason) and the choice (None: no trial finished)."""
    table = trials_table(study)
    choice = choose(study, rule)
    if choice is not None:
        table += f"\n\n{BEST_CONFIG}: {choice.reason}"
        write_best_config(choice.trial, study_dir / BEST_CONFIG)
        write_study_report(study, choice.lowest, study_dir / REPORT)
    (study_dir / TABLE).write_text(table + "\n", encoding="utf-8")
    return table, choice


def choose(study, rule: str) -> ChosenTrial | None:
    """The trial whose options best_config.yaml holds, by `rule` (TuneConfig.choose)."""
    from fitwhisper.report.compare import predictions_file
    from fitwhisper.report.gather import paired_change, read_jsonl

    lowest = best_trial(study)
    if lowest is None:
        return None
    name = f"trial {lowest.number}, the lowest error"
    first = _first_finished(study)
    if first is None or first.number == lowest.number:
        why = "your own options" if first else "your own options' trial did not finish"
        return ChosenTrial(lowest, lowest, f"{name} ({why})")
    files = [predictions_file(Path(t.user_attrs["run_dir"])) for t in (first, lowest)]
    if missing := [str(f) for f in files if not f.is_file()]:  # e.g. another machine's trial
        return ChosenTrial(
            lowest,
            lowest,
            f"{name}, not compared with your own options clip by clip ({', '.join(missing)} "
            "not on this machine)",
        )
    change = paired_change(*(read_jsonl(f) for f in files))
    diff = f"{_points(change['difference'])} points"
    if change["low"] is not None:
        diff += (
            f" ({_points(change['low'])} to {_points(change['high'])}, 95% paired bootstrap "
            f"over {change['clips']} held-out clips)"
        )
    if rule == "lowest":
        return ChosenTrial(
            lowest, lowest, f"{name} (--choose lowest), {diff} against your own options"
        )
    if change["high"] is not None and change["high"] < 0:
        return ChosenTrial(
            lowest, lowest, f"{name}, {diff} against your own options: beyond chance"
        )
    return ChosenTrial(
        first,
        lowest,
        f"your own options (trial {first.number}), kept: {name}, is {diff} against them, "
        f"within chance. --choose lowest takes trial {lowest.number}; more held-out speakers "
        "tell smaller differences apart",
    )


def _first_finished(study):
    """The study's first trial (the user's own options), if it finished."""
    return next(
        (
            t
            for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get("baseline") and t.state.name == "COMPLETE"
        ),
        None,
    )


def _points(rate: float) -> str:
    return f"{100 * rate:+.1f}"


def write_study_report(study, best, path: Path) -> None:
    """The lowest-error trial against the study's first (the user's own options), clip by
    clip, on the report page (fitwhisper.report); the best alone when it is the first. A
    page that cannot be written is a warning: the search's results are in trials.md."""
    from fitwhisper.report import write_report

    first = _first_finished(study)
    best_run = Path(best.user_attrs["run_dir"])
    try:
        if first is None or first.number == best.number:
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
    """The chosen trial's run record without what belongs to that run alone: `train
    --config best_config.yaml --output_dir DIR` trains the same recipe."""
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

    from fitwhisper.tune.study import SURPLUS

    trials = [t for t in study.get_trials(deepcopy=False) if not t.user_attrs.get(SURPLUS)]
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
