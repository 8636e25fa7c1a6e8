"""Language identification: how often a model detects the language each clip is spoken in.

A fine-tune on one language can teach Whisper to name that language for everything it
hears (Whisper-Finetune #88), and `fitwhisper transcribe` without `--language` obeys what
the model detects. The forgetting guard (train/regression.py) measures it on its regression
set before and after training, and the model card states both figures. Detection is
Whisper's own rule, transformers' `detect_language`: the most likely language token after
`<|startoftranscript|>` on the first 30 s, what `transcribe` does without `--language`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fitwhisper.whisper_facts import language_code

BATCH = 16  # clips per detection pass: one encoder pass and one decoder step each


@dataclass(frozen=True)
class LanguageId:
    """Each clip's expected language beside the one the model detected, in row order."""

    expected: tuple[str, ...]
    detected: tuple[str, ...]

    @property
    def correct(self) -> int:
        return sum(e == d for e, d in zip(self.expected, self.detected, strict=True))

    @property
    def share(self) -> float:
        return self.correct / len(self.expected) if self.expected else 0.0

    def as_dict(self) -> dict:
        return {
            "share": self.share,
            "correct": self.correct,
            "clips": len(self.expected),
            "detected": dict(Counter(self.detected).most_common()),
        }


def detects_language(model) -> bool:
    """Whether the model names languages at all (English-only models such as tiny.en do not)."""
    gen = model.generation_config
    return bool(getattr(gen, "is_multilingual", False) and getattr(gen, "lang_to_id", None))


def identify(model, processor, rows: Sequence, language: str | None) -> LanguageId | None:
    """Detect the language of each row that has one (its own `language`, else `language`).

    None when the model names no languages or no row's language is known. Rows are read
    as training reads them (offsets, segments, any audio source), 30 s at most each.
    """
    from fitwhisper.data.features import SpeechDataset

    if not detects_language(model):
        return None
    known = [(r, language_code(r.language or language)) for r in rows if r.language or language]
    if not known:
        return None
    data = SpeechDataset([r for r, _ in known], processor, language=None)
    name_of = {int(i): language_code(t) for t, i in model.generation_config.lang_to_id.items()}
    was_training = model.training
    model.eval()  # no dropout: the same clip is named the same way before and after
    try:
        detected = _detect(model, data, name_of)
    finally:
        model.train(was_training)
    return LanguageId(tuple(code for _, code in known), tuple(detected))


def _detect(model, data, name_of: dict[int, str]) -> list[str]:
    import torch

    device = next(model.parameters()).device
    dtype = model.get_encoder().conv1.weight.dtype
    detected: list[str] = []
    with torch.inference_mode():
        for start in range(0, len(data), BATCH):
            feats = torch.stack(
                [
                    torch.as_tensor(data[i]["input_features"])
                    for i in range(start, min(start + BATCH, len(data)))
                ]
            )
            ids = model.detect_language(input_features=feats.to(device, dtype))
            detected += [name_of.get(int(i), "?") for i in ids]
    return detected
