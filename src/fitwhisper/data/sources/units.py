"""A streamed source cut into units, its shards, for `data/stream.py`.

A shard folder's units are its tars, each with its clips from the index (read by offset,
in any order); plain tar shards are read in the order written; a Hub dataset's units are
its data files (`IterableDataset.shard`). Each unit reads its records the way
`data/sources/records.py` makes them for a manifest, so rows follow the same rules.
"""

from __future__ import annotations

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
    by_shard: dict[str, list[tuple]] = {}
    for line, record, _ in records.index_records(folder):
        by_shard.setdefault(record["audio"].shard, []).append((line, record))
    return [
        Unit(Path(shard).name, len(clips), _IndexedShard(clips))
        for shard, clips in by_shard.items()
    ]


@dataclass(frozen=True)
class _IndexedShard:
    clips: list[tuple[int, dict]]  # (index line, record)

    def __call__(self, start: int, order: list[int] | None) -> Iterator[tuple]:
        picks = order if order is not None else range(len(self.clips))
        for k in picks[start:]:
            line, record = self.clips[k]
            yield line, record, None


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
