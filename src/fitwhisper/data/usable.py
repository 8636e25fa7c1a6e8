"""The checked, usable rows of a manifest: the one way every command reads data.

`train` (training and held-out rows), `evaluate`, the forgetting guard, rehearsal and the
export re-check all take their rows from `usable_rows`: load the manifest, check every row
(data/check.py), apply `--bad_rows` and `--max_*_samples`, cut long recordings with timed
segments into windows of up to 30 s (data/recordings.py), and say what was left out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from fitwhisper.config import DataConfig
from fitwhisper.data.check import CheckReport, apply_bad_row_policy, check_manifest
from fitwhisper.data.manifest import Row, load_manifest, select
from fitwhisper.data.recordings import CutReport, cut_recordings
from fitwhisper.data.sampled_check import sampled_rows
from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UsableRows:
    """A manifest's rows fit to use, and what the check found.

    ``durations`` are the seconds the check measured, one per row of ``rows``; ``skipped``
    names each row left out by ``--bad_rows skip`` as ``file:line problem (detail)``.
    A long recording with segments is in ``rows`` as its windows; ``cut`` says what
    cutting made and left out.
    """

    rows: list[Row]
    skipped: tuple[str, ...]
    report: CheckReport
    durations: list[float]
    cut: CutReport = field(default_factory=CutReport)

    def summary(self, path: str | Path, sha256: str | None) -> dict:
        """What data_report.json records for one manifest."""
        return {
            "manifest": str(path),
            "sha256": sha256,
            "rows": len(self.report.rows),
            "usable": len(self.report.usable_rows()),
            "used": len(self.rows),
            "problems": self.report.counts(),
            **_sampled(self.report),
            **({"long_recordings": self.cut.summary()} if self.cut.recordings else {}),
        }


def usable_rows(
    manifest_path: str | Path,
    data_cfg: DataConfig | None,
    tokenizer=None,
    *,
    limit: int | None = None,
    purpose: str = "training",
    report_path: str | Path | None = None,
    cut: bool = True,
    sample: int | None = None,
) -> UsableRows:
    """The rows of `manifest_path` that pass the data check, by `data_cfg.bad_rows`.

    Args:
        data_cfg: columns, clip-length and label limits, and the bad-row policy.
        tokenizer: measures transcripts against `max_label_tokens` (None: not measured).
        limit: keep only the first N usable rows.
        purpose: "training" or "scoring", for the error message.
        report_path: write the per-row report here (.csv or .jsonl) before deciding.
        cut: cut rows with segments into windows; False keeps each recording whole
            (`evaluate --long_form`).
        sample: decode only this many rows drawn at random (`train --check sample:N`); the
            others' headers are read and the rows marked `header_only`, for training to
            check their samples as it loads them (data/late_check.py). None: decode all.

    Raises:
        DataError: bad rows with `bad_rows="error"`, or no usable row at all.
    """
    cfg = data_cfg or DataConfig()
    if cfg.bad_rows not in ("error", "skip"):
        raise ConfigError(f"unknown --bad_rows {cfg.bad_rows!r}", hint="use error or skip")
    manifest = load_manifest(manifest_path, **cfg.manifest_columns())
    decode = None if sample is None else sampled_rows(len(manifest.rows), sample)
    report = check_manifest(manifest, cfg, tokenizer=tokenizer, decode=decode)
    if decode is not None:
        _log_sample(manifest.path, report)
    if report_path is not None:
        report.write(report_path)
    rows = select(apply_bad_row_policy(report, cfg, report_path, purpose=purpose), limit)
    measured = {r.row.index: r.duration_s for r in report.rows}
    skipped = tuple(
        f"{r.where} {'; '.join(f'{p.kind} ({p.detail})' for p in r.problems)}"
        for r in report.bad_rows()
    )
    durations = [measured.get(r.index) or 0.0 for r in rows]
    header_only = {r.row.index for r in report.rows if not r.decoded}
    if header_only:
        rows = [replace(r, header_only=True) if r.index in header_only else r for r in rows]
    if not cut:
        return UsableRows(rows, skipped, report, durations)
    rows, durations, made = cut_recordings(
        rows, durations, tokenizer, max_label_tokens=cfg.max_label_tokens, where=manifest.where
    )
    if made.recordings:
        log.info("%s: %s", manifest.path, made.describe())
    return UsableRows(rows, skipped, report, durations, made)


def _sampled(report: CheckReport) -> dict:
    """What a sampled check (`--check sample:N`) decoded and what its sample found; empty
    when every row was decoded."""
    decoded = [r for r in report.rows if r.decoded]
    if len(decoded) == len(report.rows):
        return {}
    return {
        "decoded": len(decoded),
        "decoded_unfit": sum(not r.ok for r in decoded),
        "header_only": len(report.rows) - len(decoded),
    }


def _log_sample(path: Path, report: CheckReport) -> None:
    sampled = _sampled(report) or {"decoded": len(report.rows), "decoded_unfit": 0}
    decoded, unfit = sampled["decoded"], sampled["decoded_unfit"]
    log.info(
        "%s: --check sample decoded %d of %d rows drawn at random (%d unfit: %.1f%%); the "
        "other %d were checked by their headers, and any whose samples fail when training "
        "loads them is replaced by the next clip and counted in data_report.json",
        path,
        decoded,
        len(report.rows),
        unfit,
        100 * unfit / max(decoded, 1),
        sampled.get("header_only", 0),
    )
