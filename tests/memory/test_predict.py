"""The memory predictor on a small Whisper: exact static bytes, traced activations, anchors."""

from __future__ import annotations

import json

import pytest
import torch

from fitwhisper.errors import ConfigError
from fitwhisper.memory.predict import GIB, MemoryRequest, predict_memory


def _request(folder, **kw) -> MemoryRequest:
    base = {"per_device_train_batch_size": 2, "max_label_tokens": 32, "device": "cpu"}
    return MemoryRequest(model=str(folder), **{**base, **kw})


def _counts(small_dims: dict) -> tuple[int, int]:
    d, v, ffn = small_dims["d_model"], small_dims["vocab_size"], small_dims["encoder_ffn_dim"]
    attn = 3 * d * d + 2 * d + d * d + d  # q, k (no bias), v, out
    ln = 2 * d
    ffn_p = d * ffn + ffn + ffn * d + d
    enc_layer = attn + ffn_p + 2 * ln
    dec_layer = 2 * attn + ffn_p + 3 * ln
    conv = 80 * d * 3 + d + d * d * 3 + d
    enc_pos = 1500 * d
    encoder = conv + enc_pos + 2 * enc_layer + ln
    decoder = v * d + 448 * d + 2 * dec_layer + ln
    return encoder, decoder


def test_full_fine_tuning_bytes_are_exact(small_config_dir, small_dims):
    p = predict_memory(_request(small_config_dir))
    encoder, decoder = _counts(small_dims)
    trainable = encoder + decoder - 1500 * small_dims["d_model"]  # the sinusoid table stays fixed
    assert p.params == encoder + decoder
    assert p.trainable_params == trainable
    assert p.weights_bytes == 4 * (encoder + decoder)
    assert p.gradients_bytes == 4 * trainable
    assert p.optimizer_bytes == 8 * trainable  # AdamW: exp_avg + exp_avg_sq, fp32


def test_frozen_encoder_trains_the_decoder_only(small_config_dir, small_dims):
    _, decoder = _counts(small_dims)
    p = predict_memory(_request(small_config_dir, freeze_encoder=True))
    assert p.trainable_params == decoder
    assert p.gradients_bytes == 4 * decoder


def test_lora_trains_the_adapters_only(small_config_dir, small_dims):
    r, d = 8, small_dims["d_model"]
    p = predict_memory(_request(small_config_dir, training_method="lora", lora_r=r))
    adapted = 2 * 2 + 2 * 4  # q,v per encoder layer; self and cross q,v per decoder layer
    assert p.trainable_params == adapted * r * (d + d)
    assert p.optimizer_bytes == 8 * p.trainable_params
    encoder, decoder = _counts(small_dims)
    assert p.weights_bytes == 4 * (encoder + decoder + p.trainable_params)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_lora_under_mixed_precision_keeps_its_frozen_base_in_half(
    small_config_dir, small_dims, precision
):
    """train/method_loading.py loads a plain LoRA run's base in the run's half precision; the
    adapters, their gradients and optimizer states stay fp32."""
    encoder, decoder = _counts(small_dims)
    kw = {"training_method": "lora", "lora_r": 8, "device": "cuda"}
    fp32 = predict_memory(_request(small_config_dir, **kw))
    half = predict_memory(_request(small_config_dir, precision=precision, **kw))
    assert half.weights_bytes < fp32.weights_bytes * 0.55
    assert half.trainable_params == fp32.trainable_params
    assert half.gradients_bytes == fp32.gradients_bytes
    assert half.optimizer_bytes == fp32.optimizer_bytes
    # Full fine-tuning keeps fp32 master weights under mixed precision.
    full = predict_memory(_request(small_config_dir, precision=precision, device="cuda"))
    assert full.weights_bytes >= 4 * (encoder + decoder)


def test_quantised_base_weights(small_config_dir, small_dims):
    encoder, decoder = _counts(small_dims)
    d, ffn = small_dims["d_model"], small_dims["encoder_ffn_dim"]
    # Linear weights bitsandbytes replaces: q,k,v,out (x1 enc, x2 dec) and fc1, fc2 per layer
    linear = 2 * (4 * d * d + 2 * d * ffn) + 2 * (8 * d * d + 2 * d * ffn)
    rows = 2 * (4 * d + ffn + d) + 2 * (8 * d + ffn + d)
    full = predict_memory(_request(small_config_dir, training_method="lora", lora_r=8))
    int8 = predict_memory(_request(small_config_dir, training_method="8bit", lora_r=8))
    nf4 = predict_memory(_request(small_config_dir, training_method="4bit", lora_r=8))
    assert full.weights_bytes - int8.weights_bytes == 4 * linear - (linear + 4 * rows)
    assert full.weights_bytes - nf4.weights_bytes == 4 * linear - (linear // 2 + linear // 16)
    assert int8.trainable_params == nf4.trainable_params == full.trainable_params


@pytest.mark.parametrize("optim", ["adamw_torch", "adafactor"])
def test_optimizer_states_match_a_real_optimizer(small_config_dir, optim):
    from transformers import WhisperForConditionalGeneration
    from transformers.optimization import Adafactor

    from fitwhisper.memory.architectures import whisper_config

    model = WhisperForConditionalGeneration(whisper_config(str(small_config_dir)))
    model.model.encoder.embed_positions.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = (
        torch.optim.AdamW(params)
        if optim == "adamw_torch"
        else Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False)
    )
    for p in params:
        p.grad = torch.zeros_like(p)
    opt.step()
    real = sum(
        t.numel() * t.element_size()
        for s in opt.state.values()
        for t in s.values()
        if isinstance(t, torch.Tensor) and t.dim() > 0  # step counters: 0-d, on the CPU
    )
    assert predict_memory(_request(small_config_dir, optim=optim)).optimizer_bytes == real


def test_activations_grow_with_batch_and_shrink_with_checkpointing(small_config_dir):
    b1, b4 = (
        predict_memory(_request(small_config_dir, per_device_train_batch_size=b)) for b in (1, 4)
    )
    ckpt = predict_memory(
        _request(small_config_dir, per_device_train_batch_size=4, gradient_checkpointing=True)
    )
    assert b4.activations_bytes > 3 * b1.activations_bytes
    assert ckpt.activations_bytes < b4.activations_bytes
    assert ckpt.weights_bytes == b4.weights_bytes


def test_eager_attention_stores_attention_matrices(small_config_dir):
    sdpa = predict_memory(_request(small_config_dir))
    eager = predict_memory(_request(small_config_dir, attn_implementation="eager"))
    # 2 encoder layers x 4 heads x 1500^2 fp32 probabilities per clip, at least
    assert eager.activations_bytes - sdpa.activations_bytes > 2 * 2 * 4 * 1500**2 * 4


def test_mixed_precision_plans_for_cuda(small_config_dir):
    fp32 = predict_memory(_request(small_config_dir, device="cuda"))
    fp16 = predict_memory(_request(small_config_dir, device="cuda", precision="fp16"))
    assert fp16.weights_bytes == fp32.weights_bytes  # fp32 master weights
    assert fp16.activations_bytes < fp32.activations_bytes
    assert fp16.cuda_context_bytes > 0 and fp16.allocator_slack_bytes > 0
    assert fp16.total_bytes == (
        fp16.peak_tensor_bytes + fp16.cuda_context_bytes + fp16.allocator_slack_bytes
    )


def test_breakdown_adds_up_and_serialises(small_config_dir):
    p = predict_memory(_request(small_config_dir))
    parts = (
        p.weights_bytes
        + p.gradients_bytes
        + p.optimizer_bytes
        + p.activations_bytes
        + p.optimizer_step_bytes
    )
    assert p.overlap_bytes <= 0
    assert parts + p.overlap_bytes == p.peak_tensor_bytes
    d = json.loads(p.to_json())
    assert d["peak_tensor_bytes"] == p.peak_tensor_bytes and d["method"] == "full"


def test_predictions_are_cached(small_config_dir):
    req = _request(small_config_dir, per_device_train_batch_size=3)
    assert predict_memory(req) is predict_memory(req)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"per_device_train_batch_size": 0}, "must be at least 1 (got 0)"),
        ({"max_label_tokens": 500}, "--max_label_tokens must be 1-448 (got 500)"),
    ],
)
def test_bad_options_are_user_errors(small_config_dir, kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        predict_memory(_request(small_config_dir, **kw))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layers", "kw"),
    [
        ((6, 5), {}),
        ((6, 5), {"precision": "fp16", "gradient_checkpointing": True}),  # peak in the step
        ((6, 5), {"precision": "fp16", "gradient_checkpointing": True, "training_method": "lora"}),
        ((6, 5), {"attn_implementation": "eager", "freeze_encoder": True}),
        ((2, 5), {"precision": "bf16"}),  # one stack traced whole, one expanded
    ],
)
def test_layer_expansion_matches_tracing_every_layer(config_dir_factory, layers, kw):
    """Tracing 3 layers per stack and replaying the middle one equals tracing all of them."""
    from dataclasses import replace

    from fitwhisper.memory import predict as P
    from fitwhisper.memory.architectures import whisper_config

    folder = config_dir_factory(encoder_layers=layers[0], decoder_layers=layers[1])
    req = replace(_request(folder, device="cuda"), **kw)
    config = whisper_config(str(folder))
    config._attn_implementation = req.attn_implementation
    static = P._static_bytes(P._build_meta(config, req), req, cuda=True)
    fast = P._traced_peaks(config, req, static, 3000, cuda=True, expand=True)
    every = P._traced_peaks(config, req, static, 3000, cuda=True, expand=False)
    assert fast.peak_phase == every.peak_phase
    assert fast.peak_bytes == pytest.approx(every.peak_bytes, rel=1e-3)
    assert fast.activation_bytes == pytest.approx(every.activation_bytes, rel=1e-3)


# --- published anchors -------------------------------------------------------------------

T4_BYTES = 15 * GIB  # a "16 GB" T4 offers 15360 MiB


@pytest.mark.slow
def test_large_v3_full_fp16_checkpointing_batch_2_is_near_32_gb():
    p = predict_memory(
        model="openai/whisper-large-v3",
        per_device_train_batch_size=2,
        precision="fp16",
        gradient_checkpointing=True,
        optim="adamw_torch",
    )
    assert p.total_bytes == pytest.approx(32e9, rel=0.25)


@pytest.mark.slow
def test_large_v2_full_does_not_fit_a_t4_but_8bit_lora_does():
    common = {
        "model": "openai/whisper-large-v2",
        "per_device_train_batch_size": 1,
        "precision": "fp16",
        "gradient_checkpointing": True,
    }
    assert predict_memory(**common).total_bytes > T4_BYTES
    assert predict_memory(**common, training_method="8bit").total_bytes < T4_BYTES
