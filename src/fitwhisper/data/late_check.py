"""Training rows whose audio the data check did not decode (`train --check sample:N`),
checked as training loads them.

A clip that fails then (it does not decode, holds no samples, NaN or Inf, or silence) is
not trained on: its item is replaced by the next item that loads, the same one every time,
so a resumed run draws what the uninterrupted one drew. Each failure is logged (the first
few) and appended to RUN/late_check.jsonl by whichever process or data-loader worker met
it; `train` counts that file into data_report.json when training ends.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from fitwhisper.data.audio import AudioDecodeError, load_row_audio
from fitwhisper.data.batching import ItemsOf
from fitwhisper.data.clip_facts import Problem, decoded_problems
from fitwhisper.errors import DataError

log = logging.getLogger(__name__)

RECORD_FILE = "late_check.jsonl"
# Items tried in a row before giving up: past this, the data is broken, not a few clips.
MAX_REPLACED_IN_A_ROW = 50
_LOGGED = 5  # failures logged by each process; the rest are counted


class UnfitClip(DataError):
    """A header-only row whose samples failed when training loaded them."""

    def __init__(self, row, problems: list[Problem]) -> None:
        what = "; ".join(f"{p.kind} ({p.detail})" for p in problems)
        super().__init__(f"line {row.line} ({row.id}): {what}")
        self.row, self.problems = row, problems


def load_training_audio(row) -> np.ndarray:
    """A training row's audio; for a header-only row also its sample checks.

    Raises:
        UnfitClip: a header-only row whose clip fails (any other row's failure is raised as
            it always was: its clip was checked).
    """
    if not row.header_only:
        return load_row_audio(row)
    try:
        audio = load_row_audio(row)
    except DataError as e:
        kind = "undecodable_audio" if isinstance(e, AudioDecodeError) else "missing_file"
        raise UnfitClip(row, [Problem(kind, e.message)]) from e
    if problems := decoded_problems(audio):
        raise UnfitClip(row, problems)
    return audio


class ReplacingUnfit(ItemsOf):
    """Training items, each whose clip turns out unfit replaced by the next one that loads
    (`--check sample:N`). Put inside `guard.tagged`, which names the items of a batch."""

    def __init__(self, base: Dataset, record: Path) -> None:
        super().__init__(base)
        self.record = Path(record)
        self._logged = 0

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self.base)
        for k in range(min(n, MAX_REPLACED_IN_A_ROW)):
            try:
                return self.base[(i + k) % n]
            except UnfitClip as e:
                self._note(e)
        raise DataError(
            f"{min(n, MAX_REPLACED_IN_A_ROW)} training items in a row from item {i} hold a "
            "clip that fails when loaded (named in the log and in "
            f"{self.record}); the sampled data check (--check sample:N) let them through",
            hint="run `fitwhisper check-data` on the training data to find every bad row, "
            "or train with --check full",
        )

    def _note(self, e: UnfitClip) -> None:
        line = {"line": e.row.line, "id": e.row.id, "problems": [p.kind for p in e.problems]}
        # One short append per failure: whole lines even with several writers (O_APPEND).
        with self.record.open("a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
        self._logged += 1
        if self._logged <= _LOGGED:
            log.warning("training skipped an unchecked clip (--check sample): %s", e.message)
        elif self._logged == _LOGGED + 1:
            log.warning("more unchecked clips skipped: the count is in data_report.json")


def record_failures(out: Path) -> int:
    """The header-only rows that failed in training (RUN/late_check.jsonl, each row once),
    logged and written into RUN/data_report.json under train's `failed_while_training`."""
    path = Path(out) / RECORD_FILE
    if not path.is_file():
        return 0
    failed: dict[int, dict] = {}
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(text)
        except json.JSONDecodeError:  # a line cut by a kill mid-write
            continue
        failed.setdefault(entry["line"], entry)
    report_path = Path(out) / "data_report.json"
    reports = json.loads(report_path.read_text())
    reports["train"]["failed_while_training"] = {
        "rows": len(failed),
        "first": sorted(failed.values(), key=lambda e: e["line"])[:20],
    }
    report_path.write_text(json.dumps(reports, indent=2) + "\n")
    if failed:
        log.warning(
            "training met %d row(s) whose clip failed (not decoded by --check sample): each "
            "replaced by the next clip; listed in %s",
            len(failed),
            report_path,
        )
    return len(failed)


def start_record(out: Path, resumed: bool) -> None:
    """A fresh run starts with no failures recorded; a resumed one keeps its own."""
    if not resumed:
        try:
            os.unlink(Path(out) / RECORD_FILE)
        except FileNotFoundError:
            pass
