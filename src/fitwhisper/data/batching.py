"""How training clips become batches: length-grouped order (`--group_by_duration`) and
batches cut to their longest clip for the opt-in short encoder window (`--short_encoder_input`).

Grouping uses transformers' own `LengthGroupedSampler` (megabatches of 50 batches sorted by
length, in random order), fed with the clip durations the data check measured, so no audio
is decoded to find lengths. It draws from torch's global RNG like Trainer's default
`RandomSampler`, which Trainer checkpoints and restores: resuming stays exact. Batches keep
a fixed number of clips (per-device batch), so the memory plan and OOM back-off hold as
they are; lhotse's `DynamicBucketingSampler` (batches of a total duration) was not used:
it would bring lhotse's dependencies and a batch size that changes from step to step,
which the memory planner and `BackoffTrainer` do not model.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from fitwhisper.models.short_window import short_frames

FRAMES_PER_S = 100  # log-mel frames per second (hop 160 at 16 kHz)
DESCRIBED_ROWS = 20_000  # rows whose batching the start-of-run log line replays


def sampler_lengths(lengths_s: Sequence[float]) -> list[int]:
    """Durations in 10 ms frames, as LengthGroupedSampler sorts integers (1.09 s: 109)."""
    return [math.ceil(round(s * FRAMES_PER_S, 6)) for s in lengths_s]


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
        from transformers.trainer_pt_utils import LengthGroupedSampler

        # Its groups are sized in optimizer steps of the whole run: every rank draws the
        # same order (same seed) and accelerate deals its batches out in turn, so N
        # processes take the clips one process takes with N times the accumulation.
        args = self.args
        step = args.train_batch_size * args.gradient_accumulation_steps * args.world_size
        return LengthGroupedSampler(step, lengths=sampler_lengths(lengths))


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
        item["frames"] = frames or math.ceil(self.durations_s[i] * FRAMES_PER_S)
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


def training_data(
    dataset, durations_s: Sequence[float], model, collator, cfg, *, language, precision="fp32"
):
    """The training dataset and collator as the speed options ask (`TrainConfig` fields
    pack_clips, cache_encoder_outputs, group_by_duration, short_encoder_input).

    Args:
        dataset: a `SpeechDataset` of the training rows (one clip per item).
        durations_s: each row's duration, from the data check.
        model: the model to train; patched for short input when asked, its encoder run
            over every item first with --cache_encoder_outputs (data/encoder_cache.py).
        collator: the per-clip `WhisperCollator`.
        precision: the run's precision, as `train` resolved it (the encoder cache is
            computed in it).

    Returns:
        (dataset, collator) for Trainer.
    """
    import logging

    from fitwhisper.data import packing

    log = logging.getLogger(__name__)
    lengths = list(durations_s)
    if cfg.pack_clips:
        windows = packing.windows_for(
            dataset.rows, lengths, dataset.processor.tokenizer, cfg, language=language
        )
        log.info(packing.describe(windows, len(dataset.rows)))
        dataset = packing.PackedDataset(
            dataset.rows,
            windows,
            dataset.processor,
            language=language,
            task=dataset.task,
            timestamp_fraction=cfg.packed_timestamp_fraction,
            augment=getattr(dataset, "augment", None),
        )
        lengths = dataset.lengths
    if cfg.cache_encoder_outputs:
        from fitwhisper.data.encoder_cache import cached_encoder_data

        dataset, collator = cached_encoder_data(dataset, model, collator, cfg, precision)
    if (mode := cfg.encoder_input_mode) != "full":
        from fitwhisper.models.short_window import allow_short_input, record_training_window

        share = cfg.full_window_share if mode == "mixed" else 0.0
        allow_short_input(model)
        items = None
        if mode == "mixed" and not (cfg.pack_clips or cfg.cache_encoder_outputs):
            from fitwhisper.data import mixed_windows

            items = mixed_windows.with_windows(dataset, lengths, cfg, language=language)
            if items is not None:
                log.info(mixed_windows.describe(items))
        if items is None:
            items, packed_share = WithDurations(dataset, lengths), 0.0
        else:
            packed_share = items.n_windows / len(items)
        log.info(describe_trimming(mode, items, cfg, share))
        record_training_window(model, mode, share, packed_share)
        return items, TrimmedCollator(collator, full_share=share)
    if cfg.group_by_duration:
        return WithDurations(dataset, lengths), _DropFrames(collator)
    return dataset, collator


def describe_trimming(mode: str, items, cfg, full_share: float) -> str:
    """One log line: what --encoder_input trimmed/mixed saves on these training items (a
    `WithDurations`, or a `ClipsAndWindows` with windows of several clips), their batching
    replayed as the trainer will batch them (data/frame_share.py). Only the first
    DESCRIBED_ROWS items: the estimate must not cost more on a data set of millions."""
    from fitwhisper.data.frame_share import items_frame_share
    from fitwhisper.data.mixed_windows import ClipsAndWindows

    n = min(len(items), DESCRIBED_ROWS)
    if isinstance(items, ClipsAndWindows):
        windows = items.windows[:n]
        item_s, several = items.item_durations_s[:n], [len(w.rows) > 1 for w in windows]
        clip_s = [items.clip_durations_s[i] for w in windows for i in w.rows]
    else:  # one clip (or one --pack_clips window) per item
        item_s, several, clip_s = items.lengths[:n], [False] * n, items.lengths[:n]
    grouped = cfg.group_by_duration or any(several)
    batch = cfg.per_device_train_batch_size
    processes = int(os.environ.get("WORLD_SIZE", "1") or 1)  # as train/ranks.py reads it
    step = batch * cfg.gradient_accumulation_steps * processes  # the trainer's sampler groups
    share = items_frame_share(item_s, several, len(clip_s), batch, full_share,
                              sort_keys=items.lengths[:n] if grouped else None,
                              group_size=step)  # fmt: skip
    kept = f", {full_share:.0%} of them kept at 30 s" if mode == "mixed" else ""
    if any(several):
        kept += " and those holding a window of several clips"
    return (
        f"--encoder_input {mode}: batches cut to their longest clip{kept}; the encoder "
        f"gets about {share:.0%} of the frames of 30 s windows (clips average "
        f"{np.mean(clip_s):.1f} s), so it does about {1 / share:.1f}x less work; "
        "--encoder_input full pads every clip to 30 s as Whisper was trained"
    )


class _DropFrames:
    """A collator that ignores the `frames` entry `WithDurations` adds."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        for f in features:
            f.pop("frames", None)
            f.pop("augmented_frames", None)
        return self.collator(features)
