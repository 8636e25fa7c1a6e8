"""The encoder frames a mixed run feeds, its batching replayed (data/frame_share.py)."""

from __future__ import annotations

import pytest

from fitwhisper.data.frame_share import frame_share


def test_single_clips_feed_their_batch_longest_clip_or_30_s_at_the_full_share() -> None:
    tokens = [5] * 40
    assert frame_share([3.0] * 40, tokens, 8, 0.0) == pytest.approx(0.1)  # 300 of 3000
    assert frame_share([3.0] * 40, tokens, 8, 1.0) == pytest.approx(1.0)
    # One clip of 9 s among 3 s ones: only its batch runs at 9 s.
    durations = [3.0] * 39 + [9.0]
    assert frame_share(durations, tokens, 8, 0.0) == pytest.approx((32 * 300 + 8 * 900) / 120_000)
    # A share of the batches at 30 s, at its expected cost.
    assert frame_share([3.0] * 40, tokens, 8, 0.05) == pytest.approx(0.05 + 0.95 * 0.1)
    # Long clips among short ones: the batches that draw them pay for them, so the share
    # lies between the short clips' and the long ones', and grows with the batch.
    mixed = [2.0] * 30 + [20.0] * 2
    small, big = frame_share(mixed, None, 2, 0.0), frame_share(mixed, None, 16, 0.0)
    assert 2 / 30 < small < big < 20 / 30


def test_a_batch_holding_a_window_runs_at_30_s_and_the_window_is_one_item() -> None:
    # 40 clips of 2.5 s, 3% windows: clips 0-32 alone, clips 33-39 one window: 34 items,
    # one batch of 64 holds them all, and the window keeps it at 30 s.
    tokens = [5] * 40
    assert frame_share([2.5] * 40, tokens, 64, 0.0, 0.03) == pytest.approx(34 / 40)
    assert frame_share([2.5] * 40, tokens, 64, 0.0) == pytest.approx(250 / 3000)
    # Too few clips for a window: as without.
    assert frame_share([2.5] * 20, tokens[:20], 8, 0.0, 0.03) == pytest.approx(250 / 3000)
