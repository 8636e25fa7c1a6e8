"""`evaluate --long_form`: a recording longer than 30 s scored as one text against an SRT
file and against a plain transcript, with the boundary error where the reference has times,
and the report page showing the recording's transcript against its reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.train.test_long_recordings import CUES, _recording, _srt_time

from fitwhisper.cli import main
from fitwhisper.data.segments import Segment
from fitwhisper.evaluate.long_form import boundary_distances
from fitwhisper.transcribe.formats import Segment as Transcribed


def test_boundary_distances_take_the_nearest_boundary_of_each_kind() -> None:
    reference = [Segment(1.0, 4.0, "a"), Segment(5.0, 9.0, "b")]
    hypothesis = [Transcribed(0, 1.2, 3.0, "a"), Transcribed(1, 3.0, 9.5, "b")]
    assert boundary_distances(reference, hypothesis) == pytest.approx([0.2, 1.0, 2.0, 0.5])
    assert boundary_distances(reference, []) == []


class _Transcriber:
    """An engine that hears each cue 0.1 s late: what scoring makes of a known transcript."""

    def transcribe(self, names, audios):
        from fitwhisper.transcribe.formats import Transcript

        segments = tuple(
            Transcribed(k, a + 0.1, b + 0.1, " " + t) for k, (a, b, t) in enumerate(CUES)
        )
        return [Transcript(names[0], segments, "en", len(audios[0]) / 16000)]


@pytest.mark.parametrize("reference", ["srt", "text"])
def test_a_long_recording_is_scored_as_one_text(
    reference: str, tiny_whisper_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    audio = _recording(tmp_path / "data")
    words = " ".join(t for _, _, t in CUES)
    if reference == "srt":
        blocks = [f"{k}\n{_srt_time(a)} --> {_srt_time(b)}\n{t}\n" for k, (a, b, t) in
                  enumerate(CUES, start=1)]  # fmt: skip
        (audio.parent / "talk.srt").write_text("\n".join(blocks), encoding="utf-8")
        manifest = audio.parent
        monkeypatch.setattr("fitwhisper.transcribe.run.make_engine", lambda *a: _Transcriber())
    else:
        manifest = audio.parent / "long.jsonl"
        manifest.write_text(json.dumps({"audio": audio.name, "text": words}) + "\n")
    out = tmp_path / "eval"
    code = main(["evaluate", str(tiny_whisper_dir), str(manifest), "--long_form",
                 "--output_dir", str(out), "-q"])  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_utterances"] == 1
    (record,) = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert record["reference"] == words  # the whole recording's text, not a window's
    figures = metrics["long_form"]
    if reference == "srt":  # the known transcript: every word right, every boundary 0.1 s off
        assert metrics["wer"] == 0.0 and metrics["errors"] == 0
        assert figures["boundaries"] == 2 * len(CUES)
        assert figures["mean_boundary_error_s"] == pytest.approx(0.1)
    else:  # the tiny random model, through transcribe's own engine; no times to compare
        assert figures["boundaries"] == 0 and figures["mean_boundary_error_s"] is None
    # The page's clip table holds the recording, its reference aligned with the transcript.
    assert record["reference_normalized"] in (out / "report.html").read_text(encoding="utf-8")


def test_initial_prompt_reaches_the_engine_and_needs_long_form(
    tiny_whisper_dir: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    audio = _recording(tmp_path / "data")
    manifest = audio.parent / "long.jsonl"
    manifest.write_text(json.dumps({"audio": audio.name, "text": "a b"}) + "\n")
    seen = []

    def engine(model, opts, choice):
        seen.append(opts.initial_prompt)
        return _Transcriber()

    monkeypatch.setattr("fitwhisper.transcribe.run.make_engine", engine)
    argv = ["evaluate", str(tiny_whisper_dir), str(manifest), "--initial_prompt", "Taipei, MRT."]
    assert main([*argv, "--long_form", "-q"]) == 0
    assert seen == ["Taipei, MRT."]
    assert main(argv) == 1  # a configuration error, before any model loads
    assert "--initial_prompt is used with --long_form only" in capsys.readouterr().err
