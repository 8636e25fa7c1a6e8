"""The rows of tar shards, shard folders and Hub datasets, as manifest records.

Each clip becomes the dict a JSONL manifest row would be (its audio as an `InMemoryAudio`
that reads the clip when decoded), so `load_manifest` builds rows from every source with
the same column rules, problems and messages as from a manifest file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from fitwhisper.data.sources import hub, tar_shards
from fitwhisper.data.sources.spec import INDEX_FILE, SourceSpec
from fitwhisper.errors import DataError

# (line, record or None, problem detail), as manifest.py's readers yield them.
Record = tuple[int, dict | None, str | None]


def source_records(spec: SourceSpec) -> tuple[str, Path, Iterator[Record]]:
    """The source's format name, the folder its relative paths resolve against, and its
    records in order."""
    if spec.kind == "shards" and (Path(spec.location).expanduser() / INDEX_FILE).is_file():
        folder = Path(spec.location).expanduser()
        return "shards", folder, index_records(folder)
    if spec.kind == "shards":
        shards = tar_shards.expand(spec.location)
        return "shards", Path.cwd(), _tar_records(shards)
    stream = hub.open_stream(spec)
    return "hub", Path(spec.location).expanduser(), hub_records(stream, spec.name)


def index_records(
    folder: Path, offset: int = 0, size: int | None = None, first_line: int = 1
) -> Iterator[Record]:
    """The clips of a shard folder, from its index: nothing in the shards is read. `offset`
    and `size`: only those bytes of the index (one shard's lines, from shards.json)."""
    index = folder / INDEX_FILE
    with index.open("rb") as f:
        f.seek(offset)
        lines = f.read(size).splitlines() if size is not None else f
        for line_no, raw in enumerate(lines, start=first_line):
            line = raw.decode("utf-8", errors="surrogateescape")
            try:
                entry = json.loads(line)
                shard = folder / entry["shard"]
                name = f"{entry['shard']}/{entry['key']}.{entry['ext']}"
                audio = tar_shards.ShardMember(name, str(shard), entry["offset"], entry["size"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise DataError(
                    f"{index} line {line_no} is not an index entry ({e})",
                    hint="the index is written by `fitwhisper shard`: write the shards again",
                ) from e
            yield line_no, {**_clip_fields(entry), "audio": audio}, None


def _clip_fields(entry: dict) -> dict:
    fields = {
        "text": entry.get("text"),
        "id": entry.get("id") or entry.get("key"),
        "duration": entry.get("duration"),
    }
    if entry.get("language"):
        fields["language"] = entry["language"]
    return fields


def _tar_records(shards: list[str]) -> Iterator[Record]:
    line = 0
    for shard in shards:
        for clip in tar_shards.clips(shard):
            line += 1
            yield line, clip_record(clip, shard), None


def clip_record(clip: tar_shards.TarClip, shard: str) -> dict:
    """A tar clip as a manifest record: its .json object's fields, its transcript file under
    `txt`, its audio under `audio` (absent when the clip has no audio file)."""
    record = {k: v for k, v in clip.meta().items() if k != "audio"}
    record.setdefault("id", clip.key)
    for ext in tar_shards.TEXT_EXTENSIONS:
        if ext in clip.files:
            record["txt"] = clip.files[ext].decode("utf-8", errors="surrogateescape").strip()
            break
    audio = tar_shards.audio_of(clip, shard)
    if audio is not None:
        record["audio"] = audio
    return record


def hub_records(stream, name: str) -> Iterator[Record]:
    from fitwhisper.data.audio import InMemoryAudio

    for line, example in enumerate(stream, start=1):
        record = dict(example.pop("json", None) or {})
        record.update(example)
        for ext in tar_shards.AUDIO_EXTENSIONS:  # a WebDataset file's audio, by extension
            if ext in record and "audio" not in record:
                record["audio"] = record.pop(ext)
        audio = record.get("audio")
        if isinstance(audio, bytes | bytearray):
            audio = {"bytes": bytes(audio), "path": record.get("__key__")}
        if isinstance(audio, dict) and (audio.get("bytes") or audio.get("array") is not None):
            record["audio"] = InMemoryAudio(f"{name}[{line - 1}]", value=audio)
        if "__key__" in record:
            record.setdefault("id", record.pop("__key__"))
        yield line, record, None
