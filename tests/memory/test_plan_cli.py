"""`fitwhisper plan`: the table, --json, and user errors."""

from __future__ import annotations

import json

from fitwhisper.cli import main


def test_plan_prints_the_breakdown(small_config_dir, capsys):
    argv = ["plan", "--model", str(small_config_dir), "--per_device_train_batch_size", "2"]
    assert main([*argv, "--max_label_tokens", "32", "--use_lora", "--gpu", "A100"]) == 0
    out = capsys.readouterr().out
    for row in ("weights", "gradients", "optimizer states", "activations", "CUDA context"):
        assert f"\n  {row} " in out
    assert "LoRA, bf16 mixed, batch 2, no checkpointing" in out  # train's rule on an A100
    assert "predicted peak on the device" in out


def test_plan_json_parses(small_config_dir, capsys):
    argv = ["plan", "--model", str(small_config_dir), "--json", "--fp16"]
    assert main([*argv, "--gradient_checkpointing", "--max_label_tokens", "16"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["request"]["precision"] == "fp16" and d["request"]["gradient_checkpointing"]
    assert d["total_bytes"] > d["peak_tensor_bytes"] > d["weights_bytes"] > 0


def test_plan_rejects_conflicting_precisions(small_config_dir, capsys):
    assert main(["plan", "--model", str(small_config_dir), "--fp16", "--bf16"]) == 1
    assert "error: --fp16, --bf16 and --fp32: more than one is set" in capsys.readouterr().err
