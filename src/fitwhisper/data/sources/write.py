"""`fitwhisper shard`: any data source written as tar shards with an index.

Shards are WebDataset tars of about a chosen size: per clip its audio file as it was (never
re-encoded; clips stored as arrays become FLAC), a .txt transcript and a .json with its id,
language and duration. `index.jsonl` records every clip's shard, byte offset, duration,
language and transcript, and `shards.json` the totals (clips, hours, durations, languages),
so later runs know the data's hours and length distribution without decoding anything, and
read a clip by offset. Durations come from each file's header (decoded where it has none).
Rows that cannot be written (no audio, undecodable, empty transcript) are counted by problem
and listed in the summary, never dropped silently.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fitwhisper.data.audio import AudioDecodeError, InMemoryAudio, load_audio_with_info
from fitwhisper.data.manifest import Manifest, Row
from fitwhisper.data.sources.spec import INDEX_FILE
from fitwhisper.errors import DataError

log = logging.getLogger(__name__)

SUMMARY_FILE = "shards.json"
FORMAT = "fitwhisper-shards/1"
_SHARD_NAME = "shard-{:06d}.tar"


@dataclass
class ShardSummary:
    """What `write_shards` wrote: totals, per shard, and what it left out."""

    folder: Path
    clips: int = 0
    seconds: float = 0.0
    shards: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    skipped_rows: list[str] = field(default_factory=list)  # the first few, `where: problem`

    def describe(self) -> str:
        left = ""
        if self.skipped:
            kinds = ", ".join(f"{n} {kind}" for kind, n in self.skipped.most_common())
            left = f"; {sum(self.skipped.values())} rows left out ({kinds}), listed in "
            left += str(self.folder / SUMMARY_FILE)
        return (
            f"wrote {self.clips:,} clips ({self.seconds / 3600:.2f} h) in {len(self.shards)} "
            f"shards to {self.folder}{left}"
        )


@dataclass
class _Clip:
    key: str
    row: Row
    data: bytes
    ext: str
    duration_s: float


def write_shards(
    manifest: Manifest,
    out: Path,
    *,
    shard_mb: float = 256.0,
    sort_by_duration: bool = False,
    source: str = "",
) -> ShardSummary:
    """Write `manifest`'s rows into `out` as tar shards of about `shard_mb` MB each, with
    `index.jsonl` and `shards.json`. Each shard is written aside and renamed into place; the
    index last, so a folder with an index is complete.

    Args:
        sort_by_duration: order the clips of each shard by duration (for batching by length).
        source: what the rows were read from, recorded in `shards.json`.
    """
    out.mkdir(parents=True, exist_ok=True)
    summary = ShardSummary(out)
    limit = max(1, int(shard_mb * 1e6))
    index_tmp = out / (INDEX_FILE + ".partial")
    durations: list[float] = []
    text_bytes: list[int] = []  # each transcript's UTF-8 bytes: a bound on its tokens
    languages: Counter = Counter()
    with index_tmp.open("wb") as index:
        for group in _groups(_clips(manifest, summary), limit):
            if sort_by_duration:
                group.sort(key=lambda c: c.duration_s)
            name = _SHARD_NAME.format(len(summary.shards))
            entries = _write_tar(out / name, group)
            # Each shard's index lines are contiguous: a reader of one shard reads only them.
            index_offset = index.tell()
            for entry in entries:
                index.write((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
                durations.append(entry["duration"])
                text_bytes.append(len((entry.get("text") or "").encode("utf-8")))
                languages[entry.get("language") or "unknown"] += 1
            seconds = sum(c.duration_s for c in group)
            summary.shards.append(
                {
                    "name": name,
                    "clips": len(group),
                    "seconds": round(seconds, 3),
                    "bytes": (out / name).stat().st_size,
                    "index_offset": index_offset,
                    "index_bytes": index.tell() - index_offset,
                }
            )
            summary.clips += len(group)
            summary.seconds += seconds
    if not summary.clips:
        index_tmp.unlink()
        raise DataError(
            f"no row of {manifest.path} could be written ({_kinds(summary.skipped)})",
            hint=f"run `fitwhisper check-data {manifest.path}` to see why",
        )
    (out / SUMMARY_FILE).write_text(
        json.dumps(
            _summary_record(summary, durations, text_bytes, languages, sort_by_duration, source),
            indent=2,
        )
        + "\n"
    )
    os.replace(index_tmp, out / INDEX_FILE)
    return summary


def read_summary(folder: Path) -> dict | None:
    """A shard folder's `shards.json`, or None when it has none."""
    path = folder / SUMMARY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _clips(manifest: Manifest, summary: ShardSummary) -> Iterator[_Clip]:
    from tqdm import tqdm

    from fitwhisper.logs import progress_enabled

    rows = tqdm(manifest.rows, desc="sharding", unit="clip", disable=not progress_enabled())
    for row in rows:
        problem = _problem(row)
        clip = None
        if problem is None:
            try:
                data, ext = _audio_bytes(row.audio)
                # The row's position as key: unique and dot-free, whatever the row's id.
                clip = _Clip(f"{row.index:09d}", row, data, ext, _duration_s(data, str(row.audio)))
            except AudioDecodeError as e:
                problem = f"undecodable_audio ({e.message})"
            except DataError as e:  # the file is not there
                problem = f"missing_file ({e.message})"
        if problem is not None:
            kind = problem.split(" ", 1)[0]
            summary.skipped[kind] += 1
            if len(summary.skipped_rows) < 100:
                summary.skipped_rows.append(f"{manifest.where(row)}: {problem}")
            continue
        yield clip


def _problem(row: Row) -> str | None:
    if row.problem:
        return f"{row.problem} ({row.detail})"
    if row.audio is None:
        return "missing_field (no audio)"
    if not (row.text or "").strip():
        return "empty_text (no transcript)"
    return None


def _audio_bytes(audio: Path | InMemoryAudio) -> tuple[bytes, str]:
    """The clip's file bytes and extension; an array (or bytes of no known format) as FLAC."""
    if isinstance(audio, InMemoryAudio):
        value = audio.value()
        name = str(value.get("path") or audio.name)
        if value.get("bytes"):
            return value["bytes"], _ext(name) or "flac"
        if value.get("array") is None and value.get("path"):
            return _audio_bytes(Path(value["path"]))
        samples, _ = load_audio_with_info(audio)
        return _flac(samples), "flac"
    path = Path(audio)
    if not path.is_file():
        raise DataError(f"audio file {path} not found")
    return path.read_bytes(), _ext(path.name) or "flac"


def _ext(name: str) -> str | None:
    from fitwhisper.data.sources.tar_shards import AUDIO_EXTENSIONS

    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    return ext if ext in AUDIO_EXTENSIONS else None


def _flac(samples: np.ndarray) -> bytes:
    import soundfile as sf

    from fitwhisper.whisper_facts import SAMPLE_RATE

    buf = io.BytesIO()
    sf.write(buf, samples, SAMPLE_RATE, format="FLAC")
    return buf.getvalue()


def _duration_s(data: bytes, name: str) -> float:
    """From the header (soundfile), else by decoding."""
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(data))
        if info.frames > 0:
            return info.frames / info.samplerate
    except (sf.LibsndfileError, RuntimeError, TypeError):
        pass
    return load_audio_with_info(InMemoryAudio(name, value={"bytes": data}))[1].duration_s


def _groups(clips: Iterator[_Clip], limit: int) -> Iterator[list[_Clip]]:
    group: list[_Clip] = []
    size = 0
    for clip in clips:
        if group and size + len(clip.data) > limit:
            yield group
            group, size = [], 0
        group.append(clip)
        size += len(clip.data) + 3 * 512  # tar headers and padding, roughly
    if group:
        yield group


def _write_tar(path: Path, clips: list[_Clip]) -> list[dict]:
    """Write one shard (aside, then renamed) and return its index entries."""
    tmp = path.with_name(path.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for c in clips:
            meta = {"id": c.row.id, "duration": round(c.duration_s, 6)}
            if c.row.language:
                meta["language"] = c.row.language
            for ext, data in (
                (c.ext, c.data),
                ("txt", (c.row.text or "").encode("utf-8")),
                ("json", json.dumps(meta, ensure_ascii=False).encode("utf-8")),
            ):
                info = tarfile.TarInfo(f"{c.key}.{ext}")
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    # The offsets, read back from the headers written (nothing else is read).
    with tarfile.open(tmp, "r:") as tar:
        at = {m.name: (m.offset_data, m.size) for m in tar if m.isfile()}
    os.replace(tmp, path)
    entries = []
    for c in clips:
        offset, size = at[f"{c.key}.{c.ext}"]
        entry = {
            "key": c.key,
            "shard": path.name,
            "offset": offset,
            "size": size,
            "ext": c.ext,
            "duration": round(c.duration_s, 6),
            "text": c.row.text,
            "id": c.row.id,
        }
        if c.row.language:
            entry["language"] = c.row.language
        entries.append(entry)
    return entries


def _summary_record(
    summary: ShardSummary,
    durations: list[float],
    text_bytes: list[int],
    languages: Counter,
    sort: bool,
    source: str,
) -> dict:
    d, b = np.asarray(durations), np.asarray(text_bytes)
    return {
        "format": FORMAT,
        "source": source,
        "clips": summary.clips,
        "hours": round(summary.seconds / 3600, 4),
        "durations_s": {
            "min": round(float(d.min()), 3),
            "mean": round(float(d.mean()), 3),
            "p50": round(float(np.percentile(d, 50)), 3),
            "p90": round(float(np.percentile(d, 90)), 3),
            "max": round(float(d.max()), 3),
        },
        "transcript_bytes": {
            "p50": int(np.percentile(b, 50)),
            "p90": int(np.percentile(b, 90)),
            "max": int(b.max()),
        },
        "languages": dict(languages.most_common()),
        "sorted_by_duration": sort,
        "shards": summary.shards,
        "skipped": dict(summary.skipped),
        "skipped_rows": summary.skipped_rows,
    }


def _kinds(skipped: Counter) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in skipped.most_common()) or "no rows"
