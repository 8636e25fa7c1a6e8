"""The Optuna study a `tune` runs in: its storage, and what a restart finds there.

The study lives in a storage, not in this process: SQLite in the study folder by default,
any database URL, or a journal file. Every process that names the same storage and study
works on one study (Optuna's own mechanism for several processes, GPUs or machines), and a
killed `tune` started again continues it. With a database, each running trial writes a
heartbeat; a trial whose heartbeat stops (its process was killed) is marked failed and
queued again with the same parameters (Optuna's RetryHeartbeatStaleTrialCallback), and that retry
resumes the killed trial's run folder from its last checkpoint: no trial lost or repeated.
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)

# Trials that count towards --n_trials; a failed (killed, crashed) trial does not.
COUNTED_STATES = ("COMPLETE", "PRUNED")
SURPLUS = "surplus"  # a trial's user attribute: asked for after --n_trials were claimed
STALE_AFTER_HEARTBEATS = 3


def storage_for(study_dir: Path, storage: str | None, heartbeat_s: int):
    """The Optuna storage the options name (see TuneConfig.storage)."""
    import optuna
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback

    if storage and storage.endswith(".journal"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(storage))
    url = storage or f"sqlite:///{(study_dir / 'study.db').resolve()}"
    try:
        with warnings.catch_warnings():
            # The heartbeat is "experimental" since Optuna 2.8.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return RDBStorage(
                url,
                heartbeat_interval=heartbeat_s,
                grace_period=STALE_AFTER_HEARTBEATS * heartbeat_s,
                heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=2),
                engine_kwargs=_engine_options(url),
            )
    except Exception as e:  # SQLAlchemy's errors name the driver, the URL, the cause
        raise ConfigError(
            f"--storage {url}: cannot open the study's storage ({type(e).__name__}: {e})",
            hint="check the URL and that its database server is reachable, or leave "
            "--storage out to keep the study in the study folder (SQLite)",
        ) from e


def setting_up(study_dir: Path):
    """The processes of this machine that share a study folder set the study up one at a
    time: together they would both create its tables and both queue its first trial
    (several machines sharing a database server: its own transactions)."""
    from fitwhisper.folder_lock import waiting_for

    return waiting_for(study_dir / ".study-setup.lock")


def _engine_options(url: str) -> dict | None:
    # SQLite: wait for a lock another process holds instead of failing at once.
    return {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else None


def open_study(storage, name: str, seed: int):
    """The study `name` in `storage`, made on first use (direction: lower error)."""
    import optuna

    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction="minimize",
        load_if_exists=True,
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
    )
    # Seeded by how far the study got, so a restart does not draw the first trials again.
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.get_trials(deepcopy=False)))
    return study


def judged_alike(study, tune_cfg, seed: int, study_dir: Path) -> None:
    """A study's trials are compared by their errors, so they must all be judged one way:
    the first process records how (--folds, its speaker column and the seed that deals
    them, or an --eval_manifest), and a later one judging otherwise is refused before it
    writes anything (new folds would also change the unfinished trials' data under them).

    Raises:
        ConfigError: the study's trials were judged otherwise.
    """
    judging = {"folds": 1}
    if tune_cfg.folds > 1:
        judging = {"folds": tune_cfg.folds, "speaker_column": tune_cfg.speaker_column, "seed": seed}
    recorded = study.user_attrs.get("judging")
    if recorded is None:  # a new study, or one from before this record: it starts here
        study.set_user_attr("judging", judging)
    elif recorded != judging:
        done = counted(study)
        raise ConfigError(
            f"the study in {study_dir} judged its {done} trial(s) by {_told(recorded)}; this "
            f"run asks for {_told(judging)}: their errors would not compare",
            hint="give the study's own options to continue it, or a new --output_dir (or "
            "--study_name) to start another study",
        )


def _told(judging: dict) -> str:
    if judging["folds"] > 1:
        return (
            f"{judging['folds']}-fold cross-validation over '{judging['speaker_column']}' "
            f"(seed {judging['seed']})"
        )
    return "an --eval_manifest"


def counted(study) -> int:
    """Trials that count towards --n_trials: finished or pruned."""
    return sum(t.state.name in COUNTED_STATES for t in study.get_trials(deepcopy=False))


def claimed_before(study, number: int) -> int:
    """Trials numbered before `number` that count or will (finished, pruned, or running in
    some process): the storage numbers trials in the order they are asked for, so of
    several processes sharing a study, exactly those whose trial comes after --n_trials
    claimed ones find it full."""
    claims = (*COUNTED_STATES, "RUNNING")
    return sum(
        t.number < number and t.state.name in claims and not t.user_attrs.get(SURPLUS)
        for t in study.get_trials(deepcopy=False)
    )


def settle_stale_trials(study, heartbeat_s: int) -> None:
    """Trials left running by a killed `tune` are failed and queued again once their
    heartbeat is old enough. Waits for that at start (a trial of a live process keeps
    beating and is left alone), so a quick restart picks the killed trial up first."""
    import optuna
    from optuna.storages import fail_stale_trials

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if not running or not hasattr(study._storage, "get_heartbeat_interval"):
        return
    log.info(
        "%d trial(s) of this study are marked running (%s); waiting up to %d s to tell a "
        "killed one from another process's",
        len(running),
        ", ".join(str(t.number) for t in running),
        STALE_AFTER_HEARTBEATS * heartbeat_s,
    )
    deadline = time.monotonic() + (STALE_AFTER_HEARTBEATS + 1) * heartbeat_s
    while time.monotonic() < deadline:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)
        still = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if not {t.number for t in still} & {t.number for t in running}:
            return
        time.sleep(min(heartbeat_s, 5))
