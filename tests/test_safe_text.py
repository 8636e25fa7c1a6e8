"""Hostile text through every writer, parsed back (fitwhisper.safe_text).

The corpus holds every Unicode line and paragraph separator, control characters, terminal
escapes, bidirectional overrides, lone surrogates (a file name that is not UTF-8), a very
long line, HTML and script, and CSV formula prefixes. Each writer's output must encode as
UTF-8 and parse back: JSON to the same strings, one record per line; subtitles and TSV to
the same number of cues and rows, each text one line; the report page to its data.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path

import pytest
from tests.conftest import write_tone
from tests.report.pages import generated_evaluation

from fitwhisper.cli import main
from fitwhisper.safe_text import json_text, one_line, terminal_text
from fitwhisper.transcribe.formats import FORMATS, Segment, Transcript, render

HOSTILE = [
    "line\u2028separator",
    "para\u2029graph",
    "next\x85line",
    "vt\x0bff\x0cfs\x1cgs\x1drs\x1e",
    "cr\rlf\ncrlf\r\n",
    "nul\x00bell\x07esc\x1b[31mred\x1b[0m",
    "del\x7f csi\x9b",
    "bidi \u202eevil\u202c isolate \u2067x\u2069",
    "lone \ud800 high \udfff low",
    "x" * 100_000,
    "</script><script>alert(1)</script>",
    "<!-- a --> & amp; <b>bold</b>",
    "--> arrow",
    '=HYPERLINK("http://x")',
    "+1+2",
    "-2+3",
    "@SUM(A1)",
    "\ttab\tseparated",
    "😀 emoji 中文　全角",
]


def test_json_text_reads_back_every_hostile_string_on_one_line() -> None:
    for s in HOSTILE:
        text = json_text({"text": s})
        text.encode("utf-8")  # a lone surrogate must not reach the file as itself
        assert len(text.splitlines()) == 1 and len(text.split("\n")) == 1, repr(s[:40])
        assert json.loads(text) == {"text": s}


def _transcript() -> Transcript:
    segments = tuple(
        Segment(id=i, start=float(i), end=i + 0.5, text=s) for i, s in enumerate(HOSTILE)
    )
    return Transcript("talk.wav", segments, "en", float(len(HOSTILE)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_transcript_of_hostile_text_parses_back_in_every_format(fmt: str) -> None:
    t = _transcript()
    out = render(t, fmt)
    out.encode("utf-8")
    # No hidden line break: every reader sees the same lines.
    assert out.splitlines() == out.split("\n")[:-1]
    spoken = [one_line(s) for s in HOSTILE if one_line(s)]
    if fmt == "json":
        assert [s["text"] for s in json.loads(out)["segments"]] == HOSTILE
    elif fmt == "txt":  # the text's own lines kept; every other line break made one
        assert "\x1b" not in out and "\x00" not in out
        assert not re.search("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029\ud800-\udfff]", out)
    elif fmt == "tsv":
        rows = list(csv.reader(io.StringIO(out), delimiter="\t", quoting=csv.QUOTE_NONE))
        assert rows[0] == ["start", "end", "text"] and len(rows) == 1 + len(HOSTILE)
        assert [r[2] for r in rows[1:]] == [one_line(s) for s in HOSTILE]
    elif fmt == "srt":
        blocks = out.rstrip("\n").split("\n\n")
        assert len(blocks) == len(spoken)
        for i, (block, text) in enumerate(zip(blocks, spoken, strict=True), start=1):
            number, timing, cue = block.split("\n")
            assert number == str(i) and " --> " in timing and cue == text
    else:  # vtt
        head, *blocks = out.rstrip("\n").split("\n\n")
        assert head == "WEBVTT" and len(blocks) == len(spoken)
        for block, text in zip(blocks, spoken, strict=True):
            timing, cue = block.split("\n")
            assert " --> " in timing and "-->" not in cue and "<" not in cue
            assert html.unescape(cue) == text


def _hostile_evaluation(folder: Path, audio: Path) -> Path:
    generated_evaluation(folder, len(HOSTILE), [audio])
    path = folder / "predictions.jsonl"
    rows = [json.loads(line) for line in path.read_text().split("\n") if line]
    for row, s in zip(rows, HOSTILE, strict=True):
        row["reference"] = row["hypothesis"] = s
        row["reference_normalized"] = row["hypothesis_normalized"] = s
    from fitwhisper.evaluate.results import _write_jsonl  # evaluate's own writer

    _write_jsonl(path, rows)
    return folder


def test_the_report_of_hostile_clips_is_written_and_its_data_parses_back(
    tmp_path: Path, capsys
) -> None:
    folder = _hostile_evaluation(tmp_path / "eval", write_tone(tmp_path / "a.wav", 1.0))
    from fitwhisper.report.clips import read_jsonl

    assert [r["reference"] for r in read_jsonl(folder / "predictions.jsonl")] == HOSTILE
    assert main(["report", str(folder)]) == 0, capsys.readouterr().err
    page = (folder / "report.html").read_text(encoding="utf-8")
    start = page.index("type='application/json'>") + len("type='application/json'>")
    payload = page[start : page.index("</script>", start)]
    assert "<" not in payload  # nothing inside can end the element or open a comment
    data = json.loads(payload)
    text = json.dumps(data)
    for s in HOSTILE:  # the page aligns words: each word of each clip is there
        assert all(json.dumps(word)[1:-1] in text for word in s.split()), repr(s[:40])


def test_a_report_over_unreadable_files_names_each_and_writes_the_rest(
    tmp_path: Path, capsys
) -> None:
    run = tmp_path / "run"
    generated_evaluation(run / "eval", 3, [write_tone(tmp_path / "a.wav", 1.0)])
    (run / "fitwhisper.yaml").write_text("model: [unclosed\n")
    (run / "trainer_state.json").write_text("{not json")
    (run / "data_report.json").write_bytes(b"\xff\xfe not utf-8")
    with (run / "eval" / "predictions.jsonl").open("a") as f:
        f.write("{broken line\n")
    assert main(["report", str(run)]) == 1
    out, err = capsys.readouterr()
    assert (run / "report.html").is_file() and "report:" in out
    assert "could not read 4 file(s); the page leaves them out" in err
    for name in ("fitwhisper.yaml", "trainer_state.json", "data_report.json"):
        assert str(run / name) in err
    assert f"{run / 'eval' / 'predictions.jsonl'} (line 4:" in err


def test_comparing_runs_without_scored_clips_is_one_paragraph(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for run in (a, b):
        run.mkdir()
        (run / "fitwhisper.yaml").write_text("train: {}\n")
    assert main(["report", str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert f"error: {a} and {b} hold no scored clips" in err
    assert "Traceback" not in err and "\n\n" not in err.split("\n\nhint:")[0]


def test_error_messages_show_control_and_bidi_characters_as_escapes(tmp_path: Path, capsys) -> None:
    evil = tmp_path / "run\x1b[2J\u202eevil"
    assert main(["report", str(evil)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err
    assert "run\\x1b[2J\\u202eevil" in err
    assert terminal_text("a\u2028b\x85c\ud800") == "a\\u2028b\\x85c\\ud800"


def test_hostile_transcripts_train_evaluate_and_report_and_every_output_parses_back(
    tiny_whisper_dir: Path, tmp_path: Path, capsys
) -> None:
    """The corpus as a manifest's transcripts, through `train` (with held-out scoring, its
    data report and model card), `evaluate` and `report`: no crash, every row counted
    (used or skipped with its reason), every JSON, JSONL and CSV output read back whole."""
    rows = [
        {"audio": str(write_tone(tmp_path / f"c{i}.wav", 0.5, freq=300.0 + 20 * i)), "text": s}
        for i, s in enumerate(HOSTILE)
    ]
    manifest = tmp_path / "hostile.jsonl"
    manifest.write_text("".join(json_text(r) + "\n" for r in rows), encoding="utf-8")
    run = tmp_path / "run"
    argv = ["train", "--model", str(tiny_whisper_dir), "--train_manifest", str(manifest),
            "--eval_manifest", str(manifest), "--output_dir", str(run), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--bad_rows", "skip",
            "--generation_max_length", "8", "--report_to", "none", "-q"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    evaluated = tmp_path / "eval"
    argv = ["evaluate", str(run / "final"), str(manifest), "--bad_rows", "skip",
            "--generation_max_length", "8", "--output_dir", str(evaluated), "-q"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert main(["report", str(run)]) == 0, capsys.readouterr().err

    for folder in (run, run / "eval", evaluated):
        for path in folder.glob("*.json"):
            json.loads(path.read_text(encoding="utf-8"))
        for path in folder.glob("*.jsonl"):
            text = path.read_text(encoding="utf-8")
            assert text.split("\n")[:-1] == text.splitlines(), path  # no hidden line break
            [json.loads(line) for line in text.splitlines()]
        for path in folder.glob("*.csv"):
            with path.open(encoding="utf-8", newline="") as f:
                assert len(list(csv.DictReader(f))) >= 1, path
    # Every row is accounted for: scored, or skipped by the data check with its reason (the
    # lone surrogate is no UTF-8 text; the 100,000-character line is too long a label).
    metrics = json.loads((evaluated / "metrics.json").read_text(encoding="utf-8"))
    scored = (evaluated / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(scored) == metrics["n_utterances"]
    assert metrics["n_utterances"] + metrics["skipped_rows"] == len(HOSTILE)
    reasons = sorted(s.split()[1] for s in metrics["skipped"])
    assert reasons == ["bad_encoding", "label_too_long"], metrics["skipped"]
    (run / "final" / "README.md").read_text(encoding="utf-8")
    (run / "report.html").read_text(encoding="utf-8")
