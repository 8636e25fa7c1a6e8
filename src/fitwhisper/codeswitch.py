"""Language tokens for code-switched data (Mandarin-English): which token, if any, prompts
each row's transcript, in training labels and in generation alike.

- ``per_row`` (default): a row's own language column, else ``--language``;
- ``fixed``: ``--language`` for every training row, whatever its column says: a
  Mandarin-English row is learnt as zh, as Breeze-ASR-25 was trained;
- ``none``: no language token at all: labels and generation start
  ``<|startoftranscript|><|transcribe|><|notimestamps|>``, so the model is never told (and
  never has to guess) one language for a mixed sentence.

Rehearsal and regression rows (guard.py) keep their own languages under every strategy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

LANGUAGE_TOKEN_STRATEGIES = ("per_row", "fixed", "none")


def rows_for_strategy(rows: Sequence, strategy: str) -> list:
    """Rows whose `language` is what SpeechDataset should prompt with: their own for
    per_row; cleared for fixed and none (the dataset's language then decides)."""
    if strategy == "per_row":
        return list(rows)
    return [dataclasses.replace(r, language=None) if r.language else r for r in rows]


def dataset_language(strategy: str, language: str | None) -> str | None:
    """The dataset-wide language token: --language, or None (no token) for none."""
    return None if strategy == "none" else language


def configure_no_language_token(model, task: str) -> None:
    """Make generation prompt `<|startoftranscript|><|task|><|notimestamps|>`.

    transformers detects a language whenever `language` is unset on a multilingual model;
    only a prompt given as `forced_decoder_ids` whose position 1 is filled skips that
    (WhisperGenerationMixin._retrieve_init_tokens), so the prompt is given that way.
    """
    gen = model.generation_config
    if not getattr(gen, "is_multilingual", False):
        return
    gen.language = gen.task = None
    gen.forced_decoder_ids = [[1, gen.task_to_id[task]], [2, gen.no_timestamps_token_id]]


def untrained_language_ids(tokenizer, rows: Sequence, language: str | None) -> frozenset[int]:
    """The language token a run gives the decoder but takes no loss on: the one language
    every training row is prompted with (after `rows_for_strategy`), else none.

    Trained on one language, the loss at that token teaches only "always this language":
    offline/base fine-tuned on Mandarin with it named 65.6% of unseen English clips
    English, without it 87.7%, the original 91.4% (bench/RESULTS-quality.md), and
    `transcribe` without `--language` obeys what the model names. The token stays in the
    decoder's input, so the language is still prompted as in generation. Rows in several
    languages (rehearsal mixed in) keep their loss there: they teach identification.
    """
    from fitwhisper.whisper_facts import is_multilingual, language_code

    if not is_multilingual(tokenizer):
        return frozenset()
    spoken = {(r.language or language) and language_code(r.language or language) for r in rows}
    if len(spoken) != 1 or None in spoken:
        return frozenset()
    token = f"<|{spoken.pop()}|>"
    found = tokenizer.convert_tokens_to_ids(token)
    return frozenset() if found in (None, tokenizer.unk_token_id) else frozenset({found})
