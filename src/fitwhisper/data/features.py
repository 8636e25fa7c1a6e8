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

from fitwhisper.data.late_check import load_training_audio
from fitwhisper.data.manifest import Row
from fitwhisper.data.recordings import chosen, window_labels
from fitwhisper.errors import DataError
from fitwhisper.whisper_facts import HOP_LENGTH, SAMPLE_RATE, WINDOW_SAMPLES, is_multilingual


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
        timestamp_share: the share of windows cut from long recordings (rows with segments,
            data/recordings.py) labelled with their segments' times; the others are plain
            text after <|notimestamps|>. Training only; 0 for evaluation.
        previous_text_share: the share of those windows that have previous text trained
            with it as `<|startofprev|>` context (no loss on it). Training only.
        seed: draws which windows (data/recordings.py `chosen`).

    Each item is `{"input_features": (80 or 128, 3000) float32, "labels": list[int]}`:
    the log-mel of the clip padded to 30 s (Whisper's encoder takes exactly 3000 frames).
    With `log_mel="device"` it holds the waveform instead (`clip_inputs`).
    """

    def __init__(
        self,
        rows: Sequence[Row],
        processor,
        language: str | None = None,
        task: str = "transcribe",
        augment=None,
        log_mel: str = "cpu",
        *,
        timestamp_share: float = 0.0,
        previous_text_share: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.rows = list(rows)
        self.processor = processor
        self.language = language
        self.task = task
        self.augment = augment  # data/augment.py Augmenter: training only, never evaluation
        self.log_mel = log_mel  # where the log-mel is made: "cpu" here, "device" in training
        self.timestamp_share = timestamp_share
        self.previous_text_share = previous_text_share
        self.seed = seed

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        row = self.rows[i]
        rng = self.augment.for_clip(i) if self.augment is not None else None
        return self.item(row, load_training_audio(row), rng, i)

    def item(
        self, row: Row, audio: np.ndarray, rng: np.random.Generator | None, i: int = 0
    ) -> dict:
        """The training example of `row` from its decoded audio (`rng`: the clip's
        augmentation draws, None without augmentation; `i`: its position, which draws a
        long recording's window's label mode); streamed clips come here too."""
        heard = len(audio)
        if self.augment is not None:
            # Never slower than keeps the clip within Whisper's 30 s window.
            audio = self.augment.waveform(audio, rng, min_speed=len(audio) / WINDOW_SAMPLES)
        frames = math.ceil(len(audio) / HOP_LENGTH)
        masked = [(0, frames, rng)] if self.augment is not None else []
        inputs = clip_inputs(audio, self.processor, self.augment, masked, self.log_mel)
        item = {
            **inputs,
            **self._labels(i, row),
            # The clip's own length in log-mel frames, for a short encoder window.
            "clip_frames": frames,
        }
        if len(audio) != heard:  # speed perturbation: the trimming collator keeps these
            item["augmented_frames"] = frames
        return item

    def _labels(self, i: int, row: Row) -> dict[str, list[int]]:
        """`labels` (and `decoder_input_ids` for a window trained with its previous text)."""
        tok = self.processor.tokenizer
        language = row.language or self.language
        if row.segments is None and row.previous_text is None:
            return {"labels": label_ids(tok, row.text or "", language, self.task)}
        return window_labels(
            tok,
            row,
            prefix_ids(tok, language, self.task),
            timestamped=chosen(self.seed, i, "timestamps", self.timestamp_share),
            with_previous=chosen(self.seed, i, "previous_text", self.previous_text_share),
        )


def clip_inputs(audio: np.ndarray, processor, augment, masked, log_mel: str) -> dict[str, Any]:
    """An item's audio input: its log-mel `input_features` (80 or 128, 3000), SpecAugment's
    masks applied; or, with `log_mel="device"`, the waveform `input_audio` and the mask
    rectangles `masks`, drawn alike, for the trainer to make and mask the features on the
    training device (data/log_mel.py). `masked`: (first frame, frames, generator) of each
    clip in the audio, whose masks are drawn from its own generator."""
    fe = processor.feature_extractor
    if log_mel == "device":
        shape = (fe.feature_size, fe.nb_max_frames)
        rects = [r for start, n, rng in masked for r in augment.mask_rects(shape, start, n, rng)]
        return {"input_audio": np.asarray(audio, dtype=np.float32), "masks": rects}
    features = fe(audio, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features[0]
    features = features.astype(np.float32, copy=False)
    for start, n, rng in masked:
        augment.mask(features, start, n, rng)
    return {"input_features": features}


class WhisperCollator:
    """Stacks features and pads labels with -100 so padding adds nothing to the loss.

    A leading `<|startoftranscript|>` is dropped from the labels because the model prepends
    `decoder_start_token_id` itself when it shifts labels into decoder inputs
    (https://huggingface.co/blog/fine-tune-whisper).

    `untrained_ids`: tokens the decoder is given but has no loss on (a monolingual run's
    language token, codeswitch.untrained_language_ids); batches holding one carry their
    decoder inputs.
    """

    def __init__(
        self, processor, decoder_start_token_id: int, untrained_ids: frozenset[int] = frozenset()
    ) -> None:
        self.processor = processor
        self.decoder_start_token_id = decoder_start_token_id
        self.untrained_ids = untrained_ids

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        if "input_audio" in features[0]:  # --log_mel device: the trainer makes the features
            from fitwhisper.data.log_mel import stack_audio, stack_masks

            audio = {
                "input_audio": stack_audio([f["input_audio"] for f in features], WINDOW_SAMPLES),
                "mel_masks": stack_masks([f["masks"] for f in features]),
            }
        else:
            batch = self.processor.feature_extractor.pad(
                [{"input_features": f["input_features"]} for f in features], return_tensors="pt"
            )
            audio = {"input_features": batch["input_features"]}
        if any("decoder_input_ids" in f for f in features) or self._untrained_in(features):
            return {**audio, **self.with_context(features)}
        return {**audio, "labels": self.labels(features)}

    def _untrained_in(self, features: list[dict[str, Any]]) -> bool:
        # Such tokens sit in the prefix: <|startoftranscript|><|lang|>...
        ids = self.untrained_ids
        return bool(ids) and any(t in ids for f in features for t in f["labels"][:3])

    def with_context(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        """`decoder_input_ids` and `labels` of a batch where some items train with previous
        text before `<|startofprev|>` (data/recordings.py), or hold an untrained token: the
        model cannot shift such labels itself (their context is -100), so every item's
        decoder input is given, the others' being their labels shifted right as the model
        would make it."""
        pad = self.processor.tokenizer.pad_token_id
        pad = self.processor.tokenizer.eos_token_id if pad is None else pad
        inputs, targets = [], []
        for f in features:
            if "decoder_input_ids" in f:
                inputs.append(f["decoder_input_ids"])
                targets.append(f["labels"])
                continue
            labels = list(f["labels"])
            if labels and labels[0] == self.decoder_start_token_id:
                inputs.append(labels[:-1])
                targets.append(labels[1:])
            else:
                inputs.append([self.decoder_start_token_id, *labels[:-1]])
                targets.append(labels)

        def padded(rows: list[list[int]], value: int) -> torch.Tensor:
            return torch.nn.utils.rnn.pad_sequence(
                [torch.as_tensor(r, dtype=torch.long) for r in rows],
                batch_first=True,
                padding_value=value,
            )

        if self.untrained_ids:
            targets = [[-100 if t in self.untrained_ids else t for t in row] for row in targets]
        return {"decoder_input_ids": padded(inputs, pad), "labels": padded(targets, -100)}

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
