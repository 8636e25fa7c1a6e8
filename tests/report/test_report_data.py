"""What the report reads and computes, without a browser: alignment marks, hallucination
signs, the paired-bootstrap interval, breakdowns, the command's errors, and a report that
fails without failing its run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import write_tone
from tests.report.pages import generated_evaluation

from fitwhisper.cli import main
from fitwhisper.report import report_quietly, write_report
from fitwhisper.report.clips import hallucination_signs
from fitwhisper.report.stats import by_duration, paired_bootstrap
from fitwhisper.scoring import aligned_units


def test_alignment_marks_words_and_characters_as_the_error_counts_do() -> None:
    assert aligned_units("the cat sat on the mat", "the bat sat sat on the", "wer") == [
        ("=", "the", "the"),
        ("S", "cat", "bat"),
        ("=", "sat", "sat"),
        ("I", "", "sat"),
        ("=", "on the", "on the"),
        ("D", "mat", ""),
    ]
    assert aligned_units("我爱北京", "我恨北京天", "cer") == [
        ("=", "我", "我"),
        ("S", "爱", "恨"),
        ("=", "北京", "北京"),
        ("I", "", "天"),
    ]
    assert aligned_units("", "hello there", "wer") == [("I", "", "hello there")]


def _utt(ref: str, hyp: str, **extra) -> dict:
    return {"reference_normalized": ref, "hypothesis_normalized": hyp, **extra}


def test_hallucination_signs() -> None:
    assert hallucination_signs(_utt("yes", "yes yes yes yes"), 2.0) == ["repeats"]
    assert hallucination_signs(_utt("no no no", "no no no"), 2.0) == []  # said so
    assert hallucination_signs(_utt("a b", "thank you thank you thank you"), 2.0) == ["repeats"]
    assert hallucination_signs(_utt("", "thanks for watching"), 0.4) == ["text on a short clip"]
    assert hallucination_signs(_utt("a", "a", hit_limit=True), 5.0) == ["hit the generation limit"]


def test_paired_bootstrap_interval_holds_the_difference_and_narrows_with_clips() -> None:
    a, b = [2, 0, 1, 3] * 50, [1, 0, 1, 2] * 50  # B fixes one error on half the clips
    out = paired_bootstrap(a, b, [10] * 200)
    assert out["difference"] == pytest.approx(-0.05)
    assert out["low"] < -0.05 < out["high"] < 0
    small = paired_bootstrap(a[:8], b[:8], [10] * 8)
    assert small["high"] - small["low"] > out["high"] - out["low"]
    assert paired_bootstrap([1], [0], [4])["low"] is None  # one clip: no interval


def test_error_rate_by_duration_bucket() -> None:
    cols = ("duration", "errors", "units")
    rows = [[1.0, 1, 10], [1.5, 0, 10], [7.0, 5, 10], [None, 9, 9]]
    assert by_duration(rows, cols) == [
        {"group": "0-2 s", "clips": 2, "errors": 1, "units": 20, "rate": 0.05},
        {"group": "5-10 s", "clips": 1, "errors": 5, "units": 10, "rate": 0.5},
    ]


def test_the_page_embeds_its_data_audio_relative_or_inline(tmp_path: Path) -> None:
    audio = [write_tone(tmp_path / "audio" / "a.wav", 1.0)]
    folder = generated_evaluation(tmp_path / "eval", 4, audio)
    page = write_report(folder).read_text()
    assert "https://" not in page.split("<script id='report-data'")[0]  # nothing fetched
    data = json.loads(page.split("type='application/json'>")[1].split("</script>")[0])
    assert data["evaluation"]["rows"][0][1] == "../audio/a.wav"
    assert data["evaluation"]["confusions"][0] == ["S", "brown", "round", 2]
    inline = write_report(folder, output=tmp_path / "inline.html", embed_audio=True)
    assert "data:audio/x-wav;base64," in inline.read_text() or "data:audio/wav;base64," in (
        inline.read_text()
    )


def test_a_folder_without_a_run_is_one_paragraph(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} is not a run folder or an evaluation folder")
    assert "Traceback" not in err


def test_a_report_that_fails_is_an_error_and_the_run_goes_on(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    import logging

    import fitwhisper.report.render as render

    folder = generated_evaluation(tmp_path / "eval", 2, [write_tone(tmp_path / "a.wav", 1.0)])
    monkeypatch.setattr(render, "render", lambda data: 1 / 0)
    assert report_quietly(folder) is None
    (record,) = [r for r in caplog.records if "could not write the HTML report of" in r.message]
    assert record.levelno == logging.ERROR
    assert f"`fitwhisper report {folder}` writes it once that is fixed" in record.message
    assert not (folder / "report.html").exists()


def test_an_evaluate_compare_folder_reports_the_baseline_against_the_model(
    tmp_path: Path,
) -> None:
    audio = [write_tone(tmp_path / "a.wav", 1.0)]
    out = tmp_path / "cmp"
    for slug, name, worse in (("offline-tiny.en", "offline/tiny.en", 3), ("run-final", "run", 0)):
        generated_evaluation(out / slug, 6, audio, worse=worse)
        metrics = json.loads((out / slug / "metrics.json").read_text())
        (out / slug / "metrics.json").write_text(json.dumps({**metrics, "model": name}))
    names = {"model": {"name": "run"}, "baseline": {"name": "offline/tiny.en"}}
    (out / "comparison.json").write_text(json.dumps(names))
    page = write_report(out).read_text()
    data = json.loads(page.split("type='application/json'>")[1].split("</script>")[0])
    assert data["kind"] == "pair"
    assert [s["title"] for s in data["sides"]] == ["offline-tiny.en", "run-final"]
    assert (data["change"]["better"], data["change"]["worse"]) == (3, 0)


def test_a_clip_hit_the_generation_limit_only_when_long_and_never_ended() -> None:
    from fitwhisper.evaluate.predict import _hit_limit

    eos = 50256
    assert _hit_limit([7] * 60, eos, 64)
    # The longest row of a batch comes back without its end-of-text, however short.
    assert not _hit_limit([7] * 10, eos, 64)
    assert not _hit_limit([7] * 58 + [eos] * 2, eos, 64)
