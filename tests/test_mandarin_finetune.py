"""Fine-tuning real offline/base on real Mandarin with Traditional
references lowers CER on held-out clips and brings the output to Traditional script, while
the forgetting guard reports English WER before and after; Breeze-ASR-25 plans offline."""

from __future__ import annotations

import json
import socket

import pytest


@pytest.mark.slow
def test_traditional_fine_tune_lowers_cer_and_reports_english_before_and_after(
    mandarin_lora,
) -> None:
    # The run is shared (tests/shared_runs.py): tests/train/test_methods.py checks its adapter.
    before, result = mandarin_lora.zero_shot, mandarin_lora.result
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
    # Language identification on the English set, before and after, stated on the card.
    lid = regression["language_id"]
    assert lid["before"]["clips"] == lid["after"]["clips"] == 4
    assert sum(lid["after"]["detected"].values()) == 4
    assert lid["difference"] == pytest.approx(lid["after"]["share"] - lid["before"]["share"])
    card = (result.output_dir / "final" / "README.md").read_text(encoding="utf-8")
    assert (
        f"{round(100 * lid['before']['share'], 2)}% right before, "
        f"{round(100 * lid['after']['share'], 2)}% after"
    ) in card


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
