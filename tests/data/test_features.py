"""Features and labels made per item, padded into batches the way Whisper trains."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fitwhisper.data.features import (
    SpeechDataset,
    WhisperCollator,
    is_multilingual,
    label_ids,
    prefix_ids,
)
from fitwhisper.data.manifest import load_manifest
from fitwhisper.errors import DataError

SOT_EN, NOTIMESTAMPS_EN, EOT_EN = 50257, 50362, 50256
SOT, ZH, EN, TRANSCRIBE, TRANSLATE, NOTIMESTAMPS = 50258, 50260, 50259, 50359, 50358, 50363


@pytest.fixture
def rows(tmp_path, audio):
    audio.write_clip(tmp_path / "a.wav", seconds=1.0, seed=0)
    audio.write_clip(tmp_path / "b.flac", seconds=2.5, sr=8000, seed=1)
    records = [
        {"audio_path": "a.wav", "text": "hello world"},
        {"audio_path": "b.flac", "text": "你好", "language": "zh"},
    ]
    (tmp_path / "m.json").write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    return load_manifest(tmp_path / "m.json").rows


def test_items_are_30s_log_mel_and_labels(rows, en_processor):
    ds = SpeechDataset(rows, en_processor, language="en")

    item = ds[0]

    assert item["input_features"].shape == (80, 3000) and item["input_features"].dtype == np.float32
    tok = en_processor.tokenizer
    # English-only: no language or task token, even when a language is given.
    assert item["labels"][:2] == [SOT_EN, NOTIMESTAMPS_EN] and item["labels"][-1] == EOT_EN
    assert tok.decode(item["labels"], skip_special_tokens=True) == "hello world"
    assert not is_multilingual(tok)
    assert ds[1]["labels"][:2] == [SOT_EN, NOTIMESTAMPS_EN]  # the row's "zh" is ignored too


def test_row_language_wins_on_multilingual_models(multilingual_tokenizer):
    tok = multilingual_tokenizer
    assert is_multilingual(tok)
    assert prefix_ids(tok, "zh", "transcribe") == [SOT, ZH, TRANSCRIBE, NOTIMESTAMPS]
    assert prefix_ids(tok, "english", "translate") == [SOT, EN, TRANSLATE, NOTIMESTAMPS]
    assert tok.language is None  # the shared tokenizer is left as it was
    ids = label_ids(tok, "你好", "zh", "transcribe")
    assert ids[:4] == [SOT, ZH, TRANSCRIBE, NOTIMESTAMPS] and ids[-1] == tok.eos_token_id
    with pytest.raises(DataError, match="language 'klingon' is not one Whisper knows"):
        prefix_ids(tok, "klingon", "transcribe")


def test_dataset_uses_row_language_over_dataset_language(rows, multilingual_tokenizer):
    from transformers import WhisperFeatureExtractor, WhisperProcessor

    processor = WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(), tokenizer=multilingual_tokenizer
    )
    ds = SpeechDataset(rows, processor, language="en", task="transcribe")

    assert ds[0]["labels"][:2] == [SOT, EN]  # no row language: the dataset's
    assert ds[1]["labels"][:2] == [SOT, ZH]  # the row's own


def test_collator_pads_labels_with_minus_100_and_drops_sot(rows, en_processor):
    ds = SpeechDataset(rows, en_processor)
    collate = WhisperCollator(en_processor, decoder_start_token_id=SOT_EN)

    batch = collate([ds[0], ds[1]])

    assert batch["input_features"].shape == (2, 80, 3000)
    assert batch["input_features"].dtype == torch.float32
    long_, short = sorted([ds[0]["labels"], ds[1]["labels"]], key=len, reverse=True)
    labels = batch["labels"]
    assert labels.shape == (2, len(long_) - 1)
    assert labels[0, 0].item() == NOTIMESTAMPS_EN  # <|startoftranscript|> stripped
    padded_row = 0 if len(ds[0]["labels"]) < len(ds[1]["labels"]) else 1
    n_pad = len(long_) - len(short)
    assert labels[padded_row, -n_pad:].tolist() == [-100] * n_pad
