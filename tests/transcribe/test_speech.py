"""Finding speech (Silero VAD, the energy gate) and mapping times back onto the file; no
Whisper weights needed."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from fitwhisper.transcribe import speech
from fitwhisper.transcribe.speech import Speech, energy_regions, find_speech

SR = 16_000


def _noise(seconds: float, amplitude: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (amplitude * rng.standard_normal(int(seconds * SR))).astype(np.float32)


def test_energy_gate_drops_digital_silence_and_pads_what_is_loud() -> None:
    assert energy_regions(np.zeros(10 * SR, np.float32)) == ()
    assert energy_regions(np.zeros(0, np.float32)) == ()
    audio = np.zeros(20 * SR, np.float32)
    audio[5 * SR : 6 * SR] = _noise(1.0, 0.1)
    audio[7 * SR : 8 * SR] = _noise(1.0, 0.1, 1)  # 1 s pause: the same region
    audio[15 * SR : 16 * SR] = _noise(1.0, 0.1, 2)  # 7 s pause: a new one
    regions = energy_regions(audio)
    pad = int(speech.SPEECH_PAD_S * SR)
    assert len(regions) == 2
    (s1, e1), (s2, e2) = regions
    assert abs(s1 - (5 * SR - pad)) <= speech.FRAME and abs(e1 - (8 * SR + pad)) <= speech.FRAME
    assert abs(s2 - (15 * SR - pad)) <= speech.FRAME and abs(e2 - (16 * SR + pad)) <= speech.FRAME
    # -70 dBFS hiss counts as silence; noise does not (the gate is not a VAD).
    assert energy_regions(_noise(5.0, 10 ** (-70 / 20))) == ()
    assert energy_regions(_noise(5.0, 0.05)) == ((0, 5 * SR),)


def test_speech_audio_lays_the_regions_end_to_end() -> None:
    audio = np.arange(100, dtype=np.float32)
    sp = Speech(((10, 20), (50, 55)), "energy")
    assert sp.samples == 15
    assert sp.audio(audio).tolist() == list(range(10, 20)) + list(range(50, 55))
    assert Speech((), "energy").audio(audio).size == 0


def test_times_map_back_onto_the_file() -> None:
    # Speech at 1-3 s and 10-12 s: the decoded audio is 4 s long, its 2 s mark is the joint.
    sp = Speech(((1 * SR, 3 * SR), (10 * SR, 12 * SR)), "silero")
    assert sp.original_time(0.0) == 1.0
    assert sp.original_time(1.5) == 2.5
    assert sp.original_time(2.0) == 10.0  # a start on the joint: after the pause
    assert sp.original_time(2.0, is_end=True) == 3.0  # an end on it: before the pause
    assert sp.original_time(3.25) == pytest.approx(11.25)
    assert sp.original_time(9.0) == 17.0  # past the end: 8 s cut before the last region
    assert Speech((), "energy").original_time(4.2) == 4.2


def test_a_segment_across_a_joint_stays_on_the_region_holding_most_of_it() -> None:
    # Speech at 1-3 s and 10-12 s (the joint at 2 s of the decoded audio).
    sp = Speech(((1 * SR, 3 * SR), (10 * SR, 12 * SR)), "silero")
    assert sp.span(0.5, 1.5) == (1.5, 2.5)  # inside one region: shifted only
    assert sp.span(2.0, 3.5) == (10.0, 11.5)
    # Started 0.3 s before the joint, mostly after it: on the second region, not 2.7-11.5
    # across the 7 s pause.
    assert sp.span(1.7, 3.5) == (10.0, 11.5)
    assert sp.span(0.2, 2.4) == (1.2, 3.0)  # mostly before: ends where the first region does
    assert sp.span(2.0, 2.0) == (3.0, 3.0)  # empty, on the joint: the earlier region's end
    three = Speech(((0, 1 * SR), (5 * SR, 6 * SR), (9 * SR, 12 * SR)), "silero")
    assert three.span(0.9, 4.0) == (9.0, 11.0)  # over two joints: the region with most of it
    assert Speech((), "energy").span(1.0, 2.0) == (1.0, 2.0)


def test_the_map_agrees_with_faster_whispers() -> None:
    pytest.importorskip("faster_whisper")
    from faster_whisper.vad import SpeechTimestampsMap

    rng = np.random.default_rng(3)
    bounds = np.sort(rng.choice(60 * SR, size=12, replace=False))
    regions = tuple(zip(bounds[::2].tolist(), bounds[1::2].tolist(), strict=True))
    ours = Speech(regions, "silero")
    chunks = [{"start": s, "end": e} for s, e in regions]
    theirs = SpeechTimestampsMap(chunks, SR, time_precision=3)
    for t in np.linspace(0.0, ours.samples / SR, 97):
        t = round(float(t), 3)
        for is_end in (False, True):
            assert ours.original_time(t, is_end=is_end) == pytest.approx(
                theirs.get_original_time(t, is_end=is_end), abs=1e-3
            ), (t, is_end)


def test_silero_finds_no_speech_in_silence_or_noise() -> None:
    pytest.importorskip("faster_whisper")
    assert speech.speech_method() == "silero"
    for audio in (np.zeros(60 * SR, np.float32), _noise(60.0, 0.05), _noise(5.0, 0.1)):
        assert find_speech(audio) == Speech((), "silero")


def test_silero_finds_real_speech_inside_silence(shared_data: Path) -> None:
    pytest.importorskip("faster_whisper")
    from fitwhisper.data.audio import load_audio

    clip = load_audio(shared_data / "aishell-s0150" / "BAC009S0150W0101.flac")
    audio = np.concatenate([np.zeros(20 * SR, np.float32), clip, np.zeros(20 * SR, np.float32)])
    found = find_speech(audio)
    assert len(found.regions) == 1
    start, end = found.regions[0]
    assert 19.0 * SR <= start <= 20.5 * SR
    assert (20 * SR + len(clip)) - 0.5 * SR <= end <= 20 * SR + len(clip) + 0.5 * SR


def test_without_faster_whisper_the_gate_is_energy_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("faster_whisper", "faster_whisper.vad"):  # import fails, as when absent
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setattr(speech, "_fallback_logged", False)
    monkeypatch.setattr(logging.getLogger("fitwhisper"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="fitwhisper"):
        assert speech.speech_method() == "energy"
        assert speech.speech_method() == "energy"
    # Once: one record (pytest may hand the same record to two of its handlers).
    said = {id(r) for r in caplog.records if "using an energy gate instead" in r.getMessage()}
    assert len(said) == 1
    assert find_speech(np.zeros(5 * SR, np.float32), "silero") == Speech((), "energy")
