"""bench/long_form_check.py: where the silence and the noise lie in its long file, and what
it counts as text in them."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from fitwhisper.evaluate import make_scorer
from fitwhisper.transcribe.formats import Segment
from fitwhisper.whisper_facts import SAMPLE_RATE

_PATH = Path(__file__).resolve().parents[2] / "bench" / "long_form_check.py"
_spec = importlib.util.spec_from_file_location("long_form_check", _PATH)
lfc = importlib.util.module_from_spec(_spec)
sys.modules["long_form_check"] = lfc  # dataclasses look their module up
_spec.loader.exec_module(lfc)


def _clips(n, seconds=2.0):
    return [np.full(int(seconds * SAMPLE_RATE), 0.1, dtype=np.float32) for _ in range(n)]


def test_long_file_places_silence_and_noise_between_clips():
    long = lfc.build_long_file(_clips(6), [f"t{i}" for i in range(6)])
    (k1, s1, e1), (k2, s2, e2) = long.quiet
    assert (k1, k2) == ("silence", "noise")
    # clips 0-1 (2 s + 1 s gap each) come first: silence from 6 s for QUIET_S
    assert s1 == pytest.approx(6.0) and e1 == pytest.approx(6.0 + lfc.QUIET_S)
    a = long.audio
    assert not a[int(s1 * SAMPLE_RATE) : int(e1 * SAMPLE_RATE)].any()
    noise = a[int(s2 * SAMPLE_RATE) : int(e2 * SAMPLE_RATE)]
    assert np.sqrt(np.mean(noise**2)) == pytest.approx(lfc.NOISE_RMS, rel=0.05)
    assert len(a) / SAMPLE_RATE == pytest.approx(6 * 3.0 + 2 * (lfc.QUIET_S + 1.0))
    assert long.reference == "t0 t1 t2 t3 t4 t5"


def test_judge_counts_text_in_quiet_and_repeats():
    long = lfc.build_long_file(_clips(6), ["one", "two", "three", "four", "five", "six"])
    metric, norm = make_scorer("en", normalizer="whisper_basic")
    (_, s1, e1), (_, _, e2) = long.quiet
    segs = [
        Segment(0, 0.0, 5.0, "one two"),
        Segment(1, s1 + 1.0, s1 + 3.0, "Thank you."),  # inside the silence
        Segment(2, s1 + 3.0, s1 + 5.0, "..."),  # no letters: not text
        Segment(3, e1 + 0.5, e1 + 3.0, "three four"),
        Segment(4, e1 + 3.0, e1 + 5.5, "three four"),  # repeats the one before
        Segment(5, e2 + 0.5, e2 + 5.0, "five six"),
    ]
    r = lfc.judge(long, segs, metric, norm)
    assert r["in_quiet"] == {"silence": ["Thank you."], "noise": []}
    assert r["repeats"] == 1 and r["in_order"]
    assert r["error"] > 0  # "thank you" and the repeated words are insertions
    assert r["clips_lost"] == 0
    # Without the last segment, the two clips after the noise have no text over them.
    assert lfc.judge(long, segs[:-1], metric, norm)["clips_lost"] == 2
    assert long.spans[4] == pytest.approx((e2 + 1.0, e2 + 3.0))
