"""Long recordings as training data: SRT/VTT files, offsets and segments in a manifest, the
straddling rule of the cut into 30 s windows, every bad-segment case of the data check, and
the labels of a window trained with its previous text."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from fitwhisper.config import DataConfig
from fitwhisper.data.audio import load_audio, load_row_audio
from fitwhisper.data.check import check_manifest
from fitwhisper.data.features import SpeechDataset, WhisperCollator
from fitwhisper.data.manifest import Row, load_manifest
from fitwhisper.data.recordings import cut_recordings, window_labels
from fitwhisper.data.segments import Segment
from fitwhisper.data.subtitles import SubtitleError, read_subtitles
from fitwhisper.data.usable import usable_rows

SRT = """1
00:00:00,500 --> 00:00:02,000
<i>Hello</i> there,

2
00:00:02,500 --> 00:00:04,250
general &amp; Kenobi
{\\an8}second line
"""

VTT = """WEBVTT
Kind: captions

NOTE a comment block
with two lines

00:01.000 --> 00:03.500 align:start position:0%
<v Speaker>first cue</v>

intro
01:00:05.000 --> 01:00:06.000
<00:00:05.500><c>timed</c> words
"""


def test_srt_and_vtt_become_segments(tmp_path: Path) -> None:
    srt = tmp_path / "a.srt"
    srt.write_text(SRT, encoding="utf-8")
    assert read_subtitles(srt) == (
        Segment(0.5, 2.0, "Hello there,"),
        Segment(2.5, 4.25, "general & Kenobi second line"),
    )
    vtt = tmp_path / "b.vtt"
    vtt.write_text(VTT.replace("\n", "\r\n"), encoding="utf-8")
    assert read_subtitles(vtt) == (
        Segment(1.0, 3.5, "first cue"),
        Segment(3605.0, 3606.0, "timed words"),
    )


def test_an_unreadable_subtitle_time_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.srt"
    bad.write_text("1\n00:00:01,000 --> 00:00:0x,000\nhi\n", encoding="utf-8")
    with pytest.raises(SubtitleError, match=r"bad\.srt:2: cannot read the time '00:00:0x,000'"):
        read_subtitles(bad)


class _Chars:
    """A stand-in tokenizer: one token per character."""

    def __call__(self, text, add_special_tokens=False):
        return type("Enc", (), {"input_ids": list(range(len(text)))})()


def _recording(segments, **kw) -> Row:
    return Row(0, 1, Path("/x/talk.wav"), "whole", id="talk", segments=tuple(segments), **kw)


def test_a_straddling_segment_moves_to_the_next_window() -> None:
    segs = [
        Segment(1.03, 10.0, "one"),
        Segment(12.0, 25.0, "two"),
        Segment(26.0, 33.0, "three"),  # would end 31.97 s after the window's start (1.02)
        Segment(34.0, 40.0, "four"),
    ]
    rows, durations, report = cut_recordings(
        [_recording(segs, offset_s=100.0)], [60.0], _Chars(), max_label_tokens=448
    )
    first, second = rows
    # The window starts at its first segment (on the 20 ms step) and ends at its last
    # whole segment; the straddling one starts the next window.
    assert first.offset_s == pytest.approx(101.02)
    assert first.duration_s == pytest.approx(25.0 - 1.02)
    assert [s.text for s in first.segments] == ["one", "two"]
    assert first.segments[0].start == pytest.approx(0.01)
    assert first.text == "one two" and first.previous_text is None
    assert second.offset_s == pytest.approx(126.0) and second.duration_s == pytest.approx(14.0)
    assert [(s.start, s.end) for s in second.segments] == [(0.0, 7.0), (8.0, 14.0)]
    assert second.previous_text == "one two"
    assert second.id == "talk@26.00s"
    assert durations == [pytest.approx(23.98), pytest.approx(14.0)]
    assert (report.recordings, report.windows, report.segments) == (1, 2, 4)
    assert not report.left_out


def test_segments_that_fit_no_window_are_left_out_and_counted() -> None:
    segs = [
        Segment(0.0, 5.0, "a"),
        Segment(6.0, 40.0, "too long"),
        Segment(41.0, 42.0, "x" * 500),  # past 448 tokens on its own
        Segment(43.0, 44.0, "b"),
    ]
    plain = Row(1, 2, Path("/x/clip.wav"), "a clip")
    rows, durations, report = cut_recordings(
        [_recording(segs), plain], [50.0, 3.0], _Chars(), where=lambda r: f"m.jsonl:{r.line}"
    )
    assert [r.text for r in rows] == ["a", "b", "a clip"]
    assert durations[-1] == 3.0  # a row without segments passes as it is
    assert rows[1].previous_text.startswith("a too long x")  # what was said before, all of it
    assert report.left_out == {"segment_too_long": 1, "segment_label_too_long": 1}
    assert report.examples[0] == "m.jsonl:1 6.00-40.00 s: longer than one 30 s window"
    assert "left out 2 segment(s)" in report.describe()


def _write(path: Path, seconds: float, sr: int = 16000, freq: float = 300.0) -> Path:
    t = np.arange(int(seconds * sr)) / sr
    x = 0.3 * np.sin(2 * np.pi * freq * t) * (1 + t / seconds)  # every span differs
    sf.write(path, x.astype(np.float32), sr)
    return path


def _manifest(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_offsets_read_their_span_and_are_no_duplicates(tmp_path: Path) -> None:
    _write(tmp_path / "long.wav", 40.0, sr=8000)
    m = _manifest(
        tmp_path,
        [
            {"audio": "long.wav", "offset": 2.0, "duration": 3.0, "text": "a"},
            {"audio": "long.wav", "offset": 31.5, "duration": 4.0, "text": "b"},
            {"audio": "long.wav", "offset": 38.0, "duration": 5.0, "text": "c"},
        ],
    )
    manifest = load_manifest(m)
    row = manifest.rows[0]
    assert (row.offset_s, row.duration_s) == (2.0, 3.0)
    whole = load_audio(row.audio)
    span = load_row_audio(row)
    assert span.size == 48_000
    np.testing.assert_allclose(span[1000:-1000], whole[33_000:79_000], atol=1e-3)
    report = check_manifest(manifest, DataConfig(), progress=False)
    kinds = [[p.kind for p in r.problems] for r in report.rows]
    assert kinds == [[], [], ["span_past_end"]]
    assert report.rows[0].duration_s == pytest.approx(3.0)
    # Checked again, from the facts the first check kept: each span's own.
    again = check_manifest(manifest, DataConfig(), progress=False)
    assert [[p.kind for p in r.problems] for r in again.rows] == kinds
    assert [r.duration_s for r in again.rows] == [r.duration_s for r in report.rows]


def test_every_bad_segment_case_is_found(tmp_path: Path) -> None:
    _write(tmp_path / "talk.wav", 20.0)

    def seg(a, b, text="words"):
        return {"start": a, "end": b, "text": text}

    cases = {
        "good": [seg(0, 5), seg(5.01, 9)],  # a 10 ms overlap is rounding, not a problem
        "segment_overlap": [seg(0, 5), seg(4, 9)],
        "segment_order": [seg(6, 9), seg(0, 5)],
        "segment_past_end": [seg(0, 5), seg(15, 21)],
        "segment_empty": [seg(0, 5, " ")],
        "segment_times": [seg(5, 5)],
        "empty_text": [],
        "unparsable_row": [{"start": "soon", "end": 2}],
    }
    m = _manifest(tmp_path, [{"audio": "talk.wav", "segments": v} for v in cases.values()])
    report = check_manifest(load_manifest(m), DataConfig(), progress=False)
    found = [
        [p.kind for p in r.problems if not p.kind.startswith("duplicate")] for r in report.rows
    ]
    assert found == [[] if k == "good" else [k] for k in cases]
    assert (
        "segment 2 (4.00-9.00 s) starts before segment 1 ends" in report.rows[1].problems[0].detail
    )
    assert report.rows[0].row.text == "words words"  # no text column: the segments' text


def test_a_segment_longer_than_a_window_is_a_warning_and_left_out(tmp_path: Path) -> None:
    _write(tmp_path / "talk.wav", 45.0)
    m = _manifest(
        tmp_path,
        [{"audio": "talk.wav", "text": "t", "segments": [
            {"start": 0, "end": 4, "text": "hello"},
            {"start": 5, "end": 40, "text": "a long song"},
            {"start": 41, "end": 44, "text": "bye"},
        ]}],
    )  # fmt: skip
    data = usable_rows(m, DataConfig())
    assert [p.kind for p in data.report.rows[0].problems] == ["segment_too_long"]
    assert [r.text for r in data.rows] == ["hello", "bye"]
    assert data.summary(m, None)["long_recordings"]["segments_left_out"] == {"segment_too_long": 1}


def test_a_subtitled_folder_is_a_manifest(tmp_path: Path) -> None:
    _write(tmp_path / "talk.wav", 6.0)
    (tmp_path / "talk.srt").write_text(SRT, encoding="utf-8")
    _write(tmp_path / "lone.wav", 1.0)  # no subtitles: not a row
    _write(tmp_path / "broken.flac", 1.0)
    (tmp_path / "broken.vtt").write_text("WEBVTT\n\nno cues here\n", encoding="utf-8")
    manifest = load_manifest(tmp_path)
    assert manifest.format == "subtitled"
    broken, talk = manifest.rows
    assert broken.problem == "unparsable_row" and "has no cue" in broken.detail
    assert talk.text == "Hello there, general & Kenobi second line"
    assert len(talk.segments) == 2
    assert manifest.where(talk) == "talk.wav"  # how the check and the log name it


def test_a_window_trained_with_its_previous_text(tiny_en_processor) -> None:
    tok = tiny_en_processor.tokenizer
    window = Row(
        0,
        1,
        Path("/x/a.wav"),
        "second part",
        segments=(Segment(0.0, 1.0, "second"), Segment(1.5, 2.0, "part")),
        previous_text="the first part",
    )
    prefix = [tok.convert_tokens_to_ids(t) for t in ("<|startoftranscript|>", "<|notimestamps|>")]
    out = window_labels(tok, window, prefix, timestamped=True, with_previous=True)
    inputs, labels = out["decoder_input_ids"], out["labels"]
    context = tok(" the first part", add_special_tokens=False).input_ids
    sop, sot = tok.convert_tokens_to_ids(["<|startofprev|>", "<|startoftranscript|>"])
    assert inputs[: len(context) + 2] == [sop, *context, sot]
    # No loss on the context nor on the <|startoftranscript|> after it; the target after.
    assert labels[: len(context) + 1] == [-100] * (len(context) + 1)
    target = labels[len(context) + 1 :]
    assert target == inputs[len(context) + 2 :] + [tok.eos_token_id]
    assert tok.decode(target, decode_with_timestamps=True) == (
        "<|0.00|> second<|1.00|><|1.50|> part<|2.00|><|endoftext|>"
    )


def test_a_batch_mixing_context_and_plain_items(tmp_path: Path, tiny_en_processor) -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    audio = _write(tmp_path / "a.wav", 3.0)
    segs = (Segment(0.0, 1.0, "hello"),)
    rows = [
        Row(0, 1, audio, "hello", offset_s=0.0, duration_s=1.0, segments=segs, previous_text="hi"),
        Row(1, 2, audio, "plain clip"),
    ]
    ds = SpeechDataset(rows, tiny_en_processor, timestamp_share=0.0, previous_text_share=1.0)
    items = [ds[0], ds[1]]
    assert "decoder_input_ids" in items[0] and "decoder_input_ids" not in items[1]
    sot = tiny_en_processor.tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    batch = WhisperCollator(tiny_en_processor, sot)(items)
    inputs, labels = batch["decoder_input_ids"], batch["labels"]
    assert inputs.shape == labels.shape
    sop = tiny_en_processor.tokenizer.convert_tokens_to_ids("<|startofprev|>")
    assert inputs[0, 0] == sop and inputs[1, 0] == sot
    assert labels[0, 0] == -100 and labels[1, 0] != -100
    # The plain item is what the model's own shift would make of its labels.
    plain = torch.as_tensor(items[1]["labels"])
    assert torch.equal(inputs[1, : len(plain) - 1], plain[:-1])
    assert torch.equal(labels[1, : len(plain) - 1], plain[1:])
    # The model's loss is taken where labels are not -100: on the targets alone.
    cfg = WhisperConfig(
        vocab_size=len(tiny_en_processor.tokenizer), d_model=16, encoder_layers=1,
        decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=16, decoder_ffn_dim=16, decoder_start_token_id=sot,
    )  # fmt: skip
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        loss = model(**batch).loss
    assert torch.isfinite(loss)
    kept = labels != -100
    logits = model(**batch).logits.detach()
    manual = torch.nn.functional.cross_entropy(logits[kept], labels[kept])
    assert loss.item() == pytest.approx(manual.item(), rel=1e-5)


def test_a_window_is_written_in_the_output_script() -> None:
    from fitwhisper.chinese_script import rows_in_script

    window = Row(
        0, 1, Path("/a.wav"), "軟體", segments=(Segment(0, 1, "軟體"),), previous_text="資料"
    )
    (out,) = rows_in_script([window], "simplified")
    assert (out.text, out.segments[0].text, out.previous_text) == ("软体", "软体", "资料")


def test_csv_cells_give_offsets_and_segments(tmp_path: Path) -> None:
    _write(tmp_path / "long.wav", 10.0)
    segments = json.dumps([{"start": 0.5, "end": 1.5, "text": "hi"}]).replace('"', '""')
    (tmp_path / "m.csv").write_text(
        "audio,offset,duration,text,segments\n"
        f'long.wav,2.0,3.5,,"{segments}"\n'
        "long.wav,soon,1,b,\n"
        "long.wav,,4,c,\n",  # no offset: duration is length metadata, nothing is cut
        encoding="utf-8",
    )
    first, bad, whole = load_manifest(tmp_path / "m.csv").rows
    assert (first.offset_s, first.duration_s) == (2.0, 3.5)
    assert first.segments == (Segment(0.5, 1.5, "hi"),)
    assert first.text == "hi"  # an empty text cell: the segments' text
    assert bad.problem == "unparsable_row" and bad.detail == "offset 'soon': not seconds"
    assert (whole.offset_s, whole.duration_s, whole.segments) == (None, None, None)


def test_a_clip_takes_its_speakers_previous_clip_as_context(
    tmp_path: Path, tiny_en_processor
) -> None:
    """A manifest with a speaker column: each clip after a speaker's first has that
    speaker's previous clip's text as context, trained with it as `<|startofprev|>` and no
    loss on it; other speakers, rows without a speaker and windows keep their own."""
    from fitwhisper.data.recordings import speaker_context

    audio = _write(tmp_path / "a.wav", 2.0)
    lines = [
        {"audio": "a.wav", "text": "one", "speaker": "s1"},
        {"audio": "a.wav", "text": "two", "speaker": 7},
        {"audio": "a.wav", "text": "three", "speaker": "s1"},
        {"audio": "a.wav", "text": "four"},
        {"audio": "a.wav", "text": "five", "speaker": 7},
    ]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = load_manifest(manifest).rows
    assert [r.speaker for r in rows] == ["s1", "7", "s1", None, "7"]
    window = Row(5, 6, audio, "w", segments=(Segment(0, 1, "w"),), speaker="s1")
    out, given = speaker_context([*rows, window])
    assert [r.previous_text for r in out] == [None, None, "one", None, "two", None]
    assert given == 2
    ds = SpeechDataset(out, tiny_en_processor, previous_text_share=1.0)
    item = ds[2]
    tok = tiny_en_processor.tokenizer
    context = tok(" one", add_special_tokens=False).input_ids
    sop = tok.convert_tokens_to_ids("<|startofprev|>")
    assert item["decoder_input_ids"][: len(context) + 1] == [sop, *context]
    assert item["labels"][: len(context) + 1] == [-100] * (len(context) + 1)
    assert tok.decode(item["labels"][len(context) + 1 :], skip_special_tokens=True) == "three"
    assert "decoder_input_ids" not in ds[0]  # a speaker's first clip: nothing before it
