"""Resuming a stopped run: which checkpoints are complete, and whether the run still matches.

`fitwhisper train --resume` continues from the newest complete checkpoint in the run folder
(`--resume PATH`: a named one); Trainer's `resume_from_checkpoint` restores the weights,
optimizer, scheduler, RNG and data position. This module only decides *which* checkpoint,
and refuses one whose run differed, field by field and manifest by hash;
`prepare_output_dir` applies `--resume` / `--overwrite_output_dir` to the run folder.

Completeness: Trainer writes a checkpoint's files one after another (model, optimizer,
scheduler, RNG, trainer_state.json last), so a SIGKILL can leave a half-written folder.
`CheckpointMarker` writes `fitwhisper_checkpoint.json` from `on_save`, which Trainer calls
after the whole checkpoint is written; a folder without it is incomplete.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from fitwhisper.config import TrainConfig
from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)

MARKER = "fitwhisper_checkpoint.json"
TRAINER_STATE = "trainer_state.json"  # the last file Trainer writes into a checkpoint
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")

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
        "per_device_eval_batch_size",
        "resume",
        "resume_despite_changes",
        "overwrite_output_dir",
    }
)


def checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-N` folders of a run folder, oldest step first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    found = [p for p in out.iterdir() if p.is_dir() and _CHECKPOINT_RE.match(p.name)]
    return sorted(found, key=step_of)


def step_of(checkpoint: Path) -> int:
    m = _CHECKPOINT_RE.match(checkpoint.name)
    return int(m.group(1)) if m else -1


def is_complete(checkpoint: Path) -> bool:
    """Whether every file of the checkpoint was written (its marker exists and parses)."""
    return read_marker(checkpoint) is not None


def read_marker(checkpoint: Path) -> dict[str, Any] | None:
    try:
        return json.loads((checkpoint / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find_checkpoint(output_dir: str | Path, resume: str) -> Path:
    """The checkpoint to resume from: the newest complete one (`resume == "latest"`) or the
    named folder. Incomplete checkpoints newer than the chosen one are skipped with a warning.

    Raises:
        ConfigError: no complete checkpoint, or the named one is missing or incomplete.
    """
    if resume != "latest":
        path = Path(resume)
        if not path.is_dir():
            raise ConfigError(
                f"--resume {resume}: no such checkpoint folder",
                hint="pass a checkpoint-N folder, or a bare --resume for the newest in "
                "--output_dir",
            )
        if not is_complete(path):
            if not _trainer_state_ok(path):
                raise ConfigError(
                    f"--resume {resume}: the checkpoint is incomplete (its run stopped while "
                    "writing it)",
                    hint="resume from an earlier checkpoint, or a bare --resume for the newest "
                    "complete one",
                )
            log.warning(
                "%s was not written by fitwhisper: its options cannot be compared with this run's",
                path,
            )
        return path
    found = checkpoints(output_dir)
    for ckpt in reversed(found):
        if is_complete(ckpt):
            return ckpt
        log.warning(
            "skipping %s: incomplete (no %s; the run stopped while writing it)", ckpt, MARKER
        )
    raise ConfigError(
        f"--resume: no complete checkpoint in {output_dir}"
        + (f" ({len(found)} incomplete)" if found else ""),
        hint="train without --resume to start afresh (add --overwrite_output_dir if "
        "checkpoints are in the way), or pass --resume PATH",
    )


def remove_incomplete_after(output_dir: str | Path, step: int) -> list[Path]:
    """Delete incomplete checkpoints past `step`: Trainer would write the same step's
    checkpoint into them again and mix fresh files with stale ones."""
    removed = []
    for ckpt in checkpoints(output_dir):
        if step_of(ckpt) > step and not is_complete(ckpt):
            shutil.rmtree(ckpt)
            removed.append(ckpt)
            log.warning("removed incomplete %s (the earlier run stopped while writing it)", ckpt)
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


def checkpoint_marker(current: dict[str, Any]):
    """A TrainerCallback that marks each checkpoint complete once Trainer has written it."""
    from transformers import TrainerCallback

    class CheckpointMarker(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if not ckpt.is_dir():
                return
            body = {"complete": True, "global_step": state.global_step, "fingerprint": current}
            tmp = ckpt / f".{MARKER}.tmp"
            tmp.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, ckpt / MARKER)  # atomic: the marker is whole or absent

    return CheckpointMarker()


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
        remove_incomplete_after(out, step_of(ckpt))
        log.info("resuming from %s", ckpt)
        return ckpt
    if cfg.overwrite_output_dir:
        old = checkpoints(out)
        for ckpt in old:
            shutil.rmtree(ckpt)
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
