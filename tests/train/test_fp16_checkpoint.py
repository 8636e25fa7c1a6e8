"""A checkpoint stored in fp16 (openai/whisper-large-v3 and -turbo publish one) trains in
fp32 master weights and generates: transformers 5 loads dtype="auto", so without an
explicit dtype the model came up in fp16 and generation failed at the encoder's first
convolution ("Input type (float) and bias type (c10::Half) should be the same")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitwhisper.cli import main


@pytest.fixture
def fp16_whisper_dir(tiny_whisper_dir: Path, tmp_path: Path) -> Path:
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    out = tmp_path / "fp16-model"
    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    model.to(torch.float16).save_pretrained(out)
    WhisperProcessor.from_pretrained(tiny_whisper_dir).save_pretrained(out)
    assert json.loads((out / "config.json").read_text())["dtype"] == "float16"
    return out


def test_fp16_stored_model_trains_in_fp32_and_scores_by_generation(
    fp16_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import WhisperForConditionalGeneration

    run = tmp_path / "run"
    argv = [
        "train", "--model", str(fp16_whisper_dir), "--train_manifest", str(tone_manifest),
        "--eval_manifest", str(tone_manifest), "--output_dir", str(run), "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--generation_max_length", "8",
        "--learning_rate", "1e-3", "--report_to", "none", "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    assert (run / "eval").is_dir()  # the final model was scored by generation
    final = WhisperForConditionalGeneration.from_pretrained(run / "final")
    assert {p.dtype for p in final.parameters()} == {torch.float32}
    # And `evaluate` scores the fp16-stored model itself. 8 tokens, as in training: the
    # random model never ends a transcript, and its default 225 took minutes on 2 cores.
    scored = tmp_path / "scored"
    argv = ["evaluate", str(fp16_whisper_dir), str(tone_manifest), "--batch_size", "2"]
    code = main([*argv, "--generation_max_length", "8", "--output_dir", str(scored)])
    assert code == 0
