"""DoRA's memory, planned from the method registry's entry: the planner traces PEFT's DoRA
layers as it traces LoRA's."""

from __future__ import annotations

from pathlib import Path

from fitwhisper.cli import main


def test_dora_plans_its_memory_above_lora(small_config_dir: Path, capsys) -> None:
    from fitwhisper.memory.predict import MemoryRequest, predict_memory

    request = dict(model=str(small_config_dir), precision="bf16", max_label_tokens=16)
    lora = predict_memory(MemoryRequest(**request, training_method="lora"))
    dora = predict_memory(MemoryRequest(**request, training_method="dora"))
    # One magnitude per output of each adapted layer is trained beside the LoRA factors,
    # and DoRA's weight norm holds a full-size product of each layer while it runs.
    assert dora.trainable_params > lora.trainable_params
    assert dora.peak_tensor_bytes > lora.peak_tensor_bytes
    assert dora.request.method == "DoRA"
    argv = ["plan", "--model", str(small_config_dir), "--method", "dora", "--gpu", "A100"]
    assert main([*argv, "--gpu_memory", "8GiB", "--max_label_tokens", "16"]) == 0
    assert "DoRA" in capsys.readouterr().out
