"""Streamed training: clips read from their shards as they are trained on.

For tar shards, shard folders and Hub datasets (`train --streaming auto`), training never
loads the rows of the whole set, decodes nothing ahead and keeps no Arrow cache of features:

- **Units.** A source is cut into units, its shards: a shard folder's tars (their index
  gives each unit's clips, read by offset), plain tar shards, a Hub dataset's data files.
- **Slots.** Every data-loader worker of every process is a slot (`rank * workers +
  worker`). Each epoch the units are shuffled (seeded by the run's seed and the epoch) and
  dealt to the slots, whole; a unit's clips are shuffled too when an index lists them.
  With fewer units than slots an indexed source deals parts of units, and any other source
  is refused before training (write more shards, or use fewer workers).
- **Epochs.** A slot goes on to its next epoch by itself: the stream never ends, every
  process takes the same number of steps (`max_steps`), and in each slot's epoch every clip
  of its units is trained once.
- **Position.** Each item carries its slot's position after it (epoch, unit, clip), so the
  trainer knows exactly what it has consumed, prefetching aside; a checkpoint keeps that,
  and a resumed run starts each slot there without reading what came before.
- **Mixes.** Several sources (`train --train_mix`) are each dealt to the slots as above; a
  slot draws its next clip's source by the mix's shares, the n-th draw decided by (seed,
  slot, n) alone, so a resumed slot draws on as the uninterrupted one did. Each source
  runs through its own epochs: a small source at a large share is repeated.
- **Bad clips** (undecodable, silent, too long, ...: the data check's rules, duplicates
  aside) are skipped, logged and counted, never a crash.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from fitwhisper.data.batching import ITEMS_KEY
from fitwhisper.data.manifest import Row, RowMaker
from fitwhisper.errors import ConfigError, DataError

log = logging.getLogger(__name__)

STATE_FILE = "stream_state_rank{}.json"  # in each checkpoint, one per process
SKIPPED_KEY = "fitwhisper_stream_skipped"  # batch entry: the slot's bad rows so far
CLIPS_KEY = "fitwhisper_stream_clips"  # batch entry: `shard/id` of each clip (a list)
# An item's position as one int64 (the batch's item tags, train/guard.py): slot, source in
# the mix, epoch, unit within the slot's epoch, clip within the unit (the next to read).
_BITS = {"slot": 10, "source": 3, "epoch": 14, "unit": 15, "clip": 21}
MAX_SOURCES = 1 << _BITS["source"]
_LOGGED_SKIPS = 20  # bad rows named in the log per slot; the rest are counted


@dataclass(frozen=True)
class Position:
    """Where a slot's stream is: the next clip to read is `clip` of unit `unit` (in the
    order the slot reads its units in `epoch`)."""

    epoch: int = 0
    unit: int = 0
    clip: int = 0


def encode(slot: int, source: int, p: Position) -> int:
    value = 0
    fields = (("slot", slot), ("source", source), ("epoch", p.epoch), ("unit", p.unit))
    for name, v in (*fields, ("clip", p.clip)):
        if not 0 <= v < 1 << _BITS[name]:
            raise DataError(f"stream position {name} {v} out of range", hint="use fewer shards")
        value = (value << _BITS[name]) | v
    return value


def decode(value: int) -> tuple[int, int, Position]:
    """(slot, source, position) of an item tag."""
    parts = {}
    for name in reversed(_BITS):
        parts[name] = value & ((1 << _BITS[name]) - 1)
        value >>= _BITS[name]
    return parts["slot"], parts["source"], Position(parts["epoch"], parts["unit"], parts["clip"])


@dataclass
class Unit:
    """One shard of a streamed source.

    Attributes:
        name: how messages name it.
        clips: its clips when an index says, else None.
        read: a picklable callable giving the unit's records (manifest.py's
            (line, dict, problem) triples) from clip `start` on, in `order` when given.
        source: which source of a mix it belongs to (0 without a mix).
    """

    name: str
    clips: int | None
    read: Callable[[int, list[int] | None], Iterator[tuple]]
    source: int = 0


@dataclass
class StreamedClips(IterableDataset):
    """The training items of streamed units (module docstring); `item(row, audio, rng)`
    makes an example from a checked row, `check(row, samples, info)` lists its problems.
    `row_makers` and `shares`: one per source (`Unit.source`), the shares summing to 1."""

    units: list[Unit]
    row_makers: list[RowMaker]
    item: Callable[[Row, np.ndarray, np.random.Generator | None], dict[str, Any]]
    check: Callable[[Row, np.ndarray, Any], list]
    seed: int
    rank: int = 0  # this process among `world` (train/ranks.py)
    world: int = 1
    augmenting: bool = False
    shares: list[float] = field(default_factory=lambda: [1.0])
    resume_at: dict[tuple[int, int], Position] = field(default_factory=dict)  # (slot, source)
    skipped_before: dict[int, int] = field(default_factory=dict)
    draws_before: dict[int, int] = field(default_factory=dict)  # items a slot gave so far

    def __post_init__(self) -> None:
        if len(self.row_makers) != len(self.shares) or len(self.shares) > MAX_SOURCES:
            raise ValueError(f"{len(self.shares)} shares for {len(self.row_makers)} sources")

    @property
    def clips(self) -> int | None:
        """Clips per epoch, when every unit's count is known."""
        counts = [u.clips for u in self.units]
        return None if None in counts else sum(counts)

    def slots(self, world: int, workers: int) -> int:
        return world * max(workers, 1)

    def source_units(self, source: int) -> list[int]:
        """Positions in `units` of one source's units."""
        return [i for i, u in enumerate(self.units) if u.source == source]

    def problem_for(self, world: int, workers: int) -> str | None:
        """Why these units cannot feed `world` processes of `workers` workers, or None."""
        slots = self.slots(world, workers)
        for source in range(len(self.shares)):
            units = [self.units[i] for i in self.source_units(source)]
            if len(units) >= slots or None not in [u.clips for u in units]:
                continue
            which = f"source {source + 1} of the mix" if len(self.shares) > 1 else "data"
            return (
                f"the training {which} has {len(units)} shards for {slots} readers ({world} "
                f"processes x {max(workers, 1)} data-loader workers): each reader needs shards "
                "of its own"
            )
        return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        slot = self.rank * workers + worker
        slots = self.slots(self.world, workers)
        skipped = [self.skipped_before.get(slot, 0)]  # shared by the slot's sources
        streams = [
            self._source_items(slot, slots, source, skipped) for source in range(len(self.shares))
        ]
        if len(streams) == 1:
            yield from streams[0]
            return
        bounds = np.cumsum(self.shares)
        for n in count(self.draws_before.get(slot, 0)):
            draw = np.random.default_rng([self.seed, slot, n]).random()
            source = min(int(np.searchsorted(bounds, draw, side="right")), len(streams) - 1)
            yield next(streams[source])

    def _source_items(
        self, slot: int, slots: int, source: int, skipped: list[int]
    ) -> Iterator[dict[str, Any]]:
        """One source's items for `slot`, epoch after epoch, from where it was left."""
        from fitwhisper.data.audio import load_audio_with_info

        start = self.resume_at.get((slot, source), Position())
        mine = self.source_units(source)
        maker = self.row_makers[source]
        for epoch in count(start.epoch):
            plan = self._dealt(mine, slot, slots, epoch)
            first_unit = start.unit if epoch == start.epoch else 0
            for u in range(first_unit, len(plan)):
                unit_id, order = plan[u]
                unit = self.units[unit_id]
                first = start.clip if (epoch, u) == (start.epoch, start.unit) else 0
                for n, (line, obj, parse_error) in enumerate(unit.read(first, order), first):
                    row = maker.row(n, line, obj, parse_error)
                    problems, audio = self._checked(row, load_audio_with_info)
                    if problems:
                        skipped[0] += 1
                        self._log_skip(unit, row, problems, skipped[0])
                        continue
                    rng = None
                    if self.augmenting:
                        # The clip's draws follow from (seed, epoch, unit, clip), whatever
                        # the slot or worker reading it.
                        rng = np.random.default_rng([self.seed, epoch, unit_id, n])
                    example = self.item(row, audio, rng)
                    example[ITEMS_KEY] = encode(slot, source, Position(epoch, u, n + 1))
                    example[SKIPPED_KEY] = skipped[0]
                    example[CLIPS_KEY] = f"{unit.name}/{row.id}"
                    yield example

    def _dealt(
        self, units: list[int], slot: int, slots: int, epoch: int
    ) -> list[tuple[int, list[int] | None]]:
        """The units (positions in `units`, one source's) slot `slot` reads in `epoch`, each
        with its clip order (None: as stored). Units are shuffled by (seed, epoch) and dealt
        round the slots; an indexed source with fewer units than slots deals parts of units."""
        rng = np.random.default_rng([self.seed, epoch])
        order = [units[int(i)] for i in rng.permutation(len(units))]
        if len(units) >= slots:
            return [(i, self._clip_order(i, epoch)) for i in order[slot::slots]]
        # Each unit cut in `slots` parts; this slot reads one part of each.
        return [(i, self._clip_order(i, epoch)[slot::slots]) for i in order]

    def _clip_order(self, i: int, epoch: int) -> list[int] | None:
        clips = self.units[i].clips
        if clips is None:
            return None
        return np.random.default_rng([self.seed, epoch, i]).permutation(clips).tolist()

    def _checked(self, row: Row, load) -> tuple[list, np.ndarray | None]:
        from fitwhisper.data.check import Problem

        if row.problem:
            return [Problem(row.problem, row.detail or "")], None
        if row.audio is None:
            return [Problem("missing_field", "no audio")], None
        try:
            samples, info = load(row.audio)
        except DataError as e:
            return [Problem("undecodable_audio", e.message)], None
        return self.check(row, samples, info), samples

    def _log_skip(self, unit: Unit, row: Row, problems: list, skipped: int) -> None:
        if skipped <= _LOGGED_SKIPS:
            what = "; ".join(f"{p.kind} ({p.detail})" for p in problems)
            log.warning("streamed training: skipped %s in %s: %s", row.id, unit.name, what)
        elif skipped == _LOGGED_SKIPS + 1:
            log.warning("streamed training: more rows skipped; the count is in the run's log")


class StreamCollator:
    """Collates with the run's collator and adds each item's stream position (under the
    divergence guard's item key) and its slot's count of skipped rows, as tensors."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        tags = [f.pop(ITEMS_KEY) for f in features]
        skipped = [f.pop(SKIPPED_KEY) for f in features]
        clips = [f.pop(CLIPS_KEY) for f in features]
        batch = self.collator(features)
        batch[ITEMS_KEY] = torch.tensor(tags, dtype=torch.long)
        batch[SKIPPED_KEY] = torch.tensor(skipped, dtype=torch.long)
        batch[CLIPS_KEY] = clips
        return batch


class StreamPositions:
    """What each slot of this process has consumed: the positions of the batches the
    trainer took (not those prefetched), per slot and source, and the items each slot gave
    (a mix's draws); saved in each checkpoint and read on resume."""

    def __init__(self) -> None:
        self.positions: dict[tuple[int, int], Position] = {}
        self.skipped: dict[int, int] = {}
        self.draws: dict[int, int] = {}

    def start_from(self, ds: StreamedClips) -> None:
        """Count on from where a resumed dataset starts."""
        self.positions = dict(ds.resume_at)
        self.skipped = dict(ds.skipped_before)
        self.draws = dict(ds.draws_before)

    def note(self, tags: torch.Tensor | None, skipped: torch.Tensor | None) -> None:
        if tags is None:
            return
        for k, value in enumerate(tags.tolist()):
            slot, source, p = decode(int(value))
            self.draws[slot] = self.draws.get(slot, 0) + 1
            old = self.positions.get((slot, source))
            if old is None or (p.epoch, p.unit, p.clip) > (old.epoch, old.unit, old.clip):
                self.positions[slot, source] = p
            if skipped is not None:
                self.skipped[slot] = max(self.skipped.get(slot, 0), int(skipped[k]))

    def save(self, checkpoint: Path, rank: int, slots: int) -> None:
        positions = [[s, src, p.epoch, p.unit, p.clip] for (s, src), p in self.positions.items()]
        body = {
            "slots": slots,
            "positions": positions,
            "skipped": self.skipped,
            "draws": self.draws,
        }
        (checkpoint / STATE_FILE.format(rank)).write_text(json.dumps(body, indent=1) + "\n")

    @staticmethod
    def load(checkpoint: Path, rank: int, slots: int) -> tuple[dict, dict, dict]:
        """The saved positions of this process's slots (by slot and source), their skipped
        rows and their draws.

        Raises:
            ConfigError: the checkpoint was streamed by another number of readers.
        """
        path = checkpoint / STATE_FILE.format(rank)
        if not path.is_file():
            raise ConfigError(
                f"{checkpoint} has no stream position for process {rank} ({path.name})",
                hint="resume with as many processes as the run had, or start afresh",
            )
        body = json.loads(path.read_text())
        if body["slots"] != slots:
            raise ConfigError(
                f"{checkpoint} was streamed by {body['slots']} readers (processes x data-loader "
                f"workers); this run has {slots}",
                hint="resume with the run's processes and --dataloader_num_workers, or start "
                "afresh",
            )
        positions = {(s, src): Position(*p) for s, src, *p in body["positions"]}
        skipped = {int(s): n for s, n in body.get("skipped", {}).items()}
        return positions, skipped, {int(s): n for s, n in body.get("draws", {}).items()}
