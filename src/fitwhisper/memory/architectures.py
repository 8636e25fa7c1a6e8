"""Whisper architectures shipped with fitwhisper, so memory planning needs no download.

`whisper_config("openai/whisper-large-v3")` builds a `WhisperConfig` from the table below;
any other model spec (a folder, a run, offline/base, a Hub id already in the cache) is read
from its config.json without loading weights.
"""

from __future__ import annotations

from typing import Any

from fitwhisper.whisper_facts import ENCODER_POSITIONS

# name -> (d_model, encoder layers, decoder layers, attention heads, ffn dim)
_SIZES: dict[str, tuple[int, int, int, int, int]] = {
    "tiny": (384, 4, 4, 6, 1536),
    "base": (512, 6, 6, 8, 2048),
    "small": (768, 12, 12, 12, 3072),
    "medium": (1024, 24, 24, 16, 4096),
    "large": (1280, 32, 32, 20, 5120),
    "turbo": (1280, 32, 4, 20, 5120),  # large-v3 encoder, 4 decoder layers
}

# Token ids differ between the English-only (51864 tokens) and multilingual vocabularies;
# large-v3 and turbo add one language token (51866).
_EN_IDS = {
    "bos_token_id": 50257,
    "eos_token_id": 50256,
    "pad_token_id": 50256,
    "decoder_start_token_id": 50257,
}
_MULTI_IDS = {
    "bos_token_id": 50257,
    "eos_token_id": 50257,
    "pad_token_id": 50257,
    "decoder_start_token_id": 50258,
}


def _arch(size: str, vocab_size: int, num_mel_bins: int = 80) -> dict[str, Any]:
    d_model, enc, dec, heads, ffn = _SIZES[size]
    return {
        "d_model": d_model,
        "encoder_layers": enc,
        "decoder_layers": dec,
        "encoder_attention_heads": heads,
        "decoder_attention_heads": heads,
        "encoder_ffn_dim": ffn,
        "decoder_ffn_dim": ffn,
        "vocab_size": vocab_size,
        "num_mel_bins": num_mel_bins,
        "max_source_positions": ENCODER_POSITIONS,
        "max_target_positions": 448,
        **(_EN_IDS if vocab_size == 51864 else _MULTI_IDS),
    }


ARCHITECTURES: dict[str, dict[str, Any]] = {
    "openai/whisper-tiny.en": _arch("tiny", 51864),
    "openai/whisper-tiny": _arch("tiny", 51865),
    "openai/whisper-base.en": _arch("base", 51864),
    "openai/whisper-base": _arch("base", 51865),
    "openai/whisper-small.en": _arch("small", 51864),
    "openai/whisper-small": _arch("small", 51865),
    "openai/whisper-medium.en": _arch("medium", 51864),
    "openai/whisper-medium": _arch("medium", 51865),
    "openai/whisper-large": _arch("large", 51865),
    "openai/whisper-large-v2": _arch("large", 51865),
    "openai/whisper-large-v3": _arch("large", 51866, num_mel_bins=128),
    "openai/whisper-large-v3-turbo": _arch("turbo", 51866, num_mel_bins=128),
    # Whisper large-v2 fine-tuned for Taiwanese Mandarin and code-switching.
    "MediaTek-Research/Breeze-ASR-25": _arch("large", 51865),
}


# The models the planner's tables list (`fitwhisper doctor`, the presets): the standard
# sizes (multilingual), turbo and Breeze-ASR-25.
TABLE_MODELS: tuple[str, ...] = (
    "openai/whisper-tiny",
    "openai/whisper-base",
    "openai/whisper-small",
    "openai/whisper-medium",
    "openai/whisper-large-v3",
    "openai/whisper-large-v3-turbo",
    "MediaTek-Research/Breeze-ASR-25",
)


def whisper_config(model: str):
    """The `WhisperConfig` of a model spec: shipped for the standard sizes, else config.json.

    Raises:
        ModelLoadError: the spec cannot be resolved, or names no Whisper model.
    """
    from transformers import WhisperConfig

    if model in ARCHITECTURES:
        return WhisperConfig(**ARCHITECTURES[model])
    from fitwhisper.models.resolve import _from_pretrained, resolve_model

    return _from_pretrained(WhisperConfig, resolve_model(model))
