"""Augmentation on the fly (data/augment.py): each part changes a clip as asked, the same
(seed, epoch, clip) gives the same clip, and masks stay inside each clip's own frames."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from tests.conftest import write_tone

from fitwhisper.config import TrainConfig
from fitwhisper.data.augment import (
    PRESETS,
    Augmentation,
    Augmenter,
    add_noise,
    change_speed,
    from_config,
    mask_spans,
)
from fitwhisper.data.manifest import Row

SR = 16_000


def _speech_like(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )


@pytest.mark.parametrize("factor", [0.9, 1.1, 0.5, 2.0])
def test_speed_changes_the_duration_by_the_factor(factor: float) -> None:
    audio = _speech_like(2.0)
    out = change_speed(audio, factor)
    assert len(out) / len(audio) == pytest.approx(1 / factor, abs=1e-3)
    # Kaldi's speed perturbation: the pitch moves with it (a 220 Hz tone at 0.9 is 198 Hz).
    peak = np.argmax(np.abs(np.fft.rfft(out))) * SR / len(out)
    assert peak == pytest.approx(220 * factor, rel=0.01)


def _snr_db(clean: np.ndarray, noisy: np.ndarray) -> float:
    noise = noisy.astype(np.float64) - clean
    return 10 * math.log10(np.mean(clean.astype(np.float64) ** 2) / np.mean(noise**2))


def test_generated_noise_lands_within_the_asked_snr(tmp_path: Path) -> None:
    audio = _speech_like()
    snrs = [
        _snr_db(audio, add_noise(audio, np.random.default_rng(i), (10.0, 30.0), None))
        for i in range(20)
    ]
    assert all(10.0 - 1e-3 <= s <= 30.0 + 1e-3 for s in snrs), snrs
    assert max(snrs) - min(snrs) > 5  # drawn across the range, not one value


def test_noise_from_a_folder_lands_within_the_asked_snr(tmp_path: Path) -> None:
    noise_dir = tmp_path / "noise" / "street"
    noise_dir.mkdir(parents=True)
    rng = np.random.default_rng(5)
    sf.write(noise_dir / "hum.wav", 0.2 * rng.standard_normal(SR // 2), SR)  # shorter: tiled
    sf.write(noise_dir / "hiss.flac", 0.05 * rng.standard_normal(3 * SR), SR)
    (noise_dir / "notes.txt").write_text("not audio")
    audio = _speech_like()
    for i in range(10):
        noisy = add_noise(audio, np.random.default_rng(i), (5.0, 6.0), str(tmp_path / "noise"))
        assert 5.0 - 1e-3 <= _snr_db(audio, noisy) <= 6.0 + 1e-3


def test_gain_stays_within_its_range() -> None:
    augmenter = Augmenter(Augmentation(gain_db=(-6.0, 6.0)), seed=0)
    audio = _speech_like()
    gains = []
    for clip in range(30):
        out = augmenter.waveform(audio, augmenter.for_clip(clip))
        gains.append(20 * math.log10(np.sqrt(np.mean(out**2) / np.mean(audio**2))))
    assert all(-6.0 - 1e-4 <= g <= 6.0 + 1e-4 for g in gains)
    assert max(gains) - min(gains) > 6


@pytest.mark.parametrize("share", [0.0, 0.05, 0.15, 0.5])
def test_mask_spans_cover_the_asked_share_without_overlap(share: float) -> None:
    for seed in range(20):
        spans = mask_spans(437, share, np.random.default_rng(seed))
        covered = set()
        for lo, hi in spans:
            assert 0 <= lo < hi <= 437
            assert covered.isdisjoint(range(lo, hi))
            covered |= set(range(lo, hi))
        assert len(covered) == round(share * 437)


def test_same_seed_epoch_and_clip_give_the_same_clip_another_epoch_another() -> None:
    audio = _speech_like()

    def augmented(seed: int, epoch: int, clip: int) -> np.ndarray:
        a = Augmenter(PRESETS["strong"], seed=seed, epoch=epoch)
        return a.waveform(audio, a.for_clip(clip))

    first = augmented(0, 1, 7)
    np.testing.assert_array_equal(first, augmented(0, 1, 7))
    for other in (augmented(0, 2, 7), augmented(0, 1, 8), augmented(1, 1, 7)):
        assert len(other) != len(first) or not np.array_equal(other, first)


@pytest.fixture
def processor(tiny_whisper_dir: Path):
    from transformers import WhisperProcessor

    return WhisperProcessor.from_pretrained(tiny_whisper_dir)


def _rows(tmp_path: Path, seconds: list[float]) -> list[Row]:
    return [
        Row(
            index=i,
            line=i + 1,
            text=f"clip {i}",
            audio=write_tone(tmp_path / f"c{i}.wav", s, freq=200 + 40 * i),
        )
        for i, s in enumerate(seconds)
    ]


def test_masks_cover_the_asked_share_of_a_clips_real_frames_only(processor, tmp_path: Path) -> None:
    from fitwhisper.data.features import SpeechDataset

    rows = _rows(tmp_path, [2.0])
    plain = SpeechDataset(rows, processor)[0]
    masks = Augmentation(time_mask_share=0.1, freq_mask_share=0.2)
    item = SpeechDataset(rows, processor, augment=Augmenter(masks, seed=3))[0]
    frames = item["clip_frames"]
    assert frames == 200 and "augmented_frames" not in item  # masks keep the length
    before, after = plain["input_features"], item["input_features"]
    changed = before != after
    # Nothing past the clip's frames (the padding to 30 s) changes.
    assert not changed[:, frames:].any()
    time_masked = np.flatnonzero((after[:, :frames] == 0).all(axis=0))
    freq_masked = np.flatnonzero((after[:, :frames] == 0).all(axis=1))
    assert len(time_masked) == round(0.1 * frames)
    assert len(freq_masked) == round(0.2 * 80)
    # Unmasked cells are exactly the clip's features.
    keep = np.ones_like(changed)
    keep[:, time_masked] = False
    keep[freq_masked, :] = False
    np.testing.assert_array_equal(after[keep], before[keep])


def test_masks_in_a_window_of_several_clips_stay_within_each_clip(
    processor, tmp_path: Path
) -> None:
    from fitwhisper.data.packing import PackedDataset, Window

    rows = _rows(tmp_path, [1.0, 1.5, 0.8])
    window = Window(rows=(0, 1, 2), duration_s=3.3)
    plain = PackedDataset(rows, [window], processor)[0]["input_features"]
    masks = Augmentation(time_mask_share=0.2, freq_mask_share=0.25)
    item = PackedDataset(rows, [window], processor, augment=Augmenter(masks, seed=0))[0]
    after = item["input_features"]
    # Clips start on 20 ms boundaries: frames [0, 100), [100, 250), [250, 330).
    spans = [(0, 100), (100, 250), (250, 330)]
    assert not (plain[:, 330:] != after[:, 330:]).any()  # the window's padding
    for lo, hi in spans:
        clip = after[:, lo:hi]
        assert (clip == 0).all(axis=0).sum() == round(0.2 * (hi - lo))
        # Each clip has its own frequency masks, over its own frames only.
        assert (clip == 0).all(axis=1).sum() == round(0.25 * 80)
    bins = [frozenset(np.flatnonzero((after[:, lo:hi] == 0).all(axis=1))) for lo, hi in spans]
    assert len(set(bins)) > 1


def test_a_slowed_clip_keeps_its_own_frames_through_trimming(processor, tmp_path) -> None:
    from fitwhisper.data.batching import WithDurations
    from fitwhisper.data.features import SpeechDataset

    rows = _rows(tmp_path, [2.0])
    slow = Augmenter(Augmentation(speeds=(0.8,)), seed=0)
    item = WithDurations(SpeechDataset(rows, processor, augment=slow), [2.0])[0]
    assert item["frames"] == 250  # 2 s at 0.8: 2.5 s, not the 200 frames measured


def test_a_slowed_clip_never_passes_30_s(processor, tmp_path: Path) -> None:
    from fitwhisper.data.features import SpeechDataset

    rows = _rows(tmp_path, [29.0])
    item = SpeechDataset(rows, processor, augment=Augmenter(Augmentation(speeds=(0.5,)), 0))[0]
    assert item["clip_frames"] <= 3000


def test_presets_and_overrides() -> None:
    assert not from_config(TrainConfig()).active  # off by default
    assert from_config(TrainConfig()).summary() == "none"  # as the run record says it
    medium = from_config(TrainConfig(augment="medium"))
    assert medium == PRESETS["medium"]
    assert from_config(TrainConfig(augment="medium", spec_augment=False)).time_mask_share == 0
    # A part switched on by its own option under --augment none: medium's values for the rest.
    noise = from_config(TrainConfig(noise_snr_db=["10", "12"]))
    assert noise.noise_share == PRESETS["medium"].noise_share
    assert noise.noise_snr_db == (10.0, 12.0) and not noise.speeds and not noise.gain_db
    masks = from_config(TrainConfig(time_mask_share=0.2))
    assert masks.time_mask_share == 0.2 and masks.freq_mask_share == 0.15
    assert from_config(TrainConfig(augment="strong", speed_perturb=[1.0])).speeds == (1.0,)
    assert from_config(TrainConfig(augment="light", gain_db=[0, 0])).gain_db is None
