"""DoRA (`--method dora`, PEFT's use_dora): one entry in the method registry, and it
trains, saves an adapter, merges into an equal model and exports as LoRA does (its memory
plan: tests/memory/test_dora_memory.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tests.train.test_methods import LOGITS_ATOL, _logits

from fitwhisper.cli import main


def test_dora_trains_merges_and_exports(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.data.audio import load_audio
    from fitwhisper.models.resolve import load_model, load_processor

    out = tmp_path / "run"
    argv = [
        "train", "--model", str(tiny_whisper_dir), "--method", "dora",
        "--train_manifest", str(tone_manifest), "--output_dir", str(out),
        "--max_train_samples", "2", "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-2", "--max_steps", "2", "--report_to", "none", "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    final = out / "final"
    adapter = json.loads((final / "adapter_config.json").read_text())
    assert adapter["use_dora"] is True and adapter["r"] == 16
    plan = json.loads((out / "run_plan.json").read_text())
    assert "--method dora" in json.dumps(plan)
    card = (final / "README.md").read_text()
    assert "(DoRA)" in card and "| `--method` | `dora` |" in card

    # The trained magnitudes moved away from the base weights' norms, so the adapter is
    # not a no-op, and the merged model computes what the adapter model computes.
    adapted = load_model(final)
    magnitudes = [p for n, p in adapted.named_parameters() if "lora_magnitude_vector" in n]
    assert magnitudes
    merged_dir = tmp_path / "merged"
    assert main(["merge", str(out), str(merged_dir), "-q"]) == 0
    merged = WhisperForConditionalGeneration.from_pretrained(merged_dir)
    processor = load_processor(final)
    clip = next((tone_manifest.parent / "clips").glob("*.wav"))
    features = processor.feature_extractor(
        load_audio(clip), sampling_rate=16_000, return_tensors="pt"
    )["input_features"]
    ids = torch.tensor([[merged.config.decoder_start_token_id, 50362, 440, 1115]])
    want = _logits(adapted, features, ids)
    assert torch.allclose(_logits(merged, features, ids), want, atol=LOGITS_ATOL, rtol=0)
    base = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    assert not torch.allclose(_logits(base, features, ids), want, atol=LOGITS_ATOL, rtol=0)

    # The run folder exports as a LoRA run does (merged first, then written).
    exported = tmp_path / "exported"
    assert main(["export", str(out), str(exported), "--format", "ct2", "-q"]) == 0
    assert (exported / "model.bin").is_file()  # one format: written into OUT itself
