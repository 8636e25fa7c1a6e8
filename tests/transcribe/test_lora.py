"""A LoRA adapter folder transcribes unmerged (base + PeftModel) with the text of its merged
model."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory: pytest.TempPathFactory, tiny_multilingual_dir: Path) -> Path:
    """A LoRA adapter on the tiny multilingual Whisper with random, nonzero B matrices, so
    it changes what the model writes (a freshly initialised adapter would not)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(1)
    base = WhisperForConditionalGeneration.from_pretrained(tiny_multilingual_dir)
    cfg = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "fc1"], init_lora_weights=False
    )
    with warnings.catch_warnings():
        # peft reads `is_gradient_checkpointing`, deprecated in transformers 5.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        model = get_peft_model(base, cfg)
    out = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(out)
    return out


def _texts(spec: str | Path, clips: list[Path]) -> tuple[list[str], object]:
    from fitwhisper.data.audio import load_audio
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    # A random model writes until the token limit: keep that short. Tones are not speech:
    # without --no_vad nothing would be decoded.
    opts = TranscribeOptions(
        language="zh", timestamps="none", temperature_fallback=False, max_new_tokens=24, vad=False
    )
    engine = TransformersEngine(str(spec), opts, "cpu")
    ts = engine.transcribe([str(c) for c in clips], [load_audio(c) for c in clips])
    return [t.text for t in ts], engine.model


def test_adapter_transcribes_unmerged_with_its_merged_models_text(
    adapter_dir: Path, tiny_multilingual_dir: Path, tmp_path: Path, make_tone
) -> None:
    from peft import PeftModel

    from fitwhisper.models.merge import merge_adapter

    clips = [make_tone(tmp_path / f"c{i}.wav", 1.0 + i, freq=250 + 120 * i) for i in range(3)]
    adapter_texts, adapter_model = _texts(adapter_dir, clips)
    assert isinstance(adapter_model, PeftModel)  # run as base + adapter, not merged

    merged = merge_adapter(adapter_dir, tmp_path / "merged").out
    merged_texts, merged_model = _texts(merged, clips)
    assert not isinstance(merged_model, PeftModel)
    assert adapter_texts == merged_texts

    base_texts, _ = _texts(tiny_multilingual_dir, clips)
    assert base_texts != adapter_texts  # the adapter is in effect
