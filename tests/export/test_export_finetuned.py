"""Acceptance: a real model fine-tuned on real speech, exported to every format and run in
each format's own engine (faster-whisper, whisper.cpp, onnxruntime, openai-whisper) on
held-out clips: each scores within a point of its source, keeps the fine-tune's language
when given none, and writes timestamps on a long file; the same for a LoRA run (Mandarin
too), exported without a manual merge. Full precision where the engine runs it (float32
CTranslate2; ggml at f16, whisper.cpp's own type): a difference is the conversion's and the
engine's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fitwhisper.cli import main

pytestmark = pytest.mark.slow

ALL = "ct2,ggml,onnx,openai"
# ggml stays f16 (see cli/export.py); t2s: base writes either script, as evaluate's docs say.
SCORING = ["--quantization", "float32", "--opencc", "t2s"]


def _sentences(shared_data: Path, start: int, n: int, path: Path) -> Path:
    """n AISHELL sentences from the start-th on, leaving out those with spelled-out Latin
    letters ("H A N N A H"): they send offline/base into a repetition loop whose length
    differs between engines by chance (measured: 223 characters in one engine, 17 in
    another, on the same clip), which scores the loop, not the conversion."""
    folder = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"][start:]
    picked = [r for r in sentences if not re.search("[A-Za-z]", r["text"])][:n]
    path.write_text("".join(
        json.dumps({"audio": str(folder / r["audio"]), "text": r["text"]}, ensure_ascii=False)
        + "\n" for r in picked
    ))  # fmt: skip
    return path


def _check(report: dict, *, language: str, tolerance: float = 0.01) -> None:
    m = report["metric"]
    assert 0.0 < report["source"][m] < 0.6  # real transcripts, not empty ones
    assert report["source"]["long_file"]["times_ok"]
    for fmt in ALL.split(","):
        r = report["formats"][fmt]
        print(f"{fmt:7} {m} {100 * r[m]:6.2f}% ({100 * r['difference'][m]:+.2f}), "
              f"long file {100 * r['long_file'][m]:.2f}%, {r['long_file']['segments']} segments, "
              f"{r['seconds']:.1f} s, languages {r['languages']}")  # fmt: skip
        assert abs(r["difference"][m]) <= tolerance, fmt
        assert r["languages"] == {language: report["rows"]}, fmt  # kept with no --language
        assert r["long_file"]["times_ok"], fmt
        # The long file's text as close to the source's as the clips' are, give or take.
        assert abs(r["long_file"][m] - report["source"]["long_file"][m]) <= 0.05, fmt


def test_a_mandarin_fine_tune_runs_in_every_engine_as_its_source(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from huggingface_hub import ModelCard

    train = _sentences(shared_data, 0, 16, tmp_path / "train.jsonl")
    # Every held-out sentence (74): on 24 of them, f16 whisper.cpp read 4 characters
    # differently from the fp32 source (+1.18 points), on all 74 it is -0.18: the rounding
    # of a model that hesitates, not a conversion fault, which more clips tell apart.
    held_out = _sentences(shared_data, 300, 74, tmp_path / "held_out.jsonl")
    # The run scores 8 of them (for the model card): it scores before and after training,
    # and on both encoder windows, and the export scores all 74 in every engine anyway.
    run_eval = tmp_path / "run_eval.jsonl"
    run_eval.write_text("".join(held_out.read_text().splitlines(keepends=True)[:8]))
    run = tmp_path / "run"
    code = main(
        ["train", "--model", "offline/base", "--language", "zh", "--train_manifest", str(train),
         "--eval_manifest", str(run_eval), "--output_dir", str(run), "--max_steps", "2",
         "--per_device_train_batch_size", "8", "--learning_rate", "1e-5",
         "--save_strategy", "no", "--report_to", "none", "--seed", "0"]
    )  # fmt: skip
    assert code == 0
    out = tmp_path / "exports"
    # No --language: each engine must take Mandarin from what the export carries.
    code = main(["export", str(run), str(out), "--format", ALL, *SCORING,
                 "--manifest", str(held_out)])  # fmt: skip
    assert code == 0
    report = json.loads((out / "export_report.json").read_text())
    with capsys.disabled():
        print(f"\n{capsys.readouterr().out}")
        _check(report, language="zh")
    # The model card came from the run (its metrics) and got the export table.
    card = ModelCard.load(out / "onnx" / "README.md")
    metrics = json.loads((run / "eval" / "metrics.json").read_text())
    assert card.data.eval_results[0].metric_value == round(100 * metrics["cer"], 2)
    assert card.data.language == ["zh"] and "| ggml | whisper.cpp" in card.text


def test_a_lora_run_exports_without_a_manual_merge(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = _sentences(shared_data, 0, 16, tmp_path / "train.jsonl")
    held_out = _sentences(shared_data, 300, 24, tmp_path / "held_out.jsonl")
    run = tmp_path / "lora"
    code = main(
        ["train", "--model", "offline/base", "--use_lora", "--language", "zh",
         "--train_manifest", str(train), "--output_dir", str(run), "--max_steps", "3",
         "--per_device_train_batch_size", "8", "--learning_rate", "1e-4",
         "--save_strategy", "no", "--report_to", "none", "--seed", "0"]
    )  # fmt: skip
    assert code == 0
    assert (run / "final" / "adapter_config.json").is_file()  # an adapter, not a full model
    out = tmp_path / "exports"
    code = main(["export", str(run / "final"), str(out), "--format", ALL, *SCORING,
                 "--manifest", str(held_out)])  # fmt: skip
    assert code == 0
    report = json.loads((out / "export_report.json").read_text())
    with capsys.disabled():
        print(f"\n{capsys.readouterr().out}")
        _check(report, language="zh")
