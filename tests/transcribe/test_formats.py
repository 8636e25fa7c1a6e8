"""The output formats: what players and openai-whisper/faster-whisper users expect."""

from __future__ import annotations

import json

from fitwhisper.transcribe.formats import Segment, Transcript, Word, render, timestamp


def _transcript() -> Transcript:
    return Transcript(
        audio="meeting.wav",
        segments=(
            Segment(0, 0.0, 2.5, " Hello there.", -0.2, 0.01, 1.1),
            Segment(1, 2.5, 3.0, " ", -1.5, 0.9, 1.0),  # nothing said: no subtitle cue
            Segment(2, 3661.5, 3663.042, " Second\nline.", -0.3, 0.02, 1.2),
        ),
        language="en",
        duration_s=3700.0,
    )


def test_timestamps_use_the_decimal_marker_of_each_format() -> None:
    assert timestamp(3661.5, ",") == "01:01:01,500"
    assert timestamp(0.0004, ".") == "00:00:00.000"
    assert timestamp(59.9996, ",") == "00:01:00,000"


def test_srt_numbers_cues_from_one_and_skips_empty_segments() -> None:
    srt = render(_transcript(), "srt")
    assert srt == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
        "2\n01:01:01,500 --> 01:01:03,042\nSecond line.\n"
    )


def test_vtt_has_its_header_and_dot_milliseconds() -> None:
    vtt = render(_transcript(), "vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n")
    assert "01:01:01.500 --> 01:01:03.042" in vtt


def test_tsv_has_integer_milliseconds_as_openai_whisper_writes() -> None:
    lines = render(_transcript(), "tsv").splitlines()
    assert lines[0] == "start\tend\ttext"
    assert lines[1] == "0\t2500\tHello there."
    assert lines[2] == "3661500\t3663042\tSecond line."  # the empty segment is dropped


def test_json_carries_segments_in_the_faster_whisper_shape() -> None:
    data = json.loads(render(_transcript(), "json"))
    assert data["text"] == "Hello there. Second\nline."
    assert data["language"] == "en" and data["duration"] == 3700.0
    seg = data["segments"][0]
    assert set(seg) == {
        "id", "start", "end", "text", "avg_logprob", "no_speech_prob", "compression_ratio"
    }  # fmt: skip
    assert (seg["start"], seg["end"], seg["avg_logprob"]) == (0.0, 2.5, -0.2)


def test_json_has_words_only_when_word_timestamps_were_asked_for() -> None:
    t = Transcript(
        "a.wav",
        (Segment(0, 0.0, 1.0, " Hi", words=(Word(0.1, 0.4, " Hi", 0.9),)),),
        "en",
        1.0,
    )
    words = json.loads(render(t, "json"))["segments"][0]["words"]
    assert words == [{"start": 0.1, "end": 0.4, "word": " Hi", "probability": 0.9}]


def test_txt_is_the_joined_text() -> None:
    assert render(_transcript(), "txt") == "Hello there. Second\nline.\n"


def test_segments_without_whisper_s_leading_space_do_not_glue() -> None:
    # A fine-tune's segments ("therePop" was two errors a join in long-form scoring).
    t = Transcript(
        "a.wav",
        (Segment(0, 0.0, 2.0, "Get there"), Segment(1, 2.5, 4.0, "Pop it"),
         Segment(2, 4.5, 5.0, " now"), Segment(3, 5.0, 6.0, "你好"), Segment(4, 6.0, 7.0, "世界")),
        "en",
        7.0,
    )  # fmt: skip
    assert t.text == "Get there Pop it now你好世界"
    assert render(t, "txt") == "Get there Pop it now你好世界\n"


def test_segments_are_kept_in_time_order_without_losing_text() -> None:
    # As a 30 s window boundary left them: the next window's first cue starting before the
    # last one of the window before ends, one cue inside another, an empty one.
    words = (Word(31.7, 31.9, " B", 0.9), Word(31.9, 33.0, " b", 0.8))
    t = Transcript(
        "long.wav",
        (
            Segment(0, 28.0, 32.08, " A", -0.2),
            Segment(1, 31.65, 33.5, " B b", -0.3, words=words),
            Segment(2, 33.0, 33.4, " c"),  # ends before the one before: merged into it
            Segment(3, 33.5, 33.5, " "),  # empty: dropped
            Segment(4, 33.6, 35.0, " D"),
        ),
        "en",
        40.0,
    )
    assert [(s.id, s.start, s.end, s.text) for s in t.segments] == [
        (0, 28.0, 32.08, " A"),
        (1, 32.08, 33.5, " B b c"),
        (2, 33.6, 35.0, " D"),
    ]
    assert [(w.start, w.end) for w in t.segments[1].words] == [(32.08, 32.08), (32.08, 33.0)]
    assert t.text == "A B b c D"
    assert "00:00:32,080 --> 00:00:33,500\nB b c" in render(t, "srt")
