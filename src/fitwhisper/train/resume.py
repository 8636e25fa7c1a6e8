"""Resuming a stopped run: which checkpoint to continue from, and whether the run still
matches.

`fitwhisper train --resume` continues from the newest whole checkpoint in the run folder
(`--resume PATH`: a named one); Trainer's `resume_from_checkpoint` restores the weights,
optimizer, scheduler, RNG and data position. This module only decides *which* checkpoint
(checkpoints.py judges each by its marker and files: an incomplete or damaged one is skipped
with a message and the one before taken), and refuses one whose run differed, field by
field and manifest by hash; `prepare_output_dir` applies `--resume` /
`--overwrite_output_dir` to the run folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from fitwhisper.config import TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.train.checkpoints import checkpoints, problem, read_marker, remove, step_of

log = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"  # the last file Trainer writes into a checkpoint

# Options that may change between a run and its resumption without changing what is learnt:
# where things are written and shown, how many checkpoints are kept, how fast data loads,
# the eval batch size (eval only), and the resume options themselves. Everything else (the
# schedule's length, learning rate, batch, data, eval cadence that drives best-model and
# early stopping) changes the run, so a difference is reported and needs
# --resume_despite_changes.
RESUMABLE_CHANGES = frozenset(
    {
        "output_dir",  # --resume PATH may continue another folder's checkpoint elsewhere
        "logging_steps",
        "logging_dir",
        "report_to",
        "use_wandb",
        "wandb_project",
        "cache_dir",
        "save_total_limit",
        "dataloader_num_workers",
        "log_mel",  # where the same features are made (bit-identical on a CPU, data/log_mel.py)
        "per_device_eval_batch_size",
        "score_before",  # scoring, not training
        "push_to_hub",
        "hub_model_id",
        "resume",
        "resume_despite_changes",
        "overwrite_output_dir",
    }
)


def find_checkpoint(output_dir: str | Path, resume: str) -> Path:
    """The checkpoint to resume from: the newest whole one (`resume == "latest"`) or the
    named folder. Incomplete or damaged checkpoints newer than the chosen one are skipped
    with a warning saying why.

    Raises:
        ConfigError: no whole checkpoint, or the named one is missing, incomplete or damaged.
    """
    if resume != "latest":
        return _named_checkpoint(Path(resume))
    found = checkpoints(output_dir)
    for ckpt in reversed(found):
        why = problem(ckpt)
        if why is None:
            return ckpt
        log.warning("skipping %s: %s", ckpt, why)
    raise ConfigError(
        f"--resume: no whole checkpoint in {output_dir}"
        + (f" ({len(found)} incomplete or damaged)" if found else ""),
        hint="train without --resume to start afresh (add --overwrite_output_dir if "
        "checkpoints are in the way), or pass --resume PATH",
    )


def _named_checkpoint(path: Path) -> Path:
    if not path.is_dir():
        raise ConfigError(
            f"--resume {path}: no such checkpoint folder",
            hint="pass a checkpoint-N folder, or a bare --resume for the newest in --output_dir",
        )
    why = problem(path)
    if why is None:
        return path
    if read_marker(path) is None and _trainer_state_ok(path):
        log.warning(
            "%s was not written by fitwhisper: its options cannot be compared with this run's",
            path,
        )
        return path
    raise ConfigError(
        f"--resume {path}: the checkpoint is {why}",
        hint="resume from an earlier checkpoint, or a bare --resume for the newest whole one",
    )


def remove_unusable_after(output_dir: str | Path, step: int) -> list[Path]:
    """Delete incomplete or damaged checkpoints past `step`: Trainer would write the same
    step's checkpoint into them again and mix fresh files with stale ones."""
    removed = []
    for ckpt in checkpoints(output_dir):
        if step_of(ckpt) > step and (why := problem(ckpt)) is not None:
            remove(ckpt)
            removed.append(ckpt)
            log.warning("removed %s: %s", ckpt, why)
    return removed


def fingerprint(
    sections: dict[str, Any], manifests: dict[str, dict[str, str | None]]
) -> dict[str, Any]:
    """What identifies a run: its options by section, and its manifests' paths and hashes."""
    return {
        "options": {name: dataclasses.asdict(cfg) for name, cfg in sections.items()},
        "manifests": manifests,
    }


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Every difference that matters between a checkpoint's fingerprint and this run's."""
    found = []
    old_opts, new_opts = old.get("options", {}), new.get("options", {})
    for section, values in new_opts.items():
        before = old_opts.get(section, {})
        for name, value in values.items():
            if name in RESUMABLE_CHANGES or name not in before:
                # A field newer than the checkpoint's fitwhisper: nothing to compare with.
                continue
            if before[name] != value:
                found.append(f"--{name}: {before[name]!r} in the checkpoint, now {value!r}")
    for split, now in new.get("manifests", {}).items():
        then = old.get("manifests", {}).get(split)
        if then is None or then.get("sha256") == now.get("sha256"):
            continue
        found.append(
            f"{split} manifest {now.get('path')} changed: sha256 {_short(then.get('sha256'))} in "
            f"the checkpoint, now {_short(now.get('sha256'))}"
        )
    return found


def check_unchanged(checkpoint: Path, current: dict[str, Any], *, proceed: bool) -> None:
    """Refuse to resume a checkpoint whose run differs from this one, unless `proceed`.

    Raises:
        ConfigError: listing every difference, when not `proceed`.
    """
    marker = read_marker(checkpoint)
    if marker is None:
        return  # not a fitwhisper checkpoint; find_checkpoint already warned
    diffs = differences(marker.get("fingerprint", {}), current)
    if not diffs:
        return
    listing = "\n  - ".join(diffs)
    if proceed:
        log.warning("resuming %s despite these differences:\n  - %s", checkpoint, listing)
        return
    raise ConfigError(
        f"this run differs from the one that wrote {checkpoint}:\n  - {listing}",
        hint="restore the checkpoint's options and data, or pass --resume_despite_changes to "
        "resume anyway",
    )


def _trainer_state_ok(path: Path) -> bool:
    try:
        json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def prepare_output_dir(out: Path, cfg: TrainConfig, run_fingerprint: dict) -> Path | None:
    """The checkpoint to resume from (checked against this run), or None for a fresh start;
    clears an earlier run's checkpoints and TensorBoard events with --overwrite_output_dir."""
    from fitwhisper.train.trainer import logs_dir

    if cfg.resume:
        ckpt = find_checkpoint(out, cfg.resume)
        check_unchanged(ckpt, run_fingerprint, proceed=cfg.resume_despite_changes)
        remove_unusable_after(out, step_of(ckpt))
        log.info("resuming from %s", ckpt)
        return ckpt
    if cfg.overwrite_output_dir:
        old = checkpoints(out)
        for ckpt in old:
            remove(ckpt)
        events = list(logs_dir(cfg, out).glob("events.out.tfevents.*"))
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


def train_or_finish(trainer, resume_from: Path | None, n_rows: int) -> tuple[int, float | None]:
    """`trainer.train()`, resuming from `resume_from`; or, when that checkpoint is already at
    the run's last step, only its weights and state (the best checkpoint's weights with
    load_best_model_at_end), as the uninterrupted run ends.

    Trainer would train one step more there (it skips the data it has seen and takes the
    next batch before it checks the step count), so the result would differ.

    Returns:
        The global step and the mean training loss of the steps trained (None if none).
    """
    from fitwhisper.train.trainer import planned_steps

    if resume_from is None:
        out = trainer.train()
        return out.global_step, out.training_loss
    args = trainer.args
    effective = args.per_device_train_batch_size * args.gradient_accumulation_steps
    total, _ = planned_steps(
        n_rows, effective * max(args.world_size, 1), args.max_steps, args.num_train_epochs
    )
    step = step_of(resume_from)
    if step < total:
        out = trainer.train(resume_from_checkpoint=str(resume_from))
        return out.global_step, out.training_loss
    from transformers import TrainerState

    log.info(
        "%s is the run's last step (%d of %d): nothing left to train", resume_from, step, total
    )
    trainer.state = TrainerState.load_from_json(str(resume_from / TRAINER_STATE))
    best = trainer.state.best_model_checkpoint
    use_best = trainer.args.load_best_model_at_end and best and Path(best).is_dir()
    # Trainer's own loader: full weights or a PEFT adapter, sharded or not.
    trainer._load_from_checkpoint(str(best if use_best else resume_from))
    return trainer.state.global_step, None
