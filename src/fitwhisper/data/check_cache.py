"""What the data check learnt of each clip's audio, kept so it is decoded once per content.

Decoding is the whole cost of `check-data` (and of `train`'s and `evaluate`'s check before
any weights load). Each clip's numbers (duration, sample rate, peak, content hash, ...) are
kept per source in $FITWHISPER_CACHE/data-checks/, keyed by what identifies the audio's
bytes without reading them: a file's path, size and modification time; a clip in a tar
shard by its shard's, plus offset and size. A changed or replaced file has another key and
is decoded again; a missing one is never cached. So a second run on the same data checks
it at once, and a run whose data changed decodes only what changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the facts kept change meaning


def audio_key(audio) -> str | None:
    """What identifies a clip's bytes without reading them, or None (not cached: a clip
    held in a dataset, or a file that is not there)."""
    from fitwhisper.data.sources.tar_shards import ShardMember

    try:
        if isinstance(audio, ShardMember):
            st = os.stat(audio.shard)
            return f"{audio.shard}|{st.st_size}|{st.st_mtime_ns}|{audio.offset}|{audio.size}"
        if isinstance(audio, Path):
            st = os.stat(audio)
            return f"{audio}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        return None
    return None


class FactsCache:
    """One source's cached audio facts: `get`/`put` by `audio_key`, `save` at the end.

    An SQLite file per source, read and written a row at a time, so a check of any length
    holds none of it in memory. Each clip's facts are their own short transaction
    (write-ahead log, no fsync: a cache lost to a power cut is decoded again), so a killed
    check keeps what it decoded and processes checking the same data do not wait long on
    each other."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.hits = 0
        self._lock = threading.Lock()  # the check decodes in threads
        self._db = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                path, check_same_thread=False, timeout=30, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS facts (key BLOB PRIMARY KEY, format INTEGER, "
                "facts TEXT)"
            )
        except (OSError, sqlite3.Error) as e:  # a cache that cannot be opened: decode, say so
            log.warning("the data check's cache %s cannot be used: %s", path, e)
            self._db = None

    @classmethod
    def for_source(cls, source: Path | str) -> FactsCache:
        from fitwhisper.models.offline import cache_dir

        where = os.path.abspath(os.path.expanduser(str(source)))
        name = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:24]
        return cls(cache_dir() / "data-checks" / f"{name}.sqlite")

    def get(self, key: str | None) -> dict[str, Any] | None:
        if key is None or self._db is None:
            return None
        with self._lock:
            try:
                found = self._db.execute(
                    "SELECT facts FROM facts WHERE key = ? AND format = ?", (_blob(key), FORMAT)
                ).fetchone()
            except sqlite3.Error:
                return None
            if found is None:
                return None
            self.hits += 1
        return json.loads(found[0])

    def put(self, key: str | None, facts) -> None:
        if key is None or self._db is None:
            return
        body = json.dumps(dataclasses.asdict(facts))
        with self._lock:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO facts VALUES (?, ?, ?)", (_blob(key), FORMAT, body)
                )
            except sqlite3.Error as e:
                log.warning("the data check's cache %s was not written: %s", self.path, e)
                self._db = None

    def save(self) -> None:
        """Close the cache (every clip's facts are written as they come)."""
        if self._db is None:
            return
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error as e:
                log.warning("the data check's cache %s was not closed: %s", self.path, e)
            self._db = None


def _blob(key: str) -> bytes:
    """A key as bytes: a path that is not UTF-8 holds surrogates, which SQLite's text
    refuses."""
    return key.encode("utf-8", "surrogatepass")
