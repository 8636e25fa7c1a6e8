"""The data check before training: every row's audio and transcript, per-row results.

Run by `fitwhisper check-data MANIFEST`, and by `train` and `evaluate` before any weights
load. Every clip is decoded once, streaming (two threads), for its duration, loudness and
content hash; nothing is kept but a few numbers per row, so memory stays flat.
"""

from __future__ import annotations

import csv
import itertools
import logging
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from fitwhisper.config import DataConfig
from fitwhisper.data.audio import (
    AudioDecodeError,
    load_audio_with_info,
    load_span_with_info,
)
from fitwhisper.data.check_cache import FactsCache, audio_key
from fitwhisper.data.clip_facts import (
    CLIPPED_LEVEL,
    CLIPPED_SHARE,
    SILENCE_PEAK,
    AudioFacts,
    Problem,
    content_problems,
    facts,
    span_past_end,
)
from fitwhisper.data.manifest import BAD_ENCODING, MISSING_FIELD, UNPARSABLE_ROW, Manifest, Row
from fitwhisper.data.sampled_check import probe_facts
from fitwhisper.data.segments import SEGMENT_PROBLEMS, segment_problems
from fitwhisper.errors import ConfigError, DataError
from fitwhisper.safe_text import json_text
from fitwhisper.whisper_facts import SAMPLE_RATE

log = logging.getLogger(__name__)

_DECODE_THREADS = 2  # libsndfile, FFmpeg and soxr release the GIL while they work
_CHUNK_ROWS = 64  # rows in flight at once: bounds memory however long the manifest

# Every problem a row can have, in report order, with what it means.
PROBLEMS: dict[str, str] = {
    UNPARSABLE_ROW: "the row could not be read",
    MISSING_FIELD: "the row lacks its audio or transcript",
    BAD_ENCODING: "text that is not valid UTF-8",
    "missing_file": "audio file not found",
    "undecodable_audio": "audio that neither soundfile nor FFmpeg can decode",
    "empty_audio": "audio with no samples",
    "silent_audio": f"audio whose peak is below {SILENCE_PEAK:g} (-80 dBFS)",
    "nonfinite_audio": "audio with NaN or Inf samples (one such clip makes training diverge)",
    "clipped_audio": f"over {CLIPPED_SHARE:.0%} of samples at full scale "
    f"(|x| >= {CLIPPED_LEVEL:g}); a warning, the row is still used",
    "too_short": "clip shorter than --min_audio_len",
    "too_long": "clip longer than --max_audio_len (a row with segments is cut into windows)",
    "span_past_end": "offset + duration past the end of the recording",
    **SEGMENT_PROBLEMS,
    "empty_text": "empty transcript",
    "label_too_long": "transcript longer than --max_label_tokens tokens",
    "unknown_language": "a language Whisper has no token for",
    "duplicate_audio": "same audio as an earlier row, different transcript",
    "duplicate_pair": "same audio and transcript as an earlier row",
}
# Problems worth knowing that leave a row fit for training: counted and listed, never skipped.
WARNINGS = frozenset({"clipped_audio", "segment_too_long"})


@dataclass
class RowResult:
    """What the check found for one row."""

    row: Row
    where: str  # `file:line`
    problems: list[Problem] = field(default_factory=list)
    sample_rate_hz: int | None = None
    channels: int | None = None
    duration_s: float | None = None
    label_tokens: int | None = None
    decoded: bool = True  # False: only its header was read (`--check sample:N`)

    @property
    def ok(self) -> bool:
        """Fit for training: no problem but warnings."""
        return all(p.kind in WARNINGS for p in self.problems)


@dataclass
class CheckReport:
    """Per-row results of `check_manifest` and what they add up to."""

    manifest: Manifest
    rows: list[RowResult]
    data_cfg: DataConfig
    labels_checked: bool  # False when no tokenizer was given

    @property
    def ok(self) -> bool:
        """Fit for training: at least one row, and no row with a problem."""
        return bool(self.rows) and all(r.ok for r in self.rows)

    def counts(self, *, warnings: bool = True) -> dict[str, int]:
        """Problem kind -> number of rows that have it (a row may have several); without
        `warnings`, only the kinds that make a row unfit."""
        c = Counter(p.kind for r in self.rows for p in r.problems)
        return {k: c[k] for k in PROBLEMS if c[k] and (warnings or k not in WARNINGS)}

    def usable_rows(self) -> list[Row]:
        return [r.row for r in self.rows if r.ok]

    @property
    def total_hours(self) -> float:
        return sum(r.duration_s or 0.0 for r in self.rows) / 3600

    @property
    def usable_hours(self) -> float:
        return sum(r.duration_s or 0.0 for r in self.rows if r.ok) / 3600

    def bad_rows(self) -> list[RowResult]:
        return [r for r in self.rows if not r.ok]

    def write(self, path: str | Path) -> Path:
        """Write one line per row to `path` (.jsonl or .csv, by its suffix)."""
        with ReportWriter(path) as writer:
            for r in self.rows:
                writer.add(r)
        return writer.path

    def tally(self, shown: int = 50) -> CheckTally:
        tally = CheckTally(
            str(self.manifest.path), self.manifest.format, self.labels_checked, shown
        )
        for r in self.rows:
            tally.add(r)
        return tally

    def format_summary(self) -> str:
        """A table: rows checked, rows per problem, rows fit for training, hours."""
        return self.tally().format_summary()

    def format_bad_rows(self, limit: int | None = 50, report_path: str | Path | None = None) -> str:
        """One line per problem of the rows that have any (warnings marked so):
        `file:line  problem  detail`."""
        return self.tally(limit).format_bad_rows(report_path) if limit else _all_lines(self.rows)


class CheckTally:
    """What the rows of a check add up to, counted as they come, so a check of any length
    holds the first `shown` problem lines and a few counters, never every row."""

    def __init__(self, name: str, fmt: str, labels_checked: bool, shown: int = 50) -> None:
        self.name, self.format, self.labels_checked, self.shown = name, fmt, labels_checked, shown
        self.rows = self.usable = 0
        self.kinds: Counter = Counter()
        self.seconds = self.usable_seconds = 0.0
        self.lines: list[str] = []
        self.more_lines = 0

    def add(self, r: RowResult) -> None:
        self.rows += 1
        self.usable += r.ok
        self.kinds.update(p.kind for p in r.problems)
        self.seconds += r.duration_s or 0.0
        self.usable_seconds += (r.duration_s or 0.0) if r.ok else 0.0
        for line in _problem_lines(r):
            if len(self.lines) < self.shown:
                self.lines.append(line)
            else:
                self.more_lines += 1

    @property
    def ok(self) -> bool:
        return self.rows > 0 and self.usable == self.rows

    def format_summary(self) -> str:
        n = self.rows
        lines = [f"{self.name} ({self.format}): {n:,} rows checked"]
        counts = {k: self.kinds[k] for k in PROBLEMS if self.kinds[k]}
        width = max([len(k) for k in counts] + [len("rows fit for training")])
        for kind, count in counts.items():
            lines.append(f"  {kind:<{width}}  {count:>7,}  {PROBLEMS[kind]}")
        lines.append(f"  {'rows fit for training':<{width}}  {self.usable:>7,}  of {n:,}")
        lines.append(
            f"  {'hours of audio':<{width}}  {self.seconds / 3600:>7.2f}  "
            f"({self.usable_seconds / 3600:.2f} h in rows fit for training)"
        )
        if not self.labels_checked:
            lines.append("  transcript lengths in tokens were not checked (no --model given)")
        lines.append("fit for training" if self.ok else "NOT fit for training")
        return "\n".join(lines)

    def format_bad_rows(self, report_path: str | Path | None = None) -> str:
        lines = list(self.lines)
        if self.more_lines:
            see = f", see {report_path}" if report_path else ", see --report FILE"
            lines.append(f"... and {self.more_lines:,} more{see}")
        return "\n".join(lines)


def _problem_lines(r: RowResult) -> list[str]:
    return [
        f"{r.where}  {p.kind}  {p.detail}" + (" (warning)" if p.kind in WARNINGS else "")
        for p in r.problems
    ]


def _all_lines(rows: list[RowResult]) -> str:
    return "\n".join(line for r in rows for line in _problem_lines(r))


class ReportWriter:
    """The per-row report (`check-data --report`), one line per row as rows are checked."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.suffix.lower() not in (".jsonl", ".csv"):
            raise ConfigError(
                f"report file {path} must end in .jsonl or .csv", hint="e.g. --report report.csv"
            )

    def __enter__(self) -> ReportWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A file name that is not UTF-8 (surrogate escapes) is written as \udcXX, readable.
        self._file = self.path.open("w", encoding="utf-8", errors="backslashreplace", newline="")
        self._csv = None
        if self.path.suffix.lower() == ".csv":
            self._csv = csv.DictWriter(self._file, fieldnames=_REPORT_FIELDS)
            self._csv.writeheader()
        return self

    def add(self, r: RowResult) -> None:
        if self._csv is not None:
            self._csv.writerow(_record(r))
        else:
            self._file.write(json_text(_record(r)) + "\n")

    def __exit__(self, *exc) -> None:
        self._file.close()


def check_manifest(
    manifest: Manifest,
    data_cfg: DataConfig,
    tokenizer=None,
    progress: bool = True,
    decode: frozenset[int] | None = None,
) -> CheckReport:
    """Check every row of `manifest` against `data_cfg`.

    Args:
        manifest: from `load_manifest`.
        data_cfg: min/max clip length and the label token limit.
        tokenizer: the model's Whisper tokenizer; without it label lengths are not checked.
        progress: show a progress bar (only when `fitwhisper.logs.progress_enabled()`).
        decode: the rows whose audio is decoded (`checked_rows`); None: every row.

    Returns:
        A `CheckReport`; nothing is raised for bad rows (see `apply_bad_row_policy`).
    """
    results = list(checked_rows(manifest, data_cfg, tokenizer, progress, decode))
    return CheckReport(manifest, results, data_cfg, labels_checked=tokenizer is not None)


def checked_rows(
    manifest: Manifest,
    data_cfg: DataConfig,
    tokenizer=None,
    progress: bool = True,
    decode: frozenset[int] | None = None,
) -> Iterator[RowResult]:
    """Each row's result as it is checked (`check_manifest`'s rules), in order. Holds a few
    rows in flight and each clip's content hash (for duplicates), so a check that writes
    its results out as they come (`check-data`) needs memory that does not grow with the
    rows; `manifest.rows` may be a one-pass iterator (`load_manifest(lazy=True)`).

    `decode`: the rows (`Row.index`) whose audio is decoded, the others' headers read
    (data/sampled_check.py); None decodes every row. A clip the cache knows is never decoded."""
    from fitwhisper.logs import progress_enabled

    seen_audio = FirstByContent()
    bar = None
    if progress and progress_enabled():
        from tqdm import tqdm

        total = len(manifest.rows) if isinstance(manifest.rows, list) else None
        bar = tqdm(total=total, desc="checking data", unit="row")
    cache = FactsCache.for_source(manifest.path)

    def inspect(row: Row) -> AudioFacts:
        key = audio_key(row.audio)
        if key is not None and row.offset_s is not None:  # a span's facts are its own
            key += f"|{row.offset_s}|{row.duration_s}"
        if (known := cache.get(key)) is not None:
            return AudioFacts(**{**known, "problem": _problem(known["problem"])})
        if decode is not None and row.index not in decode:
            return probe_facts(row)  # header facts: not what the cache keeps
        facts = _inspect_audio(row)
        cache.put(key, facts)
        return facts

    rows = 0
    try:
        with ThreadPoolExecutor(_DECODE_THREADS) as pool:
            for chunk in _chunks(manifest.rows, _CHUNK_ROWS):
                for row, audio in zip(chunk, pool.map(inspect, chunk), strict=True):
                    result = RowResult(row, manifest.where(row))
                    _check_row(result, audio, data_cfg, tokenizer, seen_audio)
                    yield result
                rows += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
        cache.save()
    if cache.hits:
        log.info(
            "data check: %s of %s clips known from an earlier check (not decoded again)",
            f"{cache.hits:,}",
            f"{rows:,}",
        )


class FirstByContent:
    """Each clip content's first usable row, (where, hash of its transcript), for telling
    duplicates: kept in a temporary SQLite file (its page cache bounded), so a check of any
    length holds none of it in memory. Read and written by the checking thread only."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("")  # "": a temporary file, removed when closed
        self._db.execute("CREATE TABLE first (digest TEXT PRIMARY KEY, place BLOB, text INT)")

    def get(self, digest: str) -> tuple[str, int] | None:
        found = self._db.execute(
            "SELECT place, text FROM first WHERE digest = ?", (digest,)
        ).fetchone()
        return None if found is None else (found[0].decode("utf-8", "surrogatepass"), found[1])

    def put(self, digest: str, where: str, text: int) -> None:
        # Bytes: a file name that is not UTF-8 holds surrogates, which SQLite's text refuses.
        place = where.encode("utf-8", "surrogatepass")
        self._db.execute("INSERT OR IGNORE INTO first VALUES (?, ?, ?)", (digest, place, text))

    def __del__(self) -> None:
        self._db.close()


def _problem(kept: dict | None) -> Problem | None:
    return None if kept is None else Problem(**kept)


def apply_bad_row_policy(
    report: CheckReport,
    data_cfg: DataConfig,
    report_path: str | Path | None = None,
    purpose: str = "training",
) -> list[Row]:
    """The rows to use, by `data_cfg.bad_rows`.

    "error": raise if any row has a problem, naming the first few. "skip": return the rows
    without problems and log how many were left out for which problem (the first of a set of
    duplicates is kept).

    Raises:
        DataError: bad rows with `bad_rows="error"`, or no usable row at all.
    """
    bad = report.bad_rows()
    name = report.manifest.path
    see = f"; every row is listed in {report_path}" if report_path else ""
    if not bad:
        return report.usable_rows()
    summary = ", ".join(f"{n:,} {kind}" for kind, n in report.counts(warnings=False).items())
    if data_cfg.bad_rows == "error":
        firsts = [(r, next(p for p in r.problems if p.kind not in WARNINGS)) for r in bad[:5]]
        shown = [f"  {r.where}: {p.kind} ({p.detail})" for r, p in firsts]
        if len(bad) > 5:
            shown.append(f"  ... and {len(bad) - 5:,} more")
        raise DataError(
            f"{len(bad):,} of {len(report.rows):,} rows of {name} are unfit for {purpose} "
            f"({summary}):\n" + "\n".join(shown),
            hint=f"fix those rows, or pass --bad_rows skip to leave them out (counted), or run "
            f"`fitwhisper check-data {name}` to list them all{see}",
        )
    usable = report.usable_rows()
    log.warning(
        "Skipped %s of %s rows of %s: %s%s",
        f"{len(bad):,}",
        f"{len(report.rows):,}",
        name,
        summary,
        see,
    )
    if not usable:
        raise DataError(
            f"every row of {name} has a problem ({summary})",
            hint=f"run `fitwhisper check-data {name}` to see them",
        )
    return usable


# --- one row ------------------------------------------------------------------------------


def _inspect_audio(row: Row) -> AudioFacts:
    """Decode one clip (in a worker thread) and keep only numbers about it."""
    if row.audio is None:
        return AudioFacts()
    if isinstance(row.audio, Path) and not row.audio.is_file():
        return AudioFacts(Problem("missing_file", f"{row.audio} not found"))
    past_end = None
    try:
        if row.offset_s is None:
            samples, info = load_audio_with_info(row.audio)
        else:  # the row's span only: rows pointing into one recording differ by their span
            samples, info = load_span_with_info(row.audio, row.offset_s, row.duration_s)
            past_end = span_past_end(row, info.duration_s)
            info = replace(info, duration_s=samples.size / SAMPLE_RATE)
    except AudioDecodeError as e:
        return AudioFacts(Problem("undecodable_audio", e.message))
    except DataError as e:  # a path inside a dataset row that does not exist
        return AudioFacts(Problem("missing_file", e.message))
    return facts(samples, info, past_end)


def row_problems(row: Row, samples, info, cfg: DataConfig, tokenizer) -> list[Problem]:
    """The problems (warnings left out) of one row whose audio is decoded: the checks of
    `check_manifest` but duplicates, for rows checked as they are trained on (streams)."""
    result = RowResult(row, row.id)
    _check_row(result, facts(samples, info), cfg, tokenizer, None)
    return [p for p in result.problems if p.kind not in WARNINGS]


def _check_row(
    result: RowResult,
    audio: AudioFacts,
    cfg: DataConfig,
    tokenizer,
    seen_audio: FirstByContent | None,  # None: duplicates not looked for
) -> None:
    row, add = result.row, result.problems.append
    if row.problem:
        add(Problem(row.problem, row.detail or PROBLEMS[row.problem]))
    result.sample_rate_hz = audio.sample_rate_hz
    result.channels = audio.channels
    result.duration_s = audio.duration_s
    result.decoded = audio.decoded
    if audio.problem:
        add(audio.problem)
    elif audio.duration_s is not None:
        d = audio.duration_s
        if audio.span_past_end:
            add(Problem("span_past_end", audio.span_past_end))
        if audio.decoded:
            result.problems += content_problems(audio)
        if audio.clipped_share > CLIPPED_SHARE:
            add(
                Problem(
                    "clipped_audio",
                    f"{audio.clipped_share:.1%} of samples at full scale "
                    f"(|x| >= {CLIPPED_LEVEL:g}) > {CLIPPED_SHARE:.0%}",
                )
            )
        if (audio.digest is not None or not audio.decoded) and d < cfg.min_audio_len:
            add(Problem("too_short", f"{d:.2f} s < --min_audio_len {cfg.min_audio_len:g} s"))
        if d > cfg.max_audio_len and row.segments is None:
            add(Problem("too_long", f"{d:.2f} s > --max_audio_len {cfg.max_audio_len:g} s"))
    if row.segments is not None:
        # Cut into windows before training (data/recordings.py): their segments are what
        # must hold, the whole text's length in tokens is not.
        for kind, detail in segment_problems(row.segments, audio.duration_s):
            add(Problem(kind, detail))
        if not row.segments:
            add(Problem("empty_text", "the row's segments are an empty list"))
        if tokenizer is not None and row.language:
            from fitwhisper.data.features import prefix_ids

            try:
                prefix_ids(tokenizer, row.language, "transcribe")
            except DataError as e:
                add(Problem("unknown_language", e.message))
    elif row.text is not None and not row.text.strip() and row.problem is None:
        add(Problem("empty_text", "the transcript is empty"))
    elif row.text and row.text.strip() and tokenizer is not None:
        _check_label(result, tokenizer, cfg)
    if audio.digest is not None and seen_audio is not None:
        # Only usable rows become "the first": a later good copy of a bad row is kept.
        first = seen_audio.get(audio.digest)
        text = hash((row.text or "").strip())
        if first is None and result.ok:
            seen_audio.put(audio.digest, result.where, text)
        elif first is not None:
            same_text = first[1] == text
            kind = "duplicate_pair" if same_text else "duplicate_audio"
            what = "audio and transcript" if same_text else "audio"
            add(Problem(kind, f"same {what} as {first[0]}"))


def _check_label(result: RowResult, tokenizer, cfg: DataConfig) -> None:
    from fitwhisper.data.features import label_ids

    row = result.row
    # The longest prompt the row can get: language and task tokens (multilingual models).
    try:
        n = len(label_ids(tokenizer, row.text, row.language or "en", "transcribe"))
    except DataError as e:  # an unknown language code in the row's language column
        result.problems.append(Problem("unknown_language", e.message))
        return
    result.label_tokens = n
    if n > cfg.max_label_tokens:
        result.problems.append(
            Problem(
                "label_too_long",
                f"{n} tokens > --max_label_tokens {cfg.max_label_tokens} (special tokens included)",
            )
        )


def _chunks(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    rows = iter(rows)
    while chunk := list(itertools.islice(rows, size)):
        yield chunk


_REPORT_FIELDS = [
    "index",
    "line",
    "where",
    "id",
    "audio",
    "language",
    "text",
    "ok",
    "problems",
    "details",
    "duration_s",
    "sample_rate_hz",
    "channels",
    "label_tokens",
]


def _record(r: RowResult) -> dict:
    return {
        "index": r.row.index,
        "line": r.row.line,
        "where": r.where,
        "id": r.row.id,
        "audio": str(r.row.audio) if r.row.audio is not None else None,
        "language": r.row.language,
        "text": r.row.text,
        "ok": r.ok,
        "problems": ";".join(p.kind for p in r.problems),
        "details": "; ".join(p.detail for p in r.problems),
        "duration_s": None if r.duration_s is None else round(r.duration_s, 3),
        "sample_rate_hz": r.sample_rate_hz,
        "channels": r.channels,
        "label_tokens": r.label_tokens,
    }
