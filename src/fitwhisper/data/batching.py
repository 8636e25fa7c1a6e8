"""How training clips become batches: length-grouped order (`--group_by_duration`) and
batches cut to their longest clip for the opt-in short encoder window (`--short_encoder_input`).

Grouping uses transformers' own length-grouped order (megabatches of 50 batches sorted by
length, in random order), fed with the clip durations the data check measured, so no audio
is decoded to find lengths. Each epoch's order is drawn from the seed and the epoch alone, as
accelerate's `SeedableRandomSampler` draws Trainer's plain random order: evaluating, saving
or anything else that draws from torch's global RNG between epochs (each data loader started
draws once) leaves the training batches as they were, and a resumed run draws the same
epochs. Batches keep a fixed number of clips (per-device batch), so the memory plan and
OOM back-off hold as they are; lhotse's `DynamicBucketingSampler` (batches of a total
duration) was not used: it would bring lhotse's dependencies and a batch size that changes
from step to step, which the memory planner and `BackoffTrainer` do not model.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from fitwhisper.models.short_window import short_frames
from fitwhisper.whisper_facts import FRAMES_PER_SECOND, HOP_LENGTH

ITEMS_KEY = "fitwhisper_items"  # batch entry: the positions of the batch's items (guard, stream)


def sampler_lengths(lengths_s: Sequence[float]) -> list[int]:
    """Durations in 10 ms frames, as LengthGroupedSampler sorts integers (1.09 s: 109)."""
    return [math.ceil(round(s * FRAMES_PER_SECOND, 6)) for s in lengths_s]


class EpochSeededLengthGroupedSampler(Sampler[int]):
    """transformers' length-grouped order (`get_length_grouped_indices`, as its
    `LengthGroupedSampler` draws it) from a generator seeded with `seed + epoch`. Trainer
    calls `set_epoch` before each epoch, the resumed one included."""

    def __init__(self, group_size: int, lengths: Sequence[int], seed: int) -> None:
        self.group_size, self.lengths, self.seed = group_size, list(lengths), seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.lengths)

    def __iter__(self):
        from transformers.trainer_pt_utils import get_length_grouped_indices

        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(get_length_grouped_indices(self.lengths, self.group_size, generator=g))


class LengthGroupedTrainerMixin:
    """Put before a Trainer class: with `group_by_length` set on the mixin, the training
    sampler groups clips of similar duration (`train_dataset.lengths`, seconds)."""

    group_by_length: bool = False

    def _get_train_sampler(self, train_dataset=None):
        ds = train_dataset if train_dataset is not None else self.train_dataset
        lengths = getattr(ds, "lengths", None)
        grouped = self.group_by_length or getattr(ds, "batches_by_kind", False)
        if not grouped or lengths is None:
            return super()._get_train_sampler(train_dataset)
        # Its groups are sized in optimizer steps of the whole run: every rank draws the
        # same order (same seed) and accelerate deals its batches out in turn, so N
        # processes take the clips one process takes with N times the accumulation.
        args = self.args
        step = args.train_batch_size * args.gradient_accumulation_steps * args.world_size
        return EpochSeededLengthGroupedSampler(step, sampler_lengths(lengths), args.seed)


class ItemsOf(Dataset):
    """A dataset that passes on another's items one for one (tagged with their position,
    or replaced when unfit): its length, and the attributes the length-grouped sampler and
    mixed windows read, are the base's."""

    def __init__(self, base: Dataset) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    @property
    def lengths(self):  # the length-grouped sampler's durations, when the base has them
        return getattr(self.base, "lengths", None)

    @property
    def batches_by_kind(self) -> bool:  # data/mixed_windows.py
        return getattr(self.base, "batches_by_kind", False)

    @property
    def n_windows(self) -> int:  # items that hold several clips (data/mixed_windows.py)
        return getattr(self.base, "n_windows", 0)


class WithDurations(Dataset):
    """A dataset's items plus `frames`, the clip's length in log-mel frames, and `lengths`
    (seconds) for the length-grouped sampler."""

    def __init__(self, base: Dataset, durations_s: Sequence[float]) -> None:
        self.base = base
        self.durations_s = list(durations_s)

    def __len__(self) -> int:
        return len(self.base)

    @property
    def lengths(self) -> list[float]:
        return self.durations_s

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = dict(self.base[i])
        # A clip speed perturbation lengthened or shortened (data/augment.py): its own frames.
        frames = item.pop("augmented_frames", None)
        item["frames"] = frames or math.ceil(self.durations_s[i] * FRAMES_PER_SECOND)
        return item


class TrimmedCollator:
    """Wraps a collator: cuts the batch's features to its longest clip (an even number of
    frames, since the encoder's second convolution has stride 2).

    The features were computed on the clip padded with zeros to 30 s; the frames kept are
    exactly those of the clip padded to the batch's longest clip, so this is the log-mel of
    the unpadded waveform, padded only as far as the batch needs.
    """

    def __init__(self, collator, *, multiple: int = 2, full_share: float = 0.0) -> None:
        self.collator = collator
        self.multiple = multiple
        self.full_share = full_share

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if any("frames" not in f for f in features):
            # Evaluation items (Trainer collates them with the training collator) keep 30 s.
            return self.collator([{k: v for k, v in f.items() if k != "frames"} for f in features])
        frames = max(f.pop("frames") for f in features)
        keep_full = stays_full(features, self.full_share)
        batch = self.collator(features)
        if keep_full:
            return batch
        keep = short_frames(frames, self.multiple)
        if "input_audio" in batch:  # --log_mel device: the samples of those frames
            batch["input_audio"] = batch["input_audio"][..., : keep * HOP_LENGTH].contiguous()
        else:
            batch["input_features"] = batch["input_features"][..., :keep].contiguous()
        return batch


def stays_full(features: list[dict[str, Any]], share: float) -> bool:
    """Whether this batch keeps its 30 s window (`--encoder_input mixed`): decided by a
    checksum of its labels, so the same batch decides the same in a resumed run, on every
    rank and in every dataloader worker, and about `share` of the batches stay full."""
    if share <= 0:
        return False
    if share >= 1:
        return True
    labels = [int(t) for f in features for t in f["labels"]]
    digest = zlib.crc32(np.asarray(labels, dtype=np.int64).tobytes())
    return digest % 10_000 < share * 10_000


class DropFrames:
    """A collator that ignores the `frames` entry `WithDurations` adds."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        for f in features:
            f.pop("frames", None)
            f.pop("augmented_frames", None)
        return self.collator(features)
