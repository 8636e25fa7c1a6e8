"""Checkpoint folders judged by their contents: written whole, marked, checked, rotated safely.

Trainer writes a checkpoint's files one after another and then deletes the oldest ones to
keep `--save_total_limit`, before anything says the new one is whole; a kill at the wrong
moment there used to leave no usable checkpoint. Here (`CheckpointMixin`):

1. Trainer writes `checkpoint-N/` with its own rotation held back;
2. every file is fsynced, then `fitwhisper_checkpoint.json` (the marker) records each
   file's size, and the sha256 of the small ones, and is renamed into place (atomic);
3. only then are old checkpoints removed, each one's marker first, so a half-deleted
   folder is never taken for a whole one; the newest whole checkpoint and the best one
   are never removed.

`problem` judges a folder by its marker and files (missing, truncated, changed);
resume.py skips a damaged checkpoint with a message and takes the one before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MARKER = "fitwhisper_checkpoint.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_HASHED_MAX_BYTES = 1 << 20  # configs, tokenizer, scheduler, RNG: cheap to hash; weights are not


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


def read_marker(checkpoint: Path) -> dict[str, Any] | None:
    try:
        return json.loads((checkpoint / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def problem(checkpoint: Path) -> str | None:
    """What makes a checkpoint unusable, or None when it is whole.

    Whole: its marker exists and every file it lists has the recorded size (and sha256,
    where one was recorded). Markers of earlier fitwhisper versions list no files; their
    presence is all that is judged.
    """
    marker = read_marker(checkpoint)
    if marker is None:
        return f"incomplete (no {MARKER}; the run stopped while writing it)"
    for name, want in marker.get("files", {}).items():
        path = checkpoint / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"damaged: {name} is missing"
        if size != want["size"]:
            return f"damaged: {name} is {size} bytes, {want['size']} when it was written"
        if "sha256" in want and _sha256(path) != want["sha256"]:
            return f"damaged: {name} changed since it was written (sha256 differs)"
    return None


def is_complete(checkpoint: Path) -> bool:
    return problem(checkpoint) is None


def write_marker(checkpoint: Path, body: dict[str, Any]) -> None:
    """Flush every file of `checkpoint` to disk, then mark it whole with their sizes."""
    files = {}
    for path in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
        name = path.relative_to(checkpoint).as_posix()
        if name in (MARKER, f".{MARKER}.tmp"):
            continue
        _fsync(path)
        entry: dict[str, Any] = {"size": path.stat().st_size}
        if entry["size"] <= _HASHED_MAX_BYTES:
            entry["sha256"] = _sha256(path)
        files[name] = entry
    tmp = checkpoint / f".{MARKER}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps({**body, "complete": True, "files": files}, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, checkpoint / MARKER)  # atomic: the marker is whole or absent
    _fsync_dir(checkpoint)


def remove(checkpoint: Path) -> None:
    """Delete a checkpoint, its marker first: a kill midway leaves an unmarked husk, which
    resume skips, never a marked folder with files missing."""
    try:
        (checkpoint / MARKER).unlink()
        _fsync_dir(checkpoint)
    except FileNotFoundError:
        pass
    shutil.rmtree(checkpoint, ignore_errors=True)


def rotate(output_dir: str | Path, keep: int | None, best: str | Path | None) -> list[Path]:
    """Remove old checkpoints beyond `keep` (None or <= 0: keep all): unusable ones first,
    then the oldest. The newest whole checkpoint and `best` always stay.

    Returns:
        The folders removed.
    """
    found = checkpoints(output_dir)
    if not keep or keep <= 0 or len(found) <= keep:
        return []
    whole = [c for c in found if is_complete(c)]
    protected = {whole[-1]} if whole else set()
    if best:
        protected.add(Path(best))
    # Unusable ones first (oldest first), then whole ones oldest first.
    order = [c for c in found if c not in whole] + whole
    removed = []
    for ckpt in order:
        if len(found) - len(removed) <= keep:
            break
        if ckpt not in protected:
            remove(ckpt)
            removed.append(ckpt)
    return removed


class CheckpointMixin:
    """Put before Seq2SeqTrainer: marks each checkpoint whole before any old one is
    removed (module docstring). `run_fingerprint` goes into each marker (resume.py)."""

    run_fingerprint: dict[str, Any] = {}

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(self._get_output_dir(trial=trial))
        ckpt = run_dir / f"checkpoint-{self.state.global_step}"
        if self.args.should_save and ckpt.exists():
            remove(ckpt)  # a resumed run's stale one: its marker must not cover new files
        # Several processes: each writes its own RNG state into the folder; none may start
        # before the stale one is gone, and the marker waits for them all (below).
        self.accelerator.wait_for_everyone()
        keep = self.args.save_total_limit
        self.args.save_total_limit = None  # Trainer's rotation would run before the marker
        try:
            super()._save_checkpoint(model, trial)
        except Exception as e:
            # A full disk, most often: what was written is of no use, and its room is needed.
            if self.args.should_save:
                remove(ckpt)
            from fitwhisper.paths import as_storage_error

            if (storage := as_storage_error(e, ckpt, training=True)) is not None:
                raise storage from e
            raise
        finally:
            self.args.save_total_limit = keep
        self.accelerator.wait_for_everyone()
        if not self.args.should_save:  # only the main process writes
            return
        body = {"global_step": self.state.global_step, "fingerprint": self.run_fingerprint}
        write_marker(ckpt, body)
        for gone in rotate(run_dir, keep, self.state.best_model_checkpoint):
            log.debug("removed %s (--save_total_limit %s)", gone, keep)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside `path` durable (POSIX; a no-op where dirs can't open)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
