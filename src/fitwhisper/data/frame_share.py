"""The encoder frames a mixed-input run feeds, as a share of the standard recipe's.

What `--encoder_input mixed` saves is padding: the recipe pads every clip to 30 s (3000
log-mel frames), a trimmed batch feeds each of its items up to its longest clip. With
`--packed_window_share` some items are 30 s windows of several clips, and a batch holding
one runs at 30 s. This module replays a run's batching with the pipeline's own pieces
(`packing.pack_windows`, the trainer's own length-grouped sampler, seeded random order when
the trainer does not group) and counts frames, so the start-of-run log line, the
demo and the benchmarks can say what a run saved without timing it: `frame_share` from the
clips, `items_frame_share` from the training items a run has made. A batch without a
window counts at its expected size: `--full_window_share` of 30 s and the rest of its
longest clip (the run decides by a checksum of each batch's labels, at that rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from fitwhisper.data.batching import EpochSeededLengthGroupedSampler, sampler_lengths
from fitwhisper.models.short_window import short_frames
from fitwhisper.whisper_facts import FRAMES_PER_SECOND, WINDOW_FRAMES, WINDOW_SECONDS


def frame_share(
    durations_s: Sequence[float],
    label_tokens: Sequence[int] | None,
    batch_size: int,
    full_share: float,
    window_share: float = 0.0,
    *,
    epochs: int = 5,
    seed: int = 0,
) -> float:
    """The share of the recipe's encoder frames (every clip padded to 30 s) that a mixed run
    on these clips feeds, averaged over `epochs` epochs: its windows packed as the run packs
    them, then `items_frame_share`.

    Args:
        durations_s: each training clip's duration, in manifest order.
        label_tokens: each clip's transcript length in tokens (windows close at 448); only
            needed with `window_share`.
        batch_size: items per batch (a window of several clips is one item).
        full_share: `--full_window_share`, the share of batches kept at 30 s.
        window_share: `--packed_window_share`, the share of items made windows.
    """
    from fitwhisper.data.packing import pack_windows

    n = len(durations_s)
    if n == 0:
        return 1.0
    several, item_s = [False] * n, list(durations_s)
    if window_share > 0 and label_tokens is not None:
        rows = [SimpleNamespace(language=None) for _ in range(n)]
        windows = pack_windows(rows, durations_s, label_tokens, several_share=window_share)
        several = [len(w.rows) > 1 for w in windows]
        item_s = [WINDOW_SECONDS if len(w.rows) > 1 else durations_s[w.rows[0]] for w in windows]
    # The trainer batches clips and windows by kind (data/mixed_windows.py).
    kinds = [WINDOW_SECONDS if s else 1.0 for s in several] if any(several) else None
    return items_frame_share(
        item_s, several, n, batch_size, full_share, sort_keys=kinds, epochs=epochs, seed=seed
    )


def items_frame_share(
    item_durations_s: Sequence[float],
    several: Sequence[bool],
    n_clips: int,
    batch_size: int,
    full_share: float,
    *,
    sort_keys: Sequence[float] | None = None,
    group_size: int | None = None,
    epochs: int = 5,
    seed: int = 0,
) -> float:
    """The same share for training items already made (a run's own dataset).

    Args:
        item_durations_s: each item's duration (a window of several clips: 30 s).
        several: whether each item is a window of several clips (its batch runs at 30 s).
        n_clips: the clips behind these items (the recipe pads each to 30 s).
        sort_keys: the lengths (s) the trainer's `LengthGroupedSampler` sorts the items on,
            in groups of `group_size` items (default `batch_size`; the trainer's is an
            optimizer step: batch x accumulation x processes); None: random order.
    """
    import torch

    if not item_durations_s:
        return 1.0
    frames = [
        WINDOW_FRAMES if s else math.ceil(d * FRAMES_PER_SECOND)
        for d, s in zip(item_durations_s, several, strict=True)
    ]
    keys = None if sort_keys is None else sampler_lengths(sort_keys)
    shares = []
    for epoch in range(epochs):
        if keys is not None:
            sampler = EpochSeededLengthGroupedSampler(group_size or batch_size, keys, seed)
            sampler.set_epoch(epoch)
            order = list(sampler)
        else:  # accelerate's SeedableRandomSampler, as Trainer draws plain random order
            g = torch.Generator().manual_seed(seed + epoch)
            order = torch.randperm(len(frames), generator=g).tolist()
        fed = 0
        for start in range(0, len(order), batch_size):
            items = order[start : start + batch_size]
            if any(several[i] for i in items):
                window = float(WINDOW_FRAMES)
            else:
                cut = short_frames(max(frames[i] for i in items))
                window = full_share * WINDOW_FRAMES + (1 - full_share) * cut
            fed += len(items) * window
        shares.append(fed / (n_clips * WINDOW_FRAMES))
    return float(np.mean(shares))
