"""Evaluation by generation: decoding of Trainer output, scoring, the files it writes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fitwhisper.evaluate import decode, evaluate_manifest, make_scorer, metrics_fn


def test_decode_treats_trainer_padding_as_pad(tiny_en_processor) -> None:
    tok = tiny_en_processor.tokenizer
    ids = tok(" hello world").input_ids
    padded = np.array([ids + [-100, -100], ids[:2] + [-100] * (len(ids))])
    texts = decode(tok, padded)
    assert texts[0] == "hello world"
    assert len(texts) == 2 and "-100" not in texts[1]


def test_metrics_fn_scores_generated_ids_against_manifest_texts(tiny_en_processor) -> None:
    from types import SimpleNamespace

    tok = tiny_en_processor.tokenizer
    refs = ["the cat sat", "on the mat"]
    hyps = [" the cat sat", " on a mat"]  # one substitution in six words
    width = max(len(tok(h).input_ids) for h in hyps)
    preds = np.full((2, width), -100)
    for i, h in enumerate(hyps):
        ids = tok(h).input_ids
        preds[i, : len(ids)] = ids
    metric, norm = make_scorer("en")
    out = metrics_fn(tok, refs, metric, norm)(SimpleNamespace(predictions=preds))
    assert out["wer"] == pytest.approx(1 / 6)


def test_evaluate_manifest_writes_per_utterance_predictions(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    res = evaluate_manifest(
        str(tiny_whisper_dir), tone_manifest, batch_size=4, generation_max_length=8
    )
    assert res.score.metric == "wer"
    assert res.score.n_utterances == 6
    assert len(res.hypotheses) == 6
    # An untrained model cannot transcribe: errors must show up, not a perfect score.
    assert res.score.normalized > 0.5
    out = res.write(tmp_path / "eval")
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["reference"] for r in rows] == [f"tone number {i} is playing" for i in range(6)]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["metric"] == "wer" and metrics["n_utterances"] == 6
