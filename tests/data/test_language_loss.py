"""No loss on the language token of a monolingual run (codeswitch.untrained_language_ids,
WhisperCollator): the decoder is still given the token, as generation gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.codeswitch import untrained_language_ids
from fitwhisper.data.features import WhisperCollator, label_ids
from fitwhisper.data.manifest import Row


@pytest.fixture(scope="module")
def processor(tiny_multilingual_dir: Path):
    from transformers import WhisperProcessor

    return WhisperProcessor.from_pretrained(tiny_multilingual_dir)


def _rows(languages: list[str | None]) -> list[Row]:
    return [Row(index=i, line=i + 1, audio=None, text="x", language=lang)
            for i, lang in enumerate(languages)]  # fmt: skip


def test_one_language_in_every_row_is_left_untrained_and_several_are_kept(processor) -> None:
    tok = processor.tokenizer
    zh = tok.convert_tokens_to_ids("<|zh|>")
    # Rows without their own language take the run's, in any spelling.
    assert untrained_language_ids(tok, _rows([None, "zh"]), "chinese") == {zh}
    assert untrained_language_ids(tok, _rows(["zh", "zh"]), None) == {zh}
    # Several languages (rehearsal mixed in) teach identification: trained.
    assert untrained_language_ids(tok, _rows(["zh", "en"]), "zh") == frozenset()
    # No language token at all (--language_token none, or none known).
    assert untrained_language_ids(tok, _rows([None, None]), None) == frozenset()


def test_an_english_only_model_has_no_language_token(tiny_en_processor) -> None:
    tok = tiny_en_processor.tokenizer
    assert untrained_language_ids(tok, _rows(["en"]), "en") == frozenset()


def test_the_token_is_in_the_decoder_input_and_not_in_the_loss(processor) -> None:
    import numpy as np

    tok = processor.tokenizer
    zh = tok.convert_tokens_to_ids("<|zh|>")
    start = tok.convert_tokens_to_ids("<|startoftranscript|>")
    feats = np.zeros((80, 3000), dtype=np.float32)
    items = [
        {"input_features": feats, "labels": label_ids(tok, text, "zh", "transcribe")}
        for text in ("你好", "世界很大")
    ]
    plain = WhisperCollator(processor, start)(items)
    batch = WhisperCollator(processor, start, frozenset({zh}))(items)

    assert "decoder_input_ids" not in plain and plain["labels"][:, 0].tolist() == [zh, zh]
    inputs, labels = batch["decoder_input_ids"], batch["labels"]
    assert inputs[:, :2].tolist() == [[start, zh], [start, zh]]  # prompted as generation is
    assert labels[:, 0].tolist() == [-100, -100]  # no loss on naming the language
    # Everything after it is trained exactly as without the option.
    assert labels[:, 1:].tolist() == plain["labels"][:, 1:].tolist()
    # The model's own shift of the plain labels gives the same decoder input.
    from transformers.models.whisper.modeling_whisper import shift_tokens_right

    shifted = shift_tokens_right(plain["labels"], tok.eos_token_id, start)
    real = plain["labels"] != -100
    assert inputs[:, : real.shape[1]][real].tolist() == shifted[real].tolist()


def test_a_run_trains_with_it_unless_its_encoder_outputs_are_cached(processor) -> None:
    from types import SimpleNamespace

    from fitwhisper.train.setup import _training_collator

    tok = processor.tokenizer
    evaluation = WhisperCollator(processor, tok.convert_tokens_to_ids("<|startoftranscript|>"))
    rows = _rows([None, None])
    training = _training_collator(
        evaluation, rows, "zh", SimpleNamespace(cache_encoder_outputs=False)
    )
    assert training.untrained_ids == {tok.convert_tokens_to_ids("<|zh|>")}
    assert evaluation.untrained_ids == frozenset()  # held-out scoring unchanged
    # The cache keeps labels alone (no decoder input to give): trained as before.
    cached = SimpleNamespace(cache_encoder_outputs=True)
    assert _training_collator(evaluation, rows, "zh", cached) is evaluation
    # Two languages: the same collator.
    both = _rows(["zh", "en"])
    assert (
        _training_collator(evaluation, both, "zh", SimpleNamespace(cache_encoder_outputs=False))
        is evaluation
    )
