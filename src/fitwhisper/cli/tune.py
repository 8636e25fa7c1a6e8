"""`fitwhisper tune`: train's flags, the search's own, and the function that runs it."""

from __future__ import annotations

import argparse

from fitwhisper.cli.flags import Options, add_command
from fitwhisper.cli.train import SECTIONS as TRAIN_SECTIONS
from fitwhisper.cli.train import ConfigFile, options_from
from fitwhisper.tune_config import TuneConfig

SECTIONS = {**TRAIN_SECTIONS, "tune": TuneConfig}
OPTIONS = (Options(ConfigFile), *(Options(cls, name) for name, cls in SECTIONS.items()))


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "tune",
        OPTIONS,
        run,
        help="Search learning rate, epochs, warm-up, LoRA shape (Optuna) by held-out error.",
        description="Runs trials of `train` with some options drawn from a search space "
        "(per method; --search changes it), each a normal run folder under "
        "--output_dir/trials, judged by its error on --eval_manifest by generation (or, "
        "with --folds N, on every training speaker by cross-validation); Optuna "
        "prunes trials that fall behind, and the memory planner prunes a trial that would "
        "not fit the GPU before it loads. The study lives in --output_dir/study.db (or "
        "--storage), so a killed tune continues where it stopped and several tune "
        "processes can share one study. The first trial is your own options. Writes "
        "trials.md (every trial, parameter importances) and best_config.yaml (`train "
        "--config best_config.yaml` trains the best recipe: the lowest error's, if it beat "
        "your own options by more than chance; see --choose).",
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.tune import search_space, tune
    from fitwhisper.tune.space import describe, read_specs

    # The --search specs are checked with the other options: all problems at once.
    (model_cfg, data_cfg, train_cfg, tune_cfg), explicit = options_from(
        args,
        SECTIONS,
        also=lambda built: read_specs(built["tune"].search)[1] if "tune" in built else [],
    )
    if tune_cfg.show_space:
        space, fixed = search_space(model_cfg, train_cfg, tune_cfg)
        print("search space:\n" + describe(space, fixed))
        return 0
    r = tune(model_cfg, data_cfg, train_cfg, tune_cfg, explicit=explicit)
    print(r.table)
    if r.best_trial is None:
        print(f"no trial finished; the study is in {r.study_dir}")
        return 1
    print(
        f"\nlowest held-out error: trial {r.best_trial}, {100 * r.best_error:.2f}% "
        f"({r.trials_run_here} trial(s) run by this process)"
    )
    print(
        f"trial {r.chosen_trial}'s options: {r.best_config} "
        f"(fitwhisper train --config {r.best_config} ...)"
    )
    return 0
