"""A streamed source cut into units, its shards, for `data/stream.py`.

A shard folder's units are its tars, each with its clips from the index (read by offset,
in any order); plain tar shards are read in the order written; a Hub dataset's units are
its data files (`IterableDataset.shard`). Each unit reads its records the way
`data/sources/records.py` makes them for a manifest, so rows follow the same rules.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.data.manifest import RowMaker
from fitwhisper.data.sources import hub, records, tar_shards
from fitwhisper.data.sources.spec import INDEX_FILE, SourceSpec
from fitwhisper.data.stream import Unit
from fitwhisper.errors import DataError

_HEAD = 100  # records whose keys decide the columns, as for a manifest


@dataclass(frozen=True)
class StreamSource:
    """A source's units and the columns its records are read by."""

    units: list[Unit]
    rows: RowMaker


@dataclass(frozen=True)
class StreamedData:
    """What a streamed run reads: every source's units (each marked with its source), each
    source's row maker, and its share of the clips drawn (one source: [1.0])."""

    units: list[Unit]
    rows: list[RowMaker]
    shares: list[float]


def mixed_sources(parts: list[StreamSource], shares: list[float]) -> StreamedData:
    """The sources of a mix (or one) as one streamed dataset's input."""
    units = [
        dataclasses.replace(unit, source=k) for k, part in enumerate(parts) for unit in part.units
    ]
    return StreamedData(units, [part.rows for part in parts], list(shares))


def stream_source(spec: SourceSpec, columns: dict) -> StreamSource:
    """The units of a shards or Hub source; `columns`: `DataConfig.manifest_columns()`.

    Raises:
        DataError: a source that is not streamed (a manifest), or one without clips.
    """
    if spec.kind == "shards" and (Path(spec.location).expanduser() / INDEX_FILE).is_file():
        units = _indexed_units(Path(spec.location).expanduser())
    elif spec.kind == "shards":
        units = [Unit(Path(s).name, None, _TarShard(s)) for s in tar_shards.expand(spec.location)]
    elif spec.kind == "hub":
        stream = hub.open_stream(spec)
        units = [
            Unit(f"{spec.name} file {k + 1}", None, _HubShard(spec, k, stream.num_shards))
            for k in range(stream.num_shards)
        ]
    else:
        raise DataError(f"{spec.text} is a manifest, read whole rather than streamed")
    head = list(itertools.islice(units[0].read(0, None), _HEAD)) if units else []
    columns = dict(columns)
    where = Path(spec.location).expanduser()
    base = Path(columns.pop("audio_dir", None) or where)
    maker = RowMaker.for_records(head, where, base, **columns)
    return StreamSource(units, maker)


def _indexed_units(folder: Path) -> list[Unit]:
    """A unit per shard, each reading its own lines of the index when it is read (their
    byte range is in shards.json), so nothing grows with the clips before training."""
    summary = index_summary(str(folder)) or {}
    shards = summary.get("shards", [])
    if not shards or any("index_offset" not in s for s in shards):
        raise DataError(
            f"{folder / 'shards.json'} does not say where each shard's index lines are",
            hint="write the shards again with this version of `fitwhisper shard`",
        )
    units, line = [], 1
    for s in shards:
        read = _IndexedShard(folder, s["index_offset"], s["index_bytes"], line)
        units.append(Unit(s["name"], s["clips"], read))
        line += s["clips"]
    return units


@dataclass(frozen=True)
class _IndexedShard:
    folder: Path
    offset: int  # the shard's lines in index.jsonl
    size: int
    first_line: int

    def __call__(self, start: int, order: list[int] | None) -> Iterator[tuple]:
        clips = list(records.index_records(self.folder, self.offset, self.size, self.first_line))
        picks = order if order is not None else range(len(clips))
        for k in picks[start:]:
            yield clips[k]


@dataclass(frozen=True)
class _TarShard:
    shard: str

    def __call__(self, start: int, order: list[int] | None) -> Iterator[tuple]:
        clips = tar_shards.clips(self.shard)
        for line, clip in enumerate(itertools.islice(clips, start, None), start + 1):
            yield line, records.clip_record(clip, self.shard), None


@dataclass(frozen=True)
class _HubShard:
    spec: SourceSpec
    index: int
    shards: int

    def __call__(self, start: int, order: list[int] | None) -> Iterator[tuple]:
        stream = hub.open_stream(self.spec).shard(num_shards=self.shards, index=self.index)
        rows = records.hub_records(stream, self.spec.name)
        yield from itertools.islice(rows, start, None)


def index_summary(location: str) -> dict | None:
    """A shard folder's shards.json (clips, hours, durations), None for other sources."""
    path = Path(location).expanduser() / "shards.json"
    return json.loads(path.read_text()) if path.is_file() else None


# Whisper's byte-level BPE spends at least one byte per token, so a transcript of B UTF-8
# bytes is at most B tokens, plus the label's special tokens (start, language, task,
# no-timestamps, end).
LABEL_SPECIAL_TOKENS = 5


@dataclass(frozen=True)
class IndexLengths:
    """What a shard folder's index says of its longest clip and transcript, for planning
    memory without reading the data."""

    clips: int
    longest_s: float
    label_tokens_at_most: int | None  # None: an index written before transcripts were measured

    def describe(self, location: str) -> str:
        labels = (
            f"transcripts of at most {self.label_tokens_at_most} tokens (their UTF-8 bytes "
            f"and {LABEL_SPECIAL_TOKENS} special tokens)"
            if self.label_tokens_at_most is not None
            else "transcript lengths not recorded (write the shards again to have them)"
        )
        return (
            f"lengths from the index of {location}: {self.clips:,} clips, the longest "
            f"{self.longest_s:.2f} s; {labels}"
        )


def index_lengths(location: str) -> IndexLengths | None:
    """The longest clip and transcript a shard folder's index records, or None for a
    source without one."""
    summary = index_summary(location)
    if not summary:
        return None
    text = summary.get("transcript_bytes")
    return IndexLengths(
        clips=summary["clips"],
        longest_s=summary["durations_s"]["max"],
        label_tokens_at_most=None if text is None else text["max"] + LABEL_SPECIAL_TOKENS,
    )


def index_durations(location: str, at_most: int) -> list[float] | None:
    """Up to `at_most` clip durations (s) a shard folder's index records, every k-th line
    of it (the others read, not parsed), or None for a source without an index."""
    summary = index_summary(location)
    index = Path(location).expanduser() / INDEX_FILE
    if not summary or not index.is_file():
        return None
    every = max(1, -(-summary["clips"] // at_most))
    found = []
    with index.open("rb") as f:
        for line in itertools.islice(f, 0, None, every):
            found.append(float(json.loads(line)["duration"]))
    return found
