"""The encoder frames a mixed-input run feeds, as a share of the standard recipe's.

What `--encoder_input mixed` saves is padding: the recipe pads every clip to 30 s (3000
log-mel frames), a trimmed batch feeds each of its items up to its longest clip. With
`--packed_window_share` some items are 30 s windows of several clips, and a batch holding
one runs at 30 s. This module replays a run's batching on its clips with the pipeline's own
pieces (`packing.pack_windows`, transformers' `LengthGroupedSampler` as the trainer uses
it, random order without windows) and counts frames, so the demo and the benchmarks can say
what a run saved without timing it. A batch without a window counts at its expected size:
`--full_window_share` of 30 s and the rest of its longest clip (the run decides by a checksum
of each batch's labels, at that rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np

from fitwhisper.data.batching import FRAMES_PER_S
from fitwhisper.models.short_window import FULL_FRAMES, short_frames


def frame_share(durations_s: Sequence[float], label_tokens: Sequence[int] | None,
                batch_size: int, full_share: float, window_share: float = 0.0, *,
                epochs: int = 5, seed: int = 0) -> float:  # fmt: skip
    """The share of the recipe's encoder frames (every clip padded to 30 s) that a mixed run
    feeds, averaged over `epochs` epochs: each batch's items times its window.

    Args:
        durations_s: each training clip's duration, in manifest order.
        label_tokens: each clip's transcript length in tokens (windows close at 448); only
            needed with `window_share`.
        batch_size: items per batch (a window of several clips is one item).
        full_share: `--full_window_share`, the share of batches kept at 30 s.
        window_share: `--packed_window_share`, the share of items made windows.
    """
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    from fitwhisper.data.packing import WINDOW_S, pack_windows

    n = len(durations_s)
    if n == 0:
        return 1.0
    frames = [math.ceil(d * FRAMES_PER_S) for d in durations_s]
    several: list[bool] = [False] * n
    if window_share > 0 and label_tokens is not None:
        rows = [SimpleNamespace(language=None) for _ in range(n)]
        windows = pack_windows(rows, durations_s, label_tokens, several_share=window_share)
        several = [len(w.rows) > 1 for w in windows]
        frames = [FULL_FRAMES if len(w.rows) > 1 else frames[w.rows[0]] for w in windows]
    grouped = any(several)
    kinds = [int(WINDOW_S * FRAMES_PER_S) if s else 1 for s in several]
    shares = []
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(seed + epoch)
        if grouped:  # the trainer batches clips and windows by kind (data/mixed_windows.py)
            order = list(LengthGroupedSampler(batch_size, lengths=kinds, generator=g))
        else:
            order = torch.randperm(len(frames), generator=g).tolist()
        fed = 0
        for start in range(0, len(order), batch_size):
            items = order[start : start + batch_size]
            if any(several[i] for i in items):
                window = float(FULL_FRAMES)
            else:
                cut = short_frames(max(frames[i] for i in items))
                window = full_share * FULL_FRAMES + (1 - full_share) * cut
            fed += len(items) * window
        shares.append(fed / (n * FULL_FRAMES))
    return float(np.mean(shares))
