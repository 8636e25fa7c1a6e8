"""`fitwhisper plan`: the table, --json, and user errors."""

from __future__ import annotations

import json

import pytest

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


def test_plan_takes_its_lengths_from_a_shard_index(small_config_dir, tmp_path, capsys):
    """The longest clip and transcript of `fitwhisper shard`'s index bound the plan's
    lengths (a transcript of B UTF-8 bytes is at most B tokens plus 5 special ones)."""
    from tests.conftest import write_tone

    rows = []
    for i, text in enumerate(["一二三", "short", "a somewhat longer transcript"]):
        path = write_tone(tmp_path / f"t{i}.wav", 0.4 + 0.3 * i)
        rows.append({"audio": str(path), "text": text})
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    shards = tmp_path / "shards"
    assert main(["shard", str(manifest), str(shards), "-q"]) == 0
    capsys.readouterr()

    argv = ["plan", "--model", str(small_config_dir), "--json", "--fp16", "--data", str(shards)]
    assert main(argv) == 0
    request = json.loads(capsys.readouterr().out)["request"]
    assert request["max_label_tokens"] == len(b"a somewhat longer transcript") + 5
    assert request["max_audio_len"] == pytest.approx(1.0, abs=1e-3)
    # A --max_label_tokens below the index's bound stays.
    assert main([*argv, "--max_label_tokens", "8"]) == 0
    assert json.loads(capsys.readouterr().out)["request"]["max_label_tokens"] == 8

    assert main(["plan", "--model", str(small_config_dir), "--data", str(manifest)]) == 1
    assert "has no index (shards.json)" in capsys.readouterr().err
