"""Language identification (evaluate/language_id.py): each clip's expected language beside
the one the model detects by Whisper's rule, what the forgetting guard reports before and
after a fine-tune."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import write_tone

from fitwhisper.data.manifest import Row
from fitwhisper.evaluate.language_id import LanguageId, identify


def _rows(tmp_path: Path, languages: list[str | None]) -> list[Row]:
    return [
        Row(
            index=i,
            line=i + 1,
            audio=write_tone(tmp_path / f"{i}.wav", 1.0 + 0.1 * i, freq=300.0 + 40 * i),
            text="x",
            language=language,
            id=f"clip{i}",
        )
        for i, language in enumerate(languages)
    ]


def _load(folder: Path):
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    return (
        WhisperForConditionalGeneration.from_pretrained(folder),
        WhisperProcessor.from_pretrained(folder),
    )


def test_each_clip_is_named_by_the_model_and_scored_against_its_own_language(
    tiny_multilingual_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    model, processor = _load(tiny_multilingual_dir)
    rows = _rows(tmp_path, ["en", "zh", None, "english"])
    lang_to_id = model.generation_config.lang_to_id
    seen = []

    def detect(input_features):
        # Whisper's encoder takes 30 s windows, whatever the clip's length.
        seen.append((tuple(input_features.shape), model.training))
        return torch.tensor([lang_to_id[t] for t in ("<|en|>", "<|en|>", "<|zh|>", "<|ja|>")])

    monkeypatch.setattr(model, "detect_language", detect)
    model.train()
    found = identify(model, processor, rows, language="chinese")

    # A row's own language wins; a row without one takes the run's (any spelling -> code).
    assert found.expected == ("en", "zh", "zh", "en")
    assert found.detected == ("en", "en", "zh", "ja")
    assert (found.correct, found.share) == (2, 0.5)
    assert found.as_dict() == {
        "share": 0.5,
        "correct": 2,
        "clips": 4,
        "detected": {"en": 2, "zh": 1, "ja": 1},
    }
    assert seen == [((4, 80, 3000), False)]  # one batch, detected with dropout off
    assert model.training  # and the model is left as it was found


def test_a_real_detection_names_a_language_of_the_model_for_every_clip(
    tiny_multilingual_dir: Path, tmp_path: Path
) -> None:
    model, processor = _load(tiny_multilingual_dir)
    rows = _rows(tmp_path, ["en", "zh", "de"])
    first = identify(model, processor, rows, language=None)
    codes = {t.strip("<|>") for t in model.generation_config.lang_to_id}
    assert first.expected == ("en", "zh", "de")
    assert set(first.detected) <= codes
    assert identify(model, processor, rows, language=None) == first  # no dropout, no chance


def test_nothing_is_measured_for_an_english_only_model_or_rows_without_a_language(
    tiny_whisper_dir: Path, tiny_multilingual_dir: Path, tmp_path: Path
) -> None:
    english_only, processor = _load(tiny_whisper_dir)
    assert identify(english_only, processor, _rows(tmp_path, ["en"]), language="en") is None
    model, processor = _load(tiny_multilingual_dir)
    assert identify(model, processor, _rows(tmp_path, [None, None]), language=None) is None


def test_an_empty_measurement_has_no_share() -> None:
    assert LanguageId((), ()).share == 0.0
