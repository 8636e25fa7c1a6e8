"""The hallucination-loop guard: a pure function over segments, and its log line."""

from __future__ import annotations

import logging

import pytest

from fitwhisper.transcribe.formats import Segment, Transcript
from fitwhisper.transcribe.repeats import MAX_REPEATS, drop_repeats, normalise


def _segments(*texts: str) -> list[Segment]:
    return [Segment(i, float(i), i + 1.0, t) for i, t in enumerate(texts)]


def test_normalise_ignores_case_punctuation_and_spaces() -> None:
    assert normalise(" Thank you.") == normalise("thank you!") == "thankyou"
    assert normalise("我们，发现。") == "我们发现"
    assert normalise(".") == normalise("...") == normalise(" ") == ""
    assert normalise("ＡＢＣ１") == "abc1"  # NFKC: full-width letters and digits


def test_a_run_beyond_max_repeats_is_dropped_and_counted() -> None:
    assert MAX_REPEATS == 2
    kept, dropped = drop_repeats(_segments("hello", " you", "You.", "you", "you", "bye"))
    assert [s.text for s in kept] == ["hello", " you", "You.", "bye"]
    assert dropped == 2
    assert [s.id for s in kept] == [0, 1, 2, 3]  # renumbered
    assert [s.start for s in kept] == [0.0, 1.0, 2.0, 5.0]  # times kept


def test_punctuation_only_segments_are_one_text() -> None:
    kept, dropped = drop_repeats(_segments(".", "...", ".", ".", "ok"))
    assert [s.text for s in kept] == [".", "...", "ok"] and dropped == 2


def test_repeats_that_are_not_consecutive_are_kept() -> None:
    texts = ("yes", "no", "yes", "no", "yes", "no", "yes", "yes")
    kept, dropped = drop_repeats(_segments(*texts))
    assert [s.text for s in kept] == list(texts) and dropped == 0


@pytest.mark.parametrize("limit", [1, 3])
def test_the_limit_is_a_parameter(limit: int) -> None:
    kept, dropped = drop_repeats(_segments(*["again"] * 5), max_repeats=limit)
    assert len(kept) == limit and dropped == 5 - limit


def test_no_segments() -> None:
    assert drop_repeats([]) == ((), 0)


def test_transcripts_lose_the_loop_with_a_log_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fitwhisper.transcribe.run import without_loops

    # `fitwhisper.cli.main`, run by earlier tests, stops propagation to caplog's handler.
    monkeypatch.setattr(logging.getLogger("fitwhisper"), "propagate", True)
    t = Transcript("talk.wav", tuple(_segments("hi", *["you"] * 40)), "en", 41.0)
    with caplog.at_level(logging.WARNING, logger="fitwhisper"):
        out = without_loops(t)
    assert out.text == "hi you you" and out.extra["repeats_dropped"] == 38
    assert "talk.wav: dropped 38 segments repeating the text before them" in caplog.text
    clean = Transcript("a.wav", tuple(_segments("a", "b")), "en", 2.0)
    assert without_loops(clean) is clean
