"""Fine-tuning real offline/base on real Mandarin with Traditional
references lowers CER on held-out clips and brings the output to Traditional script, while
the forgetting guard reports English WER before and after; Breeze-ASR-25 plans offline."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import numpy as np
import pytest

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.evaluate import evaluate_manifest
from fitwhisper.train import train


def _aishell(src: Path, rows: list[dict], out: Path) -> Path:
    """Rows of aishell-s0150 as they are: `text` Simplified, `text_zh_tw` Traditional."""
    lines = [{**r, "audio": str(src / r["audio"])} for r in rows]
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
    return out


def _digit_strings(src: Path, out: Path, n: int) -> Path:
    """English digit strings: 3-6 fsdd digits of one speaker joined by 0.15 s of silence."""
    import soundfile

    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    by_speaker: dict[str, list[dict]] = {}
    for r in rows:
        by_speaker.setdefault(r["speaker"], []).append(r)
    rng, lines = random.Random(0), []
    for i, speaker in enumerate(sorted(by_speaker)[:n]):
        picked = rng.sample(by_speaker[speaker], rng.randint(3, 6))
        pieces = []
        for r in picked:
            audio, sr = soundfile.read(str(src / r["audio"]), dtype="float32")
            pieces += [audio, np.zeros(int(0.15 * sr), np.float32)]
        path = out.parent / f"digits_{i}.flac"
        soundfile.write(str(path), np.concatenate(pieces), sr)
        text = " ".join(r["text"] for r in picked)
        lines.append({"audio": str(path), "text": text, "language": "en"})
    out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return out


@pytest.mark.slow
def test_traditional_fine_tune_lowers_cer_and_reports_english_before_and_after(
    shared_data: Path, tmp_path: Path
) -> None:
    src = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"]
    train_manifest = _aishell(src, sentences[:16], tmp_path / "train.jsonl")
    held_out = _aishell(src, sentences[-8:], tmp_path / "held_out.jsonl")
    english = _digit_strings(shared_data / "fsdd-train", tmp_path / "english.jsonl", 4)
    traditional = DataConfig(text_column="text_zh_tw")

    zero_shot = evaluate_manifest(
        "offline/base", held_out, generation_max_length=48, data_cfg=traditional
    )
    before = zero_shot.metrics()
    result = train(
        ModelConfig(
            model="offline/base",
            language="zh",
            output_script="traditional",
            use_lora=True,
            freeze_encoder=True,  # CPU time: the encoder runs forward only
        ),
        traditional,
        TrainConfig(
            output_dir=str(tmp_path / "run"),
            train_manifest=str(train_manifest),
            eval_manifest=str(held_out),
            regression_manifest=str(english),
            per_device_train_batch_size=8,
            per_device_eval_batch_size=8,
            learning_rate=1e-3,
            max_steps=4,
            generation_max_length=48,
            report_to="none",
            seed=0,
        ),
    )
    after = json.loads((result.output_dir / "eval" / "metrics.json").read_text())
    regression = json.loads((result.output_dir / "eval" / "regression.json").read_text())
    share_before = before["script"]["share_in_expected_script"]
    share_after = after["script"]["share_in_expected_script"]
    print(
        f"held-out CER {before['cer']:.3f} -> {after['cer']:.3f}; Traditional share "
        f"{share_before:.4f} -> {share_after:.4f}; English WER (regression set) "
        f"{regression['before']['wer']:.3f} -> {regression['after']['wer']:.3f}"
    )
    # Zero-shot: the reference script is found from the references, and base mixes scripts.
    assert before["script"]["expected_script"] == "traditional"
    assert after["script"]["expected_script"] == "traditional"
    assert after["cer"] < before["cer"]
    assert share_before < 0.99 <= share_after
    assert after["output_script"] == "none"  # the model writes Traditional; nothing converted
    # The guard: the English set scored by the English scorer before and after.
    assert regression["metric"] == "wer" and regression["n_utterances"] == 4
    assert regression["normalizer"].startswith("whisper_english")
    assert regression["before"]["ref_units"] == regression["after"]["ref_units"] > 0
    assert result.eval_metrics["regression_after"] == regression["after"]["wer"]


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["8GB", "40GB"])
def test_breeze_plans_without_any_network(gpu: str, capsys, monkeypatch) -> None:
    """`fitwhisper plan --model MediaTek-Research/Breeze-ASR-25 --gpu-memory 8GB|40GB`
    recommends a configuration with every socket refused: nothing is downloaded."""
    from fitwhisper.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("plan tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # as a user runs it
    code = main(["plan", "--model", "MediaTek-Research/Breeze-ASR-25", "--gpu-memory", gpu,
                 "--json"])  # fmt: skip
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    rec = plan["settings"]
    assert rec["model"] == "MediaTek-Research/Breeze-ASR-25"
    assert rec["per_device_train_batch_size"] * rec["gradient_accumulation_steps"] == 16
    assert plan["predicted_gib"] <= plan["usable_gib"]
    if gpu == "8GB":  # large-v2's 1.5B weights: LoRA on a bf16 (or quantised) frozen base
        assert rec["use_lora"] or rec["use_8bit"] or rec["use_4bit"]
        assert plan["prediction"]["weights_bytes"] < 0.6 * 4 * 1.57e9  # not fp32
