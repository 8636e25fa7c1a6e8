"""`fitwhisper tune`'s own options (the rest are `train`'s): the study, its storage, the
search space's overrides. Kept apart from config.py so `tune`'s flags cost no import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class TuneConfig:
    """The hyperparameter search (Optuna): trials, storage and search space."""

    n_trials: int = field(
        default=20,
        metadata={
            "min": 1,
            "help": "Trials the study runs in all, finished or pruned, across every process "
            "that shares it and every restart (a killed tune continues the same count).",
        },
    )
    storage: str | None = field(
        default=None,
        metadata={
            "help": "Where the study lives. Default: SQLite in the study folder "
            "(--output_dir/study.db). A database URL (sqlite:///..., postgresql://...) lets "
            "several processes, GPUs or machines share one study; a file ending .journal is "
            "Optuna's journal storage (no database needed; a killed trial is not rerun).",
            "metavar": "URL|FILE.journal",
        },
    )
    study_name: str | None = field(
        default=None,
        metadata={"help": "The study's name in its storage. Default: the study folder's name."},
    )
    search: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Change the search space, one option at a time: NAME=LOW..HIGH (a range; "
            "add :log for a log scale), NAME=A|B|C (choices), NAME=VALUE (fixed), NAME=off "
            "(not searched). E.g. --search learning_rate=1e-5..1e-3:log --search "
            "lora_r=8|16. `fitwhisper tune --show_space` prints the defaults.",
            "metavar": "NAME=SPEC",
        },
    )
    folds: int = field(
        default=1,
        metadata={
            "min": 1,
            "max": 20,
            "why": "each fold is one more training run per trial",
            "help": "Judge each trial by cross-validation over speakers instead of on "
            "--eval_manifest: the training manifest's speakers (--speaker_column) are dealt "
            "into N folds, each trial trains N times, each time without one fold, and its "
            "error is over every training clip, scored by a run that never heard its "
            "speaker. N times the training per trial; trials are told apart on all your "
            "speakers rather than on a few held out. 1 (default): --eval_manifest judges.",
        },
    )
    speaker_column: str = field(
        default="speaker",
        metadata={"help": "The training manifest's speaker column, for --folds."},
    )
    keep_best: int = field(
        default=3,
        metadata={
            "min": 1,
            "help": "Trials that keep their final/ model (the best by held-out error); the "
            "others keep their logs and metrics only.",
        },
    )
    choose: Literal["significant", "lowest"] = field(
        default="significant",
        metadata={
            "help": "Which trial best_config.yaml holds. significant (default): the trial with "
            "the lowest held-out error, if it beats the first trial (your own options) clip by "
            "clip with a 95% paired-bootstrap interval below zero; otherwise your own "
            "options, since on a small held-out set the lowest of many trials is often luck. "
            "lowest: the lowest error, however small its lead.",
        },
    )
    heartbeat_s: int = field(
        default=30,
        metadata={
            "min": 1,
            # A day: Optuna's heartbeat thread waits this long, and a wait past the C
            # timestamp's range (10**12 s) crashes that thread, leaving the trial unmarked.
            "max": 86_400,
            "why": "a day at most",
            "help": "How often a running trial marks itself alive in the storage; one silent "
            "for 3x this is counted as killed and run again from its last checkpoint "
            "(database storage only).",
        },
    )
    show_space: bool = field(
        default=False,
        metadata={"help": "Print the search space for these options and exit.", "switch": True},
    )
