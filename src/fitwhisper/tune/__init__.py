"""`fitwhisper tune`: a hyperparameter search with Optuna over `train`'s own options,
judged by the held-out clips' error by generation.

The study folder (--output_dir) holds the study's storage (SQLite by default), one normal
run folder per trial (trials/trial-NNN), the table of trials (trials.md) and the best
trial's options as a config for `train --config` (best_config.yaml). The study's first
trial is the user's own options, so the table shows what the search gained over them, and
best_config.yaml keeps them unless a trial beat them by more than chance (--choose).

- run.py: the search itself (`tune`), its checks before any model loads
- space.py: the search space per method and `--search` overrides
- study.py: the storage, the study, and trials a killed tune left running
- trials.py: one trial: its options, fitted to memory, trained, reported for pruning
- folds.py: --folds, the training speakers dealt into folds for cross-validated trials
- results.py: the best trials' models kept, the table, the chosen config
"""

from fitwhisper.tune.run import TuneResult, search_space, tune

__all__ = ["TuneResult", "search_space", "tune"]
