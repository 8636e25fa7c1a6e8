"""Speech the batched pipeline cut into a chunk but never decoded is found and decoded again
(`transcribe/ct2_tails.py`); the real 5-minute file is `test_long_audio.py`'s."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fitwhisper.transcribe import ct2_tails
from fitwhisper.transcribe.ct2_tails import grouped, undecoded_tails, with_tails_decoded

CHUNKS = [[(0.0, 5.0), (6.0, 12.0), (13.0, 20.0)], [(31.0, 40.0), (40.5, 44.0)]]


def test_speech_after_a_chunks_last_segment_is_a_tail_from_that_segments_end() -> None:
    assert undecoded_tails(CHUNKS, [(0.2, 5.0), (6.1, 11.0)]) == [(11.0, 20.0)]


def test_a_chunk_decoded_to_its_end_or_nearly_has_no_tail() -> None:
    assert undecoded_tails(CHUNKS, [(0.2, 12.0), (13.0, 18.5), (31.0, 43.0)]) == []


def test_a_chunk_without_any_segment_is_left_alone() -> None:
    # The second chunk decoded to nothing: the decoder took it for no speech.
    assert undecoded_tails(CHUNKS, [(0.0, 19.9)]) == []


def test_a_segment_starting_a_little_before_its_chunk_still_counts_for_it() -> None:
    assert undecoded_tails(CHUNKS, [(0.0, 20.0), (30.7, 35.0)]) == [(35.0, 44.0)]


def test_a_tail_spanning_more_than_30_s_becomes_clips_of_at_most_30_s() -> None:
    chunks = [[(0.0, 2.0), (3.0, 20.0), (25.0, 40.0), (45.0, 52.0)]]
    clips = undecoded_tails(chunks, [(0.0, 2.0)])
    assert clips == [(3.0, 20.0), (25.0, 52.0)]
    assert all(e - s <= 30.0 for s, e in clips)


def test_chunks_hold_at_most_30_s_of_speech_as_the_pipeline_groups_them() -> None:
    stamps = [(0.0, 10.0), (11.0, 25.0), (26.0, 33.0), (35.0, 40.0)]
    assert grouped(stamps, 30.0) == [[(0.0, 10.0), (11.0, 25.0)], [(26.0, 33.0), (35.0, 40.0)]]


def _seg(start: float, end: float, text: str) -> SimpleNamespace:
    return SimpleNamespace(start=start, end=end, text=text)


def test_tails_are_decoded_merged_in_time_order_and_searched_again(monkeypatch) -> None:
    monkeypatch.setattr(ct2_tails, "speech_chunks", lambda audio: CHUNKS)
    asked: list[list[dict]] = []

    def decode(clips: list[dict]) -> list:
        asked.append(clips)
        if len(asked) == 1:  # the tail's decoding stops early again
            return [_seg(11.0, 14.0, "b")]
        return [_seg(14.0, 20.0, "c")]

    first = [_seg(0.2, 5.0, "a0"), _seg(6.0, 11.0, "a1"), _seg(31.0, 44.0, "d")]
    out = with_tails_decoded(np.zeros(16_000), first, decode)
    assert [s.text for s in out] == ["a0", "a1", "b", "c", "d"]
    assert asked == [[{"start": 11.0, "end": 20.0}], [{"start": 14.0, "end": 20.0}]]


@pytest.mark.parametrize("found", [[], [_seg(11.0, 11.5, "x")]])
def test_repair_stops_when_a_round_finds_nothing_or_the_rounds_run_out(monkeypatch, found) -> None:
    monkeypatch.setattr(ct2_tails, "speech_chunks", lambda audio: CHUNKS)
    calls = []

    def decode(clips):
        calls.append(clips)
        return list(found)

    with_tails_decoded(np.zeros(16_000), [_seg(0.0, 11.0, "a")], decode)
    assert len(calls) == (1 if not found else ct2_tails.ROUNDS)
