"""Real weights on real recordings through the whole data path: manifest, check, features,
generation, scoring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _subset(src: Path, out: Path, keep) -> Path:
    """A manifest of some rows of a shared folder's manifest.jsonl, paths made absolute."""
    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    picked = [dict(r, audio=str(src / r["audio"])) for r in rows if keep(r)]
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in picked))
    return out


def test_base_transcribes_mandarin_scored_by_cer(shared_data: Path, tmp_path: Path) -> None:
    from fitwhisper.evaluate import evaluate_manifest

    manifest = _subset(
        shared_data / "aishell-s0150",
        tmp_path / "zh.jsonl",
        lambda r: r.get("kind") == "sentence",
    )
    res = evaluate_manifest("offline/base", manifest, language="zh", max_samples=8)
    assert res.score.metric == "cer" and res.score.n_utterances == 8
    # Zero-shot base on clean read Mandarin: far from perfect, far from random.
    assert 0.0 < res.score.normalized < 0.6


def test_check_data_passes_real_8khz_digits(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fitwhisper.cli import main

    manifest = _subset(
        shared_data / "fsdd-train", tmp_path / "digits.jsonl", lambda r: "george" in r["audio"]
    )
    report = tmp_path / "report.jsonl"
    code = main(
        ["check-data", str(manifest), "--model", "offline/tiny.en", "--report", str(report)]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(rows) == 450 and {r["sample_rate_hz"] for r in rows} == {8000}
