"""Activation checkpointing under either transformers 5 name (5.17 has only the old one)."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
from transformers import Seq2SeqTrainingArguments, WhisperConfig, WhisperForConditionalGeneration

from fitwhisper.models import checkpointing


def _tiny() -> WhisperForConditionalGeneration:
    cfg = WhisperConfig(
        vocab_size=100,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_source_positions=8,
        max_target_positions=8,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
        decoder_start_token_id=1,
    )
    return WhisperForConditionalGeneration(cfg)


def test_trainer_gets_the_name_this_transformers_has_without_a_warning(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the deprecated name would warn
        args = Seq2SeqTrainingArguments(
            output_dir=str(tmp_path), report_to="none", use_cpu=True,
            **checkpointing.training_argument(True),
        )  # fmt: skip
    assert checkpointing.is_on(args)


def test_an_older_transformers_gets_the_old_keyword(monkeypatch):
    monkeypatch.setattr(checkpointing, "_new_names", lambda: False)
    assert checkpointing.training_argument(True) == {"gradient_checkpointing": True}
    assert checkpointing.is_on(SimpleNamespace(gradient_checkpointing=True))
    assert not checkpointing.is_on(SimpleNamespace(gradient_checkpointing=False))
    assert not checkpointing.is_on(None)


@pytest.mark.parametrize("new_names", [True, False])
def test_enable_and_disable_on_either_model_api(new_names):
    model = _tiny()
    if not new_names:  # a model as transformers 5.17 builds it: the old methods only
        model = SimpleNamespace(
            gradient_checkpointing_enable=model.gradient_checkpointing_enable,
            gradient_checkpointing_disable=model.gradient_checkpointing_disable,
            inner=model,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # 5.23's old name, reached on purpose
        checkpointing.enable(model)
        inner = model if new_names else model.inner
        assert inner.is_gradient_checkpointing
        checkpointing.disable(model)
        assert not inner.is_gradient_checkpointing
