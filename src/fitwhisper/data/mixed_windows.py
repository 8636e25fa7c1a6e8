"""30 s windows of several clips among the single clips of `--encoder_input mixed`
(`--packed_window_share`, 0.03 by default).

Trained on trimmed batches, a model meets one clip at a time, each cut to its own length;
long audio reaches it as 30 s windows that hold several utterances and pauses, decoded with
timestamps. With single clips alone (5% of batches padded to 30 s), tiny.en fine-tuned on
48 digit strings (24 steps, seeds 0-2) lost 29-53% of a 76 s file's words, dropping whole
strings after a pause, where the model trained on 30 s windows lost 3% (seed 0). With 3% of
the items made windows of several consecutive clips, joined to up to 30 s and labelled in
Whisper's timestamp format (`data/packing.py`), the same runs lost 0.0%, 0.0%, 1.6%;
on 400 strings the long file went from 9.21% to 1.32% WER (bench/RESULTS-train-speed.md).

What they cost depends on the data set's size: where the two kinds meet (once per
megabatch of transformers' `LengthGroupedSampler`) the batch runs at 30 s. With a few
windows those batches are most of the cost: `offline/base` on 80 Mandarin sentences trained
at 0.55x the speed of single clips alone (1.38x the encoder frames, and the single clips'
labels padded to the window's). On 400 English strings: 0.88x.
With thousands of clips a window's 30 s hold several clips with little padding, and the
run feeds the encoder about as many frames as without windows
(bench/window_frames_by_size.py: 0.97x at 2,000 and 10,000 AISHELL sentences, 1.06x at
400, batches of 8).

Windows of several clips stay at 30 s (the collator keeps a batch at the window of its
longest item). The sampler is handed each item's kind as its length, and its stable sort
keeps random order within a kind; with `--group_by_duration` it gets the real durations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from torch.utils.data import Dataset

from fitwhisper.data.packing import (
    PackedDataset,
    Window,
    has_timestamp_tokens,
    windows_for,
)
from fitwhisper.whisper_facts import FRAMES_PER_SECOND, WINDOW_SECONDS

log = logging.getLogger(__name__)


class ClipsAndWindows(Dataset):
    """Training items in manifest order: a clip alone (an item of `clips`, the run's own
    `SpeechDataset`), or a window of several consecutive clips (an item of a
    `PackedDataset`, timestamped).

    `rows` and `windows` (one per item, a lone clip's being its row) name the clips behind
    an item (train/guard.py); `frames` is what the trimming collator keeps (a window of
    several clips: all 30 s), `item_durations_s` the same in seconds; `lengths` is what
    the length-grouped sampler sorts on.
    """

    batches_by_kind = True  # the trainer then batches with LengthGroupedSampler

    def __init__(
        self,
        clips,
        packed: PackedDataset,
        windows: Sequence[Window],
        durations_s: Sequence[float],
        *,
        by_duration: bool,
    ) -> None:
        self.clips = clips
        self.packed = packed
        self.rows = clips.rows
        self.windows = list(windows)
        self._packed_index = {}
        for i, w in enumerate(self.windows):
            if len(w.rows) > 1:
                self._packed_index[i] = len(self._packed_index)
        self.clip_durations_s = list(durations_s)  # per row, as `rows`
        self.item_durations_s = [
            WINDOW_SECONDS if i in self._packed_index else durations_s[w.rows[0]]
            for i, w in enumerate(self.windows)
        ]
        self.by_duration = by_duration

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def n_windows(self) -> int:
        """Items that hold several clips."""
        return len(self._packed_index)

    @property
    def lengths(self) -> list[float]:
        if self.by_duration:
            return list(self.item_durations_s)
        # The kind alone: windows of several clips sort before single clips, and the
        # sampler's stable sort leaves each kind in its random order.
        return [WINDOW_SECONDS if i in self._packed_index else 1.0 for i in range(len(self))]

    def __getitem__(self, i: int) -> dict[str, Any]:
        k = self._packed_index.get(i)
        item = dict(self.clips[self.windows[i].rows[0]] if k is None else self.packed[k])
        item.pop("clip_frames", None)
        item["frames"] = math.ceil(self.item_durations_s[i] * FRAMES_PER_SECOND)
        # A lone clip speed perturbation lengthened or shortened: its own frames (a window
        # of several stays at 30 s).
        frames = item.pop("augmented_frames", None)
        if frames and k is None:
            item["frames"] = frames
        return item


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
    windows = windows_for(
        clips.rows, durations_s, tokenizer, cfg, language=language, several_share=share
    )
    several = [w for w in windows if len(w.rows) > 1]
    if not several:
        return None
    packed = PackedDataset(
        clips.rows,
        several,
        clips.processor,
        language=language,
        task=clips.task,
        timestamp_fraction=1.0,
        augment=getattr(clips, "augment", None),
        log_mel=getattr(clips, "log_mel", "cpu"),
    )
    return ClipsAndWindows(clips, packed, windows, durations_s, by_duration=cfg.group_by_duration)


def describe(ds: ClipsAndWindows) -> str:
    """One log line: how many clips went into windows of several clips."""
    in_windows = sum(len(w.rows) for w in ds.windows if len(w.rows) > 1)
    return (
        f"{in_windows} of the {len(ds.rows)} clips train in {ds.n_windows} window(s) of "
        f"several clips joined to up to 30 s and labelled with timestamps (the long-form "
        f"situation), the others one by one; --packed_window_share 0 trains every clip alone"
    )
