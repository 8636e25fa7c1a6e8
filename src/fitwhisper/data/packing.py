"""Several short clips in one 30 s window, so they share one encoder pass (`train --pack_clips`).

Whisper's encoder always sees 30 s. A 5 s clip padded to 30 s spends about 5/6 of the
encoder's work on padding; packing consecutive clips of a manifest (in order, one language)
into one window of up to 30 s trains on the same audio with a fraction of the encoder passes.
The transcripts are joined in Whisper's own timestamp format, as in its pre-training and in
distil-whisper's training data:

    <|startoftranscript|><|en|><|transcribe|><|0.00|> First<|4.86|><|4.86|> Second<|9.72|>...

(no `<|notimestamps|>`; each segment of a spaced script with Whisper's leading space,
text_joins.leading_space), so the model keeps segmenting and timing speech. A share of the
windows (`single_clip_share`, evenly spread) holds one clip only, labelled as plain text after
`<|notimestamps|>`, the mode WER/CER scoring and most transcription generate in. Both matter:
base fine-tuned on AISHELL with every window packed (half timestamped, half plain text) ran
away repeating a word on a short held-out clip (CER 44.3% vs the standard recipe's 27.7%),
since it never saw one short clip followed by silence; with 40% of windows single it scored
25.8% at 3.4x less work per clip (bench/RESULTS-train-speed.md). Trained on timestamped
windows only, tiny.en fine-tuned on digit strings forgot how to write plain text (WER 26% ->
94%). Each clip starts on a 20 ms boundary (the timestamp resolution), so its start timestamp
is exact.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from fitwhisper.data.features import clip_inputs, prefix_ids
from fitwhisper.data.late_check import load_training_audio
from fitwhisper.data.manifest import Row
from fitwhisper.data.timestamp_tokens import has_timestamp_tokens, timestamp_id
from fitwhisper.errors import DataError
from fitwhisper.text_joins import leading_space, needs_space
from fitwhisper.whisper_facts import (
    HOP_LENGTH,
    SAMPLE_RATE,
    TIMESTAMP_SECONDS,
    WINDOW_SAMPLES,
    WINDOW_SECONDS,
)

log = logging.getLogger(__name__)

_STEP = round(TIMESTAMP_SECONDS * SAMPLE_RATE)  # 320 samples between timestamp tokens


@dataclass(frozen=True)
class Window:
    """Row positions (into the training rows) packed together, in manifest order."""

    rows: tuple[int, ...]
    duration_s: float  # audio incl. the alignment to 20 ms boundaries


def pack_windows(
    rows: Sequence[Row],
    durations_s: Sequence[float],
    label_tokens: Sequence[int],
    *,
    language: str | None = None,
    window_s: float = WINDOW_SECONDS,
    max_label_tokens: int = 448,
    single_clip_share: float = 0.0,
    several_share: float | None = None,
) -> list[Window]:
    """Greedy packing of consecutive rows into windows of at most `window_s` seconds.

    A window closes when the next clip would overrun the window, when its label would pass
    `max_label_tokens` (each clip adds its text plus two timestamp tokens), or when the
    language changes (Whisper's prompt names one language). Order is kept: neighbouring
    clips of a manifest are usually the same speaker and session.

    Args:
        durations_s: each row's duration in seconds (from the data check).
        label_tokens: each row's transcript length in tokens, special tokens excluded.
        language: the run's language; a row's own wins.
        single_clip_share: the share of windows, evenly spread, that hold one clip only.
        several_share: instead, the share of windows, evenly spread, that may hold several
            clips (the first such window is the 1/several_share-th, so a few clips get none).
    """
    prefix_len = 4  # <|sot|><|lang|><|task|> ... <|endoftext|>
    windows: list[Window] = []
    cur: list[int] = []
    cur_s = 0.0
    cur_tokens = prefix_len
    cur_lang: str | None = None
    for i, (row, dur) in enumerate(zip(rows, durations_s, strict=True)):
        aligned = _aligned_s(dur)
        lang = row.language or language
        tokens = label_tokens[i] + 2
        fits = (
            cur
            and not _single(len(windows), single_clip_share, several_share)
            and lang == cur_lang
            and cur_s + aligned <= window_s
            and cur_tokens + tokens <= max_label_tokens
        )
        if cur and not fits:
            windows.append(Window(tuple(cur), cur_s))
            cur, cur_s, cur_tokens = [], 0.0, prefix_len
        cur.append(i)
        cur_s += aligned
        cur_tokens += tokens
        cur_lang = lang
    if cur:
        windows.append(Window(tuple(cur), cur_s))
    return windows


def windows_for(
    rows: Sequence[Row],
    durations_s: Sequence[float],
    tokenizer,
    cfg,
    *,
    language: str | None,
    several_share: float | None = None,
) -> list[Window]:
    """The windows `train --pack_clips` makes of these rows under the run's `TrainConfig`,
    or with `several_share` (see pack_windows) those of `--encoder_input mixed`."""
    tokens = [len(tokenizer(r.text or "", add_special_tokens=False).input_ids) for r in rows]
    return pack_windows(
        rows,
        durations_s,
        tokens,
        language=language,
        single_clip_share=cfg.packed_single_clip_share,
        several_share=several_share,
    )


def _single(i: int, single_clip_share: float, several_share: float | None) -> bool:
    """Whether window i must hold one clip only."""
    if several_share is not None:
        return not _spread(i, several_share)
    return _spread(i, single_clip_share)


def _spread(i: int, share: float) -> bool:
    """Whether item i belongs to an evenly spread `share` of items (1 in 4 for 0.25)."""
    return int((i + 1) * share) > int(i * share)


class PackedDataset(Dataset):
    """Windows of packed clips as training examples, made when asked for (like SpeechDataset).

    Each item is `{"input_features": (80 or 128, 3000) float32, "labels": list[int]}`: the
    log-mel of the clips joined and padded to 30 s, and the timestamped joined transcript.
    `n_clips` and `lengths` serve the benchmark and the length-grouped sampler.
    """

    def __init__(
        self,
        rows: Sequence[Row],
        windows: Sequence[Window],
        processor,
        language: str | None = None,
        task: str = "transcribe",
        timestamp_fraction: float = 1.0,
        augment=None,
        log_mel: str = "cpu",
    ) -> None:
        if not has_timestamp_tokens(processor.tokenizer):
            raise DataError(
                "--pack_clips needs Whisper's timestamp tokens (<|0.00|> ... <|30.00|>), and "
                "this model's tokenizer has none",
                hint="train with --no-pack_clips, or use a tokenizer.json that has them",
            )
        self.rows = list(rows)
        self.windows = list(windows)
        self.processor = processor
        self.language = language
        self.task = task
        self.timestamp_fraction = timestamp_fraction
        self.augment = augment  # data/augment.py Augmenter: each clip augmented on its own
        self.log_mel = log_mel  # features made here ("cpu") or by the trainer ("device")

    def timestamped(self, i: int) -> bool:
        """Whether window i is labelled with timestamps: a fixed, evenly spread share of the
        windows of several clips; a window of one clip is plain text."""
        if len(self.windows[i].rows) == 1:
            return False
        return _spread(i, self.timestamp_fraction)

    def __len__(self) -> int:
        return len(self.windows)

    @property
    def n_clips(self) -> int:
        return sum(len(w.rows) for w in self.windows)

    @property
    def lengths(self) -> list[float]:
        return [w.duration_s for w in self.windows]

    def __getitem__(self, i: int) -> dict[str, Any]:
        window = self.windows[i]
        tok = self.processor.tokenizer
        first = self.rows[window.rows[0]]
        lang = first.language or self.language
        timed = self.timestamped(i)
        labels = prefix_ids(tok, lang, self.task)
        if timed:  # timestamp mode: Whisper's prefix without the trailing <|notimestamps|>
            labels = [t for t in labels if t != _no_timestamps_id(tok)]
        pieces = []
        spans = []  # (first frame, frames) of each clip, for its own SpecAugment masks
        at = 0  # samples
        previous = ""
        clips, rngs = self._clips(window)
        for r, audio in zip(window.rows, clips, strict=True):
            spans.append((at // HOP_LENGTH, math.ceil(len(audio) / HOP_LENGTH)))
            pad = -len(audio) % _STEP
            pieces += [audio, np.zeros(pad, dtype=np.float32)]
            text = self.rows[r].text or ""
            if timed:
                labels.append(timestamp_id(tok, at / SAMPLE_RATE))
                text = leading_space(text)
            elif needs_space(previous, text):
                text = " " + text
            labels += tok(text, add_special_tokens=False).input_ids
            if timed:
                labels.append(timestamp_id(tok, (at + len(audio)) / SAMPLE_RATE))
            at += len(audio) + pad
            previous = text
        labels.append(tok.eos_token_id)
        audio = np.concatenate(pieces)[:WINDOW_SAMPLES]
        masked = []
        if self.augment is not None:
            masked = [(start, n, rng) for (start, n), rng in zip(spans, rngs, strict=True)]
        inputs = clip_inputs(audio, self.processor, self.augment, masked, self.log_mel)
        item = {**inputs, "labels": labels}
        if self.augment is not None and any(s != 1.0 for s in self.augment.augmentation.speeds):
            item["augmented_frames"] = math.ceil(len(audio) / HOP_LENGTH)
        return item

    def _clips(self, window: Window) -> tuple[list[np.ndarray], list]:
        """The window's clips, each augmented with its own generator (clip = row index), and
        those generators (None without augmentation). Slowed clips that would push the
        window past 30 s are played at 1.0 or faster instead, so the window holds them all."""
        clips = [load_training_audio(self.rows[r]) for r in window.rows]
        if self.augment is None:
            return clips, [None] * len(clips)
        rngs = [self.augment.for_clip(r) for r in window.rows]
        out = [self.augment.waveform(c, rng) for c, rng in zip(clips, rngs, strict=True)]
        if sum(len(c) + (-len(c) % _STEP) for c in out) > WINDOW_SAMPLES:
            rngs = [self.augment.for_clip(r) for r in window.rows]  # the same draws again
            out = [
                self.augment.waveform(c, rng, min_speed=1.0)
                for c, rng in zip(clips, rngs, strict=True)
            ]
        return out, rngs


def describe(windows: Sequence[Window], n_rows: int) -> str:
    """One log line: how many clips went into how many windows, and how full they are."""
    if not windows:
        return "no windows"
    fill = sum(w.duration_s for w in windows) / (len(windows) * WINDOW_SECONDS)
    return (
        f"packed {n_rows} clips into {len(windows)} window(s) of up to {WINDOW_SECONDS:.0f} s "
        f"({n_rows / len(windows):.1f} clips per window, {100 * fill:.0f}% of each window "
        "is audio on average)"
    )


def _aligned_s(duration_s: float) -> float:
    samples = round(duration_s * SAMPLE_RATE)
    return (samples + (-samples % _STEP)) / SAMPLE_RATE


def _no_timestamps_id(tokenizer) -> int:
    return tokenizer.convert_tokens_to_ids("<|notimestamps|>")
