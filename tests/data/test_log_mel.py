"""`--log_mel device`'s batched log-mel (data/log_mel.py) equals transformers'
WhisperFeatureExtractor within `TOLERANCE` on real speech, padded to 30 s and cut to a
batch's longest clip; items carrying waveforms make, through the collator and the trainer's
step, the features (SpecAugment's masks included) the CPU path makes."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fitwhisper.data.audio import load_audio
from fitwhisper.data.augment import PRESETS, Augmenter
from fitwhisper.data.batching import TrimmedCollator
from fitwhisper.data.features import SpeechDataset, WhisperCollator
from fitwhisper.data.log_mel import TOLERANCE, log_mel, stack_audio
from fitwhisper.data.manifest import load_manifest
from fitwhisper.models.short_window import short_frames
from fitwhisper.whisper_facts import HOP_LENGTH, SAMPLE_RATE, WINDOW_SAMPLES

pytestmark = pytest.mark.slow  # real recordings (tests/conftest.py)

# Real speech of both sample rates: AISHELL sentences (16 kHz) and FSDD digits (8 kHz).
CLIPS = {"aishell-s0150": (0, 130, 250, 499), "fsdd-train": (0, 1500)}


@pytest.fixture(scope="module")
def speech(shared_data: Path) -> list[np.ndarray]:
    out = []
    for folder, picks in CLIPS.items():
        rows = load_manifest(shared_data / folder / "manifest.jsonl").rows
        out += [load_audio(rows[i].audio) for i in picks]
    return out


def _extractor(processor, clip: np.ndarray) -> np.ndarray:
    fe = processor.feature_extractor
    return fe(clip, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features[0]


def test_the_batched_log_mel_equals_the_feature_extractor_on_real_speech(
    speech, tiny_en_processor
) -> None:
    fe = tiny_en_processor.feature_extractor
    batch = log_mel(stack_audio(speech, WINDOW_SAMPLES), fe).numpy()
    assert batch.shape == (len(speech), 80, 3000)
    for clip, got in zip(speech, batch, strict=True):
        want = _extractor(tiny_en_processor, clip)
        assert np.abs(got - want).max() <= TOLERANCE
    # Cut to the batch's longest clip: the frames the trimming collator keeps, unchanged.
    keep = short_frames(max(math.ceil(len(c) / HOP_LENGTH) for c in speech), 2)
    short = log_mel(stack_audio(speech, keep * HOP_LENGTH), fe).numpy()
    assert short.shape == (len(speech), 80, keep)
    assert np.abs(short - batch[..., :keep]).max() <= TOLERANCE


def test_waveform_items_give_the_cpu_paths_features_with_the_same_masks(
    shared_data: Path, tiny_en_processor
) -> None:
    rows = load_manifest(shared_data / "fsdd-train" / "manifest.jsonl").rows[:4]
    augmenter = Augmenter(PRESETS["strong"], seed=3)

    def batch(log_mel_on: str) -> dict:
        ds = SpeechDataset(rows, tiny_en_processor, augment=augmenter, log_mel=log_mel_on)
        items = []
        for i in range(len(ds)):
            item = ds[i]
            item["frames"] = item.pop("clip_frames")
            items.append(item)
        collate = TrimmedCollator(WhisperCollator(tiny_en_processor, 50257))
        return collate(items)

    on_cpu, waves = batch("cpu"), batch("device")
    assert "input_features" not in waves and waves["mel_masks"].shape[0] == 4
    assert torch.equal(on_cpu["labels"], waves["labels"])

    class Step:  # the trainer's side (train/trainer.py), on this CPU
        processing_class = tiny_en_processor
        args = SimpleNamespace(device=torch.device("cpu"))

        def _prepare_inputs(self, inputs):
            return inputs

    from fitwhisper.train.trainer import DeviceLogMelMixin

    made = type("T", (DeviceLogMelMixin, Step), {})()._prepare_inputs(dict(waves))
    assert set(made) == {"input_features", "labels"}
    cpu = on_cpu["input_features"]
    assert made["input_features"].shape == cpu.shape
    assert (made["input_features"] - cpu).abs().max() <= TOLERANCE
    # The strong preset masks every clip: the same cells are zero on both paths.
    assert torch.equal(made["input_features"] == 0, cpu == 0) and bool((cpu == 0).any())
