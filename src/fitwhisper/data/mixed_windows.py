"""30 s windows of several clips among the single clips of `--encoder_input mixed`
(`--packed_window_share`), batched apart from them.

Trained on trimmed batches, a model meets one clip at a time, each cut to its own length;
long audio reaches it as 30 s windows that hold several utterances and pauses, decoded with
timestamps. With single clips alone (5% of batches padded to 30 s), tiny.en fine-tuned on
48 digit strings (24 steps, seeds 0-2) lost 29-53% of a 76 s file's words, dropping whole
strings after a pause, where the model trained on 30 s windows lost 3% (seed 0). With 3% of
the items made windows of several consecutive clips, joined to up to 30 s and labelled in
Whisper's timestamp format (`data/packing.py`), the same runs lost 0.0%, 0.0%, 1.6%;
on 400 strings the long file went from 9.21% to 1.32% WER (bench/RESULTS-train-speed.md).

A window costs about what its clips cost alone (30 s of audio either way); a single clip in
a batch with a window would cost a 30 s encoder pass. So `KindBatches` never mixes the two:
windows go in batches of their own (a short one where there are fewer than a batch), clips
in theirs, and an epoch has at most one batch more than the same items batched at random.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from fitwhisper.data.batching import FRAMES_PER_S
from fitwhisper.data.packing import (
    WINDOW_S,
    PackedDataset,
    Window,
    has_timestamp_tokens,
    windows_for,
)

log = logging.getLogger(__name__)


class ClipsAndWindows(Dataset):
    """Training items in manifest order: a clip alone (an item of `clips`, the run's own
    `SpeechDataset`), or a window of several consecutive clips (an item of a
    `PackedDataset`, timestamped).

    `rows` and `windows` (one per item, a lone clip's being its row) name the clips behind
    an item (train/guard.py); `frames` is what the trimming collator keeps (a window of
    several clips: all 30 s); `is_window` tells the trainer's `KindBatches` which items to
    batch together; `lengths` are the durations it groups single clips by
    (`--group_by_duration`).
    """

    def __init__(self, clips, packed: PackedDataset, windows: Sequence[Window],
                 durations_s: Sequence[float]) -> None:  # fmt: skip
        self.clips = clips
        self.packed = packed
        self.rows = clips.rows
        self.windows = list(windows)
        self._packed_index = {}
        for i, w in enumerate(self.windows):
            if len(w.rows) > 1:
                self._packed_index[i] = len(self._packed_index)
        self._durations = [
            WINDOW_S if i in self._packed_index else durations_s[w.rows[0]]
            for i, w in enumerate(self.windows)
        ]

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def n_windows(self) -> int:
        """Items that hold several clips."""
        return len(self._packed_index)

    @property
    def is_window(self) -> list[bool]:
        return [i in self._packed_index for i in range(len(self))]

    @property
    def lengths(self) -> list[float]:
        return list(self._durations)

    def __getitem__(self, i: int) -> dict[str, Any]:
        k = self._packed_index.get(i)
        item = dict(self.clips[self.windows[i].rows[0]] if k is None else self.packed[k])
        item.pop("clip_frames", None)
        item["frames"] = math.ceil(self._durations[i] * FRAMES_PER_S)
        return item


class KindBatches(Sampler[list[int]]):
    """The training batches of a `ClipsAndWindows`: the windows of several clips together
    (the last of their batches topped up with single clips), then the single clips, the
    batches in random order. As many batches as the items batched at random.

    The windows' batches run at 30 s (a window fills it); they stand for as many of the
    `--full_window_share` batches (`single_full_share`), so the windows cost about what
    their clips would alone.

    Epoch e draws from a generator seeded with `seed + e` (Trainer calls `set_epoch`), as
    accelerate's seedable sampler does: a resumed run draws the epoch it stopped in again
    and skips what it trained, and every process, seeded alike, draws the same order for
    accelerate to deal out in turn. With `lengths` (seconds; `--group_by_duration`), single
    clips are put in transformers' length-grouped order first, in groups of `group` items
    (an optimizer step of the whole run), so a batch holds clips of similar duration.
    """

    def __init__(self, is_window: Sequence[bool], batch: int, *, seed: int = 0,
                 lengths: Sequence[float] | None = None, group: int = 1) -> None:  # fmt: skip
        self.is_window = list(is_window)
        self.batch = batch
        self.seed = seed
        self.epoch = 0
        self.lengths = None if lengths is None else list(lengths)
        self.group = max(group, batch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-len(self.is_window) // self.batch)

    def __iter__(self):
        rng = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.is_window), generator=rng).tolist()
        windows = [i for i in order if self.is_window[i]]
        singles = [i for i in order if not self.is_window[i]]
        if self.lengths is not None and singles:
            from transformers.trainer_pt_utils import get_length_grouped_indices

            frames = [round(self.lengths[i] * FRAMES_PER_S) for i in singles]
            grouped = get_length_grouped_indices(frames, self.group, generator=rng)
            singles = [singles[j] for j in grouped]
        b = self.batch
        # Windows first, then single clips, cut in batches: only the windows' last batch
        # holds both kinds.
        items = windows + singles
        batches = [items[k : k + b] for k in range(0, len(items), b)]
        for k in torch.randperm(len(batches), generator=rng).tolist():
            yield batches[k]


def single_full_share(full_share: float, n_windows: int, n_singles: int, batch: int) -> float:
    """The share of single-clip batches to keep at 30 s so that, with the windows' batches
    (all at 30 s), about `full_share` of an epoch's batches are."""
    window_batches = -(-n_windows // batch)
    single_batches = -(-(n_windows + n_singles) // batch) - window_batches
    if single_batches <= 0:
        return 0.0
    total = window_batches + single_batches
    return max(0.0, (full_share * total - window_batches) / single_batches)


def with_windows(clips, durations_s: Sequence[float], cfg, *, language: str | None):
    """`clips` (a SpeechDataset) with `cfg.packed_window_share` of its items made windows of
    several clips, or None when there is nothing to pack (share 0, fewer windows than one in
    1/share, or a tokenizer without timestamp tokens)."""
    share = cfg.packed_window_share
    if share <= 0:
        return None
    tokenizer = clips.processor.tokenizer
    if not has_timestamp_tokens(tokenizer):
        log.warning(
            "--packed_window_share: this tokenizer has no timestamp tokens (<|0.00|> ...), "
            "so every item stays a single clip"
        )
        return None
    windows = windows_for(clips.rows, durations_s, tokenizer, cfg, language=language,
                          several_share=share)  # fmt: skip
    several = [w for w in windows if len(w.rows) > 1]
    if not several:
        return None
    packed = PackedDataset(clips.rows, several, clips.processor, language=language,
                           task=clips.task, timestamp_fraction=1.0)  # fmt: skip
    return ClipsAndWindows(clips, packed, windows, durations_s)


def describe(ds: ClipsAndWindows) -> str:
    """One log line: how many clips went into windows of several clips."""
    in_windows = sum(len(w.rows) for w in ds.windows if len(w.rows) > 1)
    return (
        f"{in_windows} of the {len(ds.rows)} clips train in {ds.n_windows} window(s) of "
        f"several clips joined to up to 30 s and labelled with timestamps (the long-form "
        f"situation), the others one by one; --packed_window_share 0 trains every clip alone"
    )
