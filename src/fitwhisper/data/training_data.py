"""The training dataset and collator as `train`'s speed options ask: clips packed into
windows (`--pack_clips`), a frozen encoder's outputs cached (`--cache_encoder_outputs`),
batches cut to their longest clip (`--encoder_input trimmed|mixed`, with a few windows of
several clips among them), length-grouped order (`--group_by_duration`). The pieces live in
`batching`, `packing`, `mixed_windows` and `encoder_cache`; this puts them together and
logs what the cut saves (`frame_share`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from fitwhisper.data.batching import DropFrames, TrimmedCollator, WithDurations

DESCRIBED_ROWS = 20_000  # rows whose batching the start-of-run log line replays


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
            log_mel=getattr(dataset, "log_mel", "cpu"),
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
        return WithDurations(dataset, lengths), DropFrames(collator)
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
    share = items_frame_share(
        item_s,
        several,
        len(clip_s),
        batch,
        full_share,
        sort_keys=items.lengths[:n] if grouped else None,
        group_size=step,
    )
    kept = f", {full_share:.0%} of them kept at 30 s" if mode == "mixed" else ""
    if any(several):
        kept += " and those holding a window of several clips"
    return (
        f"--encoder_input {mode}: batches cut to their longest clip{kept}; the encoder "
        f"gets about {share:.0%} of the frames of 30 s windows (clips average "
        f"{np.mean(clip_s):.1f} s), so it does about {1 / share:.1f}x less work; "
        "--encoder_input full pads every clip to 30 s as Whisper was trained"
    )
