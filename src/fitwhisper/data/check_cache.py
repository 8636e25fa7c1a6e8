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
    """One source's cached audio facts: `get`/`put` by `audio_key`, `save` at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.facts: dict[str, dict[str, Any]] = {}
        self.hits = 0
        self._lock = threading.Lock()  # the check decodes in threads
        try:
            with path.open(encoding="utf-8") as f:
                for line in f:
                    entry = json.loads(line)
                    if entry.get("format") == FORMAT:
                        self.facts[entry["key"]] = entry["facts"]
        except (OSError, ValueError, KeyError):
            self.facts = {}  # no cache yet, or one that cannot be read: decode afresh

    @classmethod
    def for_source(cls, source: Path | str) -> FactsCache:
        from fitwhisper.models.offline import cache_dir

        where = os.path.abspath(os.path.expanduser(str(source)))
        name = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:24]
        return cls(cache_dir() / "data-checks" / f"{name}.jsonl")

    def get(self, key: str | None) -> dict[str, Any] | None:
        if key is None:
            return None
        found = self.facts.get(key)
        if found is not None:
            with self._lock:
                self.hits += 1
        return found

    def put(self, key: str | None, facts) -> None:
        if key is not None:
            with self._lock:
                self.facts[key] = dataclasses.asdict(facts)

    def save(self) -> None:
        """Write the facts aside and rename into place (a run killed mid-write loses only
        the cache). A cache that cannot be written is a warning, never a failed check."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("w", encoding="utf-8") as f:
                for key, facts in self.facts.items():
                    f.write(json.dumps({"format": FORMAT, "key": key, "facts": facts}) + "\n")
            os.replace(tmp, self.path)
        except OSError as e:
            log.warning("the data check's cache %s was not written: %s", self.path, e)
            tmp.unlink(missing_ok=True)
