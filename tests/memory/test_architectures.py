"""Shipped Whisper architectures: parameter counts and agreement with real configs."""

from __future__ import annotations

import pytest
import torch

from fitwhisper.memory.architectures import ARCHITECTURES, whisper_config
from fitwhisper.models.resolve import KNOWN_MODELS

# OpenAI's published sizes, in millions (rounded, as the Whisper README lists them).
PUBLISHED_M = {
    "openai/whisper-tiny": 39,
    "openai/whisper-base": 74,
    "openai/whisper-small": 244,
    "openai/whisper-medium": 769,
    "openai/whisper-large-v2": 1550,
    "openai/whisper-large-v3": 1550,
    "openai/whisper-large-v3-turbo": 809,
}


def _n_params(model_id: str) -> int:
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(whisper_config(model_id))
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


def test_every_known_model_ships_an_architecture():
    assert {m.hub_id for m in KNOWN_MODELS} <= set(ARCHITECTURES)


@pytest.mark.parametrize("model_id", sorted(ARCHITECTURES))
def test_parameter_counts_match_the_hub_checkpoints(model_id):
    known = {m.hub_id: m.params_m for m in KNOWN_MODELS}
    known["openai/whisper-large"] = known["openai/whisper-large-v2"]  # the same shape
    assert _n_params(model_id) / 1e6 == pytest.approx(known[model_id], abs=0.1)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_M))
def test_parameter_counts_match_the_published_sizes(model_id):
    # OpenAI rounds and counts slightly differently (3% for tiny); the shape must agree.
    assert _n_params(model_id) / 1e6 == pytest.approx(PUBLISHED_M[model_id], rel=0.035)


def test_large_v3_family_has_128_mels_and_turbo_4_decoder_layers():
    v3, turbo, breeze = (
        whisper_config(m)
        for m in (
            "openai/whisper-large-v3",
            "openai/whisper-large-v3-turbo",
            "MediaTek-Research/Breeze-ASR-25",
        )
    )
    assert (v3.num_mel_bins, v3.vocab_size, v3.decoder_layers) == (128, 51866, 32)
    assert (turbo.num_mel_bins, turbo.decoder_layers, turbo.encoder_layers) == (128, 4, 32)
    assert (breeze.num_mel_bins, breeze.vocab_size, breeze.d_model) == (80, 51865, 1280)


def test_a_folder_is_read_from_its_config(small_config_dir):
    cfg = whisper_config(str(small_config_dir))
    assert (cfg.d_model, cfg.encoder_layers) == (64, 2)


ARCH_FIELDS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "vocab_size",
    "num_mel_bins",
    "max_source_positions",
    "max_target_positions",
    "decoder_start_token_id",
    "eos_token_id",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("offline", "hub_id"),
    [("offline/tiny.en", "openai/whisper-tiny.en"), ("offline/base", "openai/whisper-base")],
)
def test_shipped_config_matches_the_real_weights_config(offline, hub_id):
    real, shipped = whisper_config(offline), whisper_config(hub_id)
    assert {f: getattr(shipped, f) for f in ARCH_FIELDS} == {
        f: getattr(real, f) for f in ARCH_FIELDS
    }
