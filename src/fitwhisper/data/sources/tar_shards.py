"""Tar shards in WebDataset's layout: reading them as clips, with their transcripts.

A shard is a plain tar. Files whose names share a key (the path up to the first dot of the
file name) make one clip: its audio (`.flac`, `.wav`, `.mp3`, ...) and its transcript, a
`.txt` file or a `.json` object with the transcript under one of the manifest's text
column names (and optionally `language`, `duration`, `id`). Shards are read in order,
streaming: a local file, the output of a `pipe:` command, or an http(s) URL, so a shard of
any size costs one clip of memory. Local shards are read by offset afterwards: a clip's
row holds (shard, offset, size), never its bytes.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import tarfile
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fitwhisper.data.audio import InMemoryAudio
from fitwhisper.data.sources.spec import SHARD_SUFFIXES
from fitwhisper.errors import DataError

AUDIO_EXTENSIONS = ("flac", "wav", "mp3", "ogg", "opus", "m4a", "webm", "aac", "sph")
TEXT_EXTENSIONS = ("txt", "text", "transcript")
_HINT = (
    "a shard is a tar holding, per clip, an audio file and a .txt (or .json) file of the same "
    "name; `fitwhisper shard MANIFEST OUT` writes such shards from any manifest"
)


class ShardMember(InMemoryAudio):
    """A clip stored in a local tar shard, read by offset when it is decoded."""

    __slots__ = ("shard", "offset", "size")

    def __init__(self, name: str, shard: str, offset: int, size: int) -> None:
        super().__init__(name)
        self.shard, self.offset, self.size = shard, offset, size

    def value(self) -> dict:
        try:
            with open(self.shard, "rb") as f:
                f.seek(self.offset)
                data = f.read(self.size)
        except OSError as e:
            raise DataError(f"cannot read {self.name} from {self.shard}: {e}", hint=_HINT) from e
        if len(data) != self.size:
            raise DataError(
                f"{self.shard} ends inside {self.name} (truncated shard?)",
                hint="write the shard again; `fitwhisper check-data` lists every clip it lost",
            )
        return {"bytes": data, "path": self.name}


@dataclass
class TarClip:
    """One clip of a shard: its key and files (extension -> bytes), and where its audio lies
    when the shard is a local file."""

    key: str
    files: dict[str, bytes] = field(default_factory=dict)
    audio_at: dict[str, tuple[int, int]] = field(default_factory=dict)  # ext -> (offset, size)

    def audio_ext(self) -> str | None:
        return next((e for e in AUDIO_EXTENSIONS if e in self.files), None)

    def meta(self) -> dict:
        """The clip's .json object ({} without one or when it is not an object)."""
        raw = self.files.get("json")
        if raw is None:
            return {}
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return {}
        return obj if isinstance(obj, dict) else {}


def expand(location: str) -> list[str]:
    """The shards a location names, in order: brace ranges expanded, globs matched (sorted),
    a shard folder's tars; `pipe:` and URLs as they are.

    Raises:
        DataError: a local pattern that matches no file.
    """
    if location.startswith(("pipe:", "http://", "https://")):
        from braceexpand import braceexpand

        return list(braceexpand(location))
    folder = Path(location).expanduser()
    if folder.is_dir():
        found = sorted(str(p) for p in folder.iterdir() if p.name.endswith(SHARD_SUFFIXES))
        if not found:
            raise DataError(f"{folder} holds no .tar shards", hint=_HINT)
        return found
    from braceexpand import braceexpand

    shards: list[str] = []
    for pattern in braceexpand(str(folder)):
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        shards.extend(m for m in matched if Path(m).is_file())
    if not shards:
        raise DataError(f"no tar shard matches {location}", hint=_HINT)
    return shards


def clips(shard: str) -> Iterator[TarClip]:
    """The clips of one shard, in the order written, streaming.

    Raises:
        DataError: not a tar, or a tar that ends in the middle (named, with how many clips
            were read before).
    """
    local = not shard.startswith(("pipe:", "http://", "https://"))
    current: TarClip | None = None
    n = 0
    try:
        # A local shard is random access: its headers are read and the audio skipped.
        mode = "r:*" if local else "r|*"
        with _opened(shard) as stream, tarfile.open(fileobj=stream, mode=mode) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                key, ext = _key_and_ext(member.name)
                if current is None or key != current.key:
                    if current is not None:
                        n += 1
                        yield current
                    current = TarClip(key)
                if local and ext in AUDIO_EXTENSIONS:
                    current.audio_at[ext] = (member.offset_data, member.size)
                    current.files[ext] = b""  # known, not read: rows read it by offset
                else:
                    current.files[ext] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise DataError(
            f"shard {shard} cannot be read after {n} clips: {e}",
            hint="the tar is damaged or truncated: write it again (or leave it out of the "
            "pattern); " + _HINT,
        ) from e
    if current is not None:
        yield current


def audio_of(clip: TarClip, shard: str) -> InMemoryAudio | None:
    """The clip's audio: by offset in a local shard, else its bytes."""
    ext = clip.audio_ext()
    if ext is None:
        return None
    name = f"{Path(shard).name}/{clip.key}.{ext}"
    if ext in clip.audio_at:
        offset, size = clip.audio_at[ext]
        return ShardMember(name, str(Path(shard).resolve()), offset, size)
    return InMemoryAudio(name, value={"bytes": clip.files[ext], "path": name})


def text_of(clip: TarClip, text_keys: tuple[str, ...]) -> str | None:
    """The transcript: the .txt file, else the .json object's first text key."""
    for ext in TEXT_EXTENSIONS:
        if ext in clip.files:
            return clip.files[ext].decode("utf-8", errors="replace").strip()
    meta = clip.meta()
    return next((str(meta[k]) for k in text_keys if meta.get(k) is not None), None)


def _key_and_ext(name: str) -> tuple[str, str]:
    """WebDataset's rule: the key is the path up to the first dot of the file name."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower() if dot else ""


@contextmanager
def _opened(shard: str):
    """A binary stream of the shard's bytes."""
    if shard.startswith("pipe:"):
        proc = subprocess.Popen(shard[5:], shell=True, stdout=subprocess.PIPE)  # noqa: S602
        try:
            yield proc.stdout
        except BaseException:
            proc.kill()  # read no further: the reader stopped or failed
            raise
        finally:
            proc.stdout.close()
            proc.wait()
        if proc.returncode != 0:
            raise OSError(f"`{shard[5:]}` exited with status {proc.returncode}")
        return
    if shard.startswith(("http://", "https://")):
        with urllib.request.urlopen(shard) as response:  # noqa: S310 (the user's own URL)
            yield response
        return
    if not os.path.isfile(shard):
        raise OSError(f"no such file: {shard}")
    with open(shard, "rb") as f:
        yield f
