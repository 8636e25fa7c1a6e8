"""Model inputs made on the fly: log-mel features and label ids, one row at a time.

`SpeechDataset` decodes and featurises in `__getitem__`, so memory does not grow with the
manifest and DataLoader workers share the work; nothing is precomputed. `WhisperCollator`
pads a batch the way Whisper's training expects (the Hugging Face fine-tuning recipe).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from fitwhisper.data.audio import load_audio
from fitwhisper.data.manifest import Row
from fitwhisper.errors import DataError
from fitwhisper.whisper_facts import HOP_LENGTH, SAMPLE_RATE, WINDOW_SAMPLES

# Whisper's vocabularies: GPT-2's 50257 tokens for English-only models, so their
# <|startoftranscript|> is id 50257; multilingual ones add a token and start at 50258.
_ENGLISH_ONLY_SOT_ID = 50257


def is_multilingual(tokenizer) -> bool:
    """Whether a Whisper tokenizer belongs to a multilingual model (which has language tokens)."""
    return tokenizer.convert_tokens_to_ids("<|startoftranscript|>") != _ENGLISH_ONLY_SOT_ID


def prefix_ids(tokenizer, language: str | None, task: str | None) -> list[int]:
    """Decoder prompt ids `<|startoftranscript|>[<|lang|><|task|>]<|notimestamps|>`.

    English-only models get neither language nor task token. The tokenizer's own
    `prefix_tokens` does the mapping and validation; it is computed on a scratch setting and
    restored, because a row's language may differ from the tokenizer's.

    Raises:
        DataError: a language Whisper does not know.
    """
    if not is_multilingual(tokenizer):
        language = task = None
    return list(_prefix_ids_cached(tokenizer, language, task))


@lru_cache(maxsize=256)
def _prefix_ids_cached(tokenizer, language: str | None, task: str | None) -> tuple[int, ...]:
    saved = tokenizer.language, tokenizer.task
    try:
        tokenizer.language, tokenizer.task = language, task
        return tuple(tokenizer.prefix_tokens)
    except ValueError as e:
        raise DataError(
            f"language '{language}' is not one Whisper knows: {e}",
            hint="use a Whisper language code such as en, zh, ja, or a name such as chinese",
        ) from e
    finally:
        tokenizer.language, tokenizer.task = saved


def label_ids(tokenizer, text: str, language: str | None, task: str | None) -> list[int]:
    """Token ids the decoder is trained to produce: prefix, transcript, `<|endoftext|>`."""
    body = tokenizer(text, add_special_tokens=False).input_ids
    return prefix_ids(tokenizer, language, task) + body + [tokenizer.eos_token_id]


class SpeechDataset(Dataset):
    """Rows of a manifest as Whisper training examples, computed when asked for.

    Args:
        rows: manifest rows (checked by `fitwhisper.data.check` first).
        processor: a WhisperProcessor (feature extractor + tokenizer).
        language: the dataset's language for multilingual models; a row's own wins.
        task: "transcribe" or "translate".

    Each item is `{"input_features": (80 or 128, 3000) float32, "labels": list[int]}`:
    the log-mel of the clip padded to 30 s (Whisper's encoder takes exactly 3000 frames).
    """

    def __init__(
        self,
        rows: Sequence[Row],
        processor,
        language: str | None = None,
        task: str = "transcribe",
        augment=None,
    ) -> None:
        self.rows = list(rows)
        self.processor = processor
        self.language = language
        self.task = task
        self.augment = augment  # data/augment.py Augmenter: training only, never evaluation

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        rng = self.augment.for_clip(i) if self.augment is not None else None
        return self.item(row, load_audio(row.audio), rng)

    def item(self, row: Row, audio: np.ndarray, rng: np.random.Generator | None) -> dict:
        """The training example of `row` from its decoded audio (`rng`: the clip's
        augmentation draws, None without augmentation); streamed clips come here too."""
        heard = len(audio)
        if self.augment is not None:
            # Never slower than keeps the clip within Whisper's 30 s window.
            audio = self.augment.waveform(audio, rng, min_speed=len(audio) / WINDOW_SAMPLES)
        fe = self.processor.feature_extractor
        features = fe(audio, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features[0]
        features = features.astype(np.float32, copy=False)
        frames = math.ceil(len(audio) / HOP_LENGTH)
        if self.augment is not None:
            self.augment.mask(features, 0, frames, rng)
        labels = label_ids(
            self.processor.tokenizer, row.text or "", row.language or self.language, self.task
        )
        item = {
            "input_features": features,
            "labels": labels,
            # The clip's own length in log-mel frames, for a short encoder window.
            "clip_frames": frames,
        }
        if len(audio) != heard:  # speed perturbation: the trimming collator keeps these
            item["augmented_frames"] = frames
        return item


class WhisperCollator:
    """Stacks features and pads labels with -100 so padding adds nothing to the loss.

    A leading `<|startoftranscript|>` is dropped from the labels because the model prepends
    `decoder_start_token_id` itself when it shifts labels into decoder inputs
    (https://huggingface.co/blog/fine-tune-whisper).
    """

    def __init__(self, processor, decoder_start_token_id: int) -> None:
        self.processor = processor
        self.decoder_start_token_id = decoder_start_token_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.processor.feature_extractor.pad(
            [{"input_features": f["input_features"]} for f in features], return_tensors="pt"
        )
        return {"input_features": batch["input_features"], "labels": self.labels(features)}

    def labels(self, features: list[dict[str, Any]]) -> torch.Tensor:
        """The batch's labels, `(batch, longest) int64`, padded with -100 (also used by the
        encoder-output cache's collator, whose items carry no features)."""
        labels = torch.nn.utils.rnn.pad_sequence(
            [torch.as_tensor(f["labels"], dtype=torch.long) for f in features],
            batch_first=True,
            padding_value=-100,
        )
        if labels.shape[1] and bool((labels[:, 0] == self.decoder_start_token_id).all()):
            labels = labels[:, 1:]
        return labels
