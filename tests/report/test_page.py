"""The report page in a real browser (headless Chromium over the DevTools protocol): a
real small CPU run's report, a 5,000-clip evaluation, and two evaluations side by side."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import REPO, write_tone
from tests.report.pages import full_screenshot, generated_evaluation, open_page

from fitwhisper.report import write_report

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
}


def train_argv(model: Path, manifest: Path, out: Path) -> list[str]:
    """A four-step run that logs every step and evaluates twice."""
    return [
        sys.executable,
        "-m",
        "fitwhisper",
        "train",
        "--model",
        str(model),
        "--train_manifest",
        str(manifest),
        "--eval_manifest",
        str(manifest),
        "--output_dir",
        str(out),
        "--max_steps",
        "4",
        "--logging_steps",
        "1",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "2",
        "--save_strategy",
        "no",
        "--per_device_train_batch_size",
        "3",
        "--learning_rate",
        "3e-3",
        "--generation_max_length",
        "12",
        "--seed",
        "0",
    ]


def tone_clips(folder: Path) -> Path:
    """Six tone clips (0.6-1.6 s) with transcripts and two speakers."""
    rows = []
    for i in range(6):
        rel = f"clips/tone_{i}.wav"
        write_tone(folder / rel, 0.6 + 0.2 * i, freq=300.0 + 50 * i)
        rows.append(
            {"audio_path": rel, "text": f"tone number {i} is playing", "speaker": f"spk{i % 2}"}
        )
    path = folder / "clips.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def real_run(tiny_whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real small CPU run by the command, stderr redirected to a file, as a log is."""
    root = tmp_path_factory.mktemp("report-run")
    manifest = tone_clips(root)
    out, log_file = root / "run", root / "train.log"
    with log_file.open("w") as err:
        subprocess.run(
            train_argv(tiny_whisper_dir, manifest, out),
            cwd=root,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=err,
            check=True,
        )
    return {"root": root, "out": out, "log": log_file.read_text(encoding="utf-8")}


def test_a_real_runs_report_opens_with_its_curves_clips_marks_and_audio(
    real_run: dict, browser, tmp_path: Path
) -> None:
    out = real_run["out"]
    page = out / "report.html"
    assert page.is_file(), "train writes RUN/report.html at its end"
    assert f"report: {page}" in real_run["log"]
    open_page(browser, page)
    assert browser.console_errors() == []

    # Curves: loss, learning rate, eval error rate, eval loss, memory, clips per second,
    # data wait, each with one point per logging step (4) or evaluation (2).
    points = browser.evaluate(
        "Array.from(document.querySelectorAll('figure.chart')).map(f => "
        "[f.querySelector('.u-title').textContent, +f.dataset.points, "
        "!!f.querySelector('canvas')])"
    )
    assert {t: (n, c) for t, n, c in points} == {
        "training loss": (4, True),
        "learning rate": (4, True),
        "evaluation error rate": (2, True),
        "evaluation loss": (2, True),
        "memory per logging step": (4, True),
        "clips per second": (4, True),
        "share of time waiting for data": (4, True),
    }

    # The clip table: every held-out clip, with its speaker; S/D/I marked where they are.
    lines = (out / "eval" / "predictions.jsonl").read_text().splitlines()
    predictions = [json.loads(x) for x in lines]
    rows = browser.evaluate(
        "Array.from(document.querySelectorAll('#clip-table tbody tr')).map(r => "
        "[r.cells[0].firstChild.title, r.cells[3].textContent, r.querySelectorAll('.op-s').length, "
        "r.querySelectorAll('del.op-d').length, r.querySelectorAll('ins.op-i').length])"
    )
    assert browser.evaluate("document.getElementById('clip-table-count').textContent") == (
        "6 of 6 clips"
    )
    by_id = {r[0]: r for r in rows}
    assert set(by_id) == {u["id"] for u in predictions}
    assert {r[1] for r in rows} == {"spk0", "spk1"}
    for u in predictions:
        marked = by_id[u["id"]][2:]
        # A run of several substituted words is one mark: at least one where there are any.
        assert (marked[0] > 0) == (u["substitutions"] > 0), u
        assert (marked[1] > 0) == (u["deletions"] > 0) and (marked[2] > 0) == (u["insertions"] > 0)
    assert any(u["substitutions"] for u in predictions), "the data should hold a substitution"

    # The audio element of the first clip loads its file by a path relative to the report.
    browser.wait_for("document.querySelector('#clip-table audio').readyState >= 1")
    src, error = browser.evaluate(
        "(a => [a.getAttribute('src'), a.error && a.error.code])"
        "(document.querySelector('#clip-table audio'))"
    )
    assert src.startswith("../clips/tone_") and error is None
    full_screenshot(browser, tmp_path / "run-report.png")


def test_5000_clips_open_in_under_2_s(browser, tmp_path: Path) -> None:
    """The acceptance line of issue 36, measured by the page itself: from navigation to
    the end of the renderer, in the same browser a user opens it in."""
    audio = [write_tone(tmp_path / "audio" / f"a{i}.wav", 1.0 + i) for i in range(3)]
    folder = generated_evaluation(tmp_path / "eval", 5000, audio)
    page = write_report(folder)
    ms = open_page(browser, page)
    print(f"\n5,000 clips: {page.stat().st_size / 1e6:.1f} MB page, rendered in {ms:.0f} ms")
    assert browser.console_errors() == []
    assert browser.evaluate("document.getElementById('clip-table-count').textContent") == (
        "5000 of 5000 clips"
    )
    # Paged: only one page of rows is in the document; a substitution is marked in it.
    assert browser.evaluate("document.querySelectorAll('#clip-table tbody tr').length") == 50
    assert browser.evaluate("document.querySelector('#clip-table .op-s').textContent") == (
        "[brown→round]"
    )
    assert ms < 2000
    # Filtering runs over every clip, not the page shown.
    browser.evaluate(
        "(i => { i.value = 'clip_04999'; i.dispatchEvent(new Event('input')); })"
        "(document.querySelector('#clip-section input[type=search]'))"
    )
    assert browser.evaluate("document.getElementById('clip-table-count').textContent") == (
        "1 of 5000 clips"
    )


def test_two_evaluations_side_by_side_clip_by_clip(browser, tmp_path: Path) -> None:
    audio = [write_tone(tmp_path / "audio" / "a.wav", 1.0)]
    a = generated_evaluation(tmp_path / "lr-1e-5", 30, audio)
    b = generated_evaluation(tmp_path / "lr-1e-4", 30, audio, worse=4)
    page = write_report(a, b, output=tmp_path / "compare.html")
    open_page(browser, page)
    assert browser.console_errors() == []
    assert browser.evaluate("document.getElementById('clip-table-count').textContent") == (
        "30 of 30 clips"
    )
    changes = browser.evaluate(
        "Array.from(document.querySelectorAll('#clip-table tbody tr')).map(r => "
        "r.cells[6].textContent)"
    )
    assert changes[:4] == ["worse"] * 4 and set(changes[4:]) == {"same"}
    cards = browser.evaluate("document.querySelector('.cards').textContent")
    assert "0 clips better, 4 worse, 26 the same" in cards
    full_screenshot(browser, tmp_path / "comparison.png")


def test_a_log_file_gets_one_plain_line_per_step_and_no_bar(real_run: dict) -> None:
    """The same run's stderr, redirected to a file: the lines, without a progress bar."""
    from tests.train.test_console import check_plain_log

    log = real_run["log"]
    check_plain_log(log, steps=4, evals=2)
    assert not re.search(r"\d+/4 \[", log), "no progress bar in a file"
