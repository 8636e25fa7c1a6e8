"""Training augmentation on the fly: speed perturbation, additive noise and gain on each
clip's waveform, SpecAugment's time and frequency masks on its log-mel (`train --augment`).

Every draw comes from a numpy Generator seeded by (run seed, epoch, clip index), never from
global state: a clip gets the same augmentation in a resumed run, in any dataloader worker
and on every rank, and a new one each epoch. Datasets ask `Augmenter.for_clip(index)`;
the trainer sets `Augmenter.epoch` before each epoch's data loader starts (train/trainer.py).
Evaluation datasets are built without an Augmenter, so nothing scored is ever augmented.

Own numpy code rather than audiomentations (which brings librosa, numba and scipy, draws
from the global `random`/`np.random` state and has neither speed perturbation by
resampling nor SpecAugment) or torch-audiomentations (torch's global RNG, batch-level
tensors after features are made): see docs/augmentation.md for the comparison and costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fitwhisper.whisper_facts import SAMPLE_RATE

MASKS_PER_AXIS = 2  # SpecAugment's LibriSpeech double policy: two time, two frequency masks


@dataclass(frozen=True)
class Augmentation:
    """What is done to each training clip (all off: none)."""

    speeds: tuple[float, ...] = ()  # factors drawn uniformly per clip; () or (1.0,): none
    noise_share: float = 0.0  # share of clips that get noise
    noise_snr_db: tuple[float, float] = (15.0, 30.0)
    noise_dir: str | None = None  # None: generated coloured noise
    gain_db: tuple[float, float] | None = None
    time_mask_share: float = 0.0  # of each clip's real frames, in MASKS_PER_AXIS masks
    freq_mask_share: float = 0.0  # of the mel bins, over the clip's frames only

    @property
    def active(self) -> bool:
        return bool(self.changes_waveform or self.time_mask_share or self.freq_mask_share)

    @property
    def changes_waveform(self) -> bool:
        speeds = any(s != 1.0 for s in self.speeds)
        return bool(speeds or self.noise_share > 0 or self.gain_db)

    def summary(self) -> dict | str:
        """For the run record and the model card: "none", or what each part does."""
        if not self.active:
            return "none"
        out: dict = {}
        if any(s != 1.0 for s in self.speeds):
            out["speed_perturb"] = list(self.speeds)
        if self.noise_share > 0:
            out["noise"] = {
                "share": self.noise_share,
                "snr_db": list(self.noise_snr_db),
                "source": self.noise_dir or "generated coloured noise",
            }
        if self.gain_db:
            out["gain_db"] = list(self.gain_db)
        if self.time_mask_share or self.freq_mask_share:
            out["spec_augment"] = {
                "time_mask_share": self.time_mask_share,
                "freq_mask_share": self.freq_mask_share,
                "masks_per_axis": MASKS_PER_AXIS,
            }
        return out


# The strengths --augment names. light: masks and gain only (nothing that changes how the
# speech sounds); medium: Kaldi's 3-way speed perturbation and noise on a third of the clips;
# strong: more and louder noise, wider masks.
PRESETS = {
    "none": Augmentation(),
    "light": Augmentation(gain_db=(-3.0, 3.0), time_mask_share=0.05, freq_mask_share=0.1),
    "medium": Augmentation(
        speeds=(0.9, 1.0, 1.1),
        noise_share=0.3,
        noise_snr_db=(15.0, 30.0),
        gain_db=(-6.0, 6.0),
        time_mask_share=0.1,
        freq_mask_share=0.15,
    ),
    "strong": Augmentation(
        speeds=(0.9, 1.0, 1.1),
        noise_share=0.6,
        noise_snr_db=(5.0, 20.0),
        gain_db=(-10.0, 10.0),
        time_mask_share=0.15,
        freq_mask_share=0.2,
    ),
}
# What a part switched on by its own option takes for the rest under --augment none.
_FALLBACK = PRESETS["medium"]


def from_config(cfg) -> Augmentation:
    """The augmentation a TrainConfig asks for: the --augment preset, each individual
    option given overriding its part (a part switched on by its own option under
    --augment none takes medium's values for what is not given)."""
    preset = PRESETS[cfg.augment]
    base = preset if preset.active else _FALLBACK

    spec_on = cfg.spec_augment
    if spec_on is None:
        spec_on = bool(preset.time_mask_share or preset.freq_mask_share) or bool(
            cfg.time_mask_share or cfg.freq_mask_share
        )
    time_share = freq_share = 0.0
    if spec_on:
        time_share = _given(cfg.time_mask_share, base.time_mask_share)
        freq_share = _given(cfg.freq_mask_share, base.freq_mask_share)

    noise_asked = cfg.noise_dir or cfg.noise_snr_db or cfg.noise_share is not None
    noise_share = preset.noise_share
    if noise_asked:
        noise_share = _given(cfg.noise_share, base.noise_share)
    speeds = tuple(cfg.speed_perturb) if cfg.speed_perturb else preset.speeds
    gain = tuple(cfg.gain_db) if cfg.gain_db else preset.gain_db
    return Augmentation(
        speeds=tuple(float(s) for s in speeds),
        noise_share=noise_share,
        noise_snr_db=tuple(float(x) for x in (cfg.noise_snr_db or base.noise_snr_db)),
        noise_dir=cfg.noise_dir if noise_share > 0 else None,
        gain_db=tuple(float(g) for g in gain) if gain and any(gain) else None,
        time_mask_share=time_share,
        freq_mask_share=freq_share,
    )


def augmenter(cfg) -> Augmenter | None:
    """The run's Augmenter, or None when its options ask for no augmentation."""
    augmentation = from_config(cfg)
    return Augmenter(augmentation, cfg.seed) if augmentation.active else None


def option_problems(cfg) -> list[str]:
    """Augmentation a run cannot do, known before anything loads."""
    augmentation = from_config(cfg)
    problems = []
    if augmentation.active and cfg.cache_encoder_outputs:
        problems.append(
            f"--augment {cfg.augment} (or an augmentation option) and "
            "--cache_encoder_outputs: the cache holds the encoder's outputs of each clip as "
            "it is, computed once before training, so it cannot see a clip augmented anew "
            "each epoch; train without --cache_encoder_outputs to augment (the encoder then "
            "runs every step), or with --augment none to keep the cache"
        )
    if augmentation.noise_dir:
        from fitwhisper.data.noise import noise_files
        from fitwhisper.errors import ConfigError

        try:
            noise_files(augmentation.noise_dir)
        except ConfigError as e:
            problems.append(f"{e.message}; {e.hint}")
    return problems


def _given(value, fallback):
    return fallback if value is None else value


@dataclass
class Augmenter:
    """An `Augmentation` bound to a run's seed; `epoch` is set by the trainer."""

    augmentation: Augmentation
    seed: int
    epoch: int = 0

    def for_clip(self, index: int, epoch: int | None = None) -> np.random.Generator:
        """The generator of clip `index` (its position among the training rows) this epoch
        (a streamed clip: its position in its source, and the stream's own epoch)."""
        return np.random.default_rng([self.seed, self.epoch if epoch is None else epoch, index])

    def waveform(
        self, audio: np.ndarray, rng: np.random.Generator, *, min_speed: float = 0.0
    ) -> np.ndarray:
        """Speed, then noise at an SNR against the clip, then gain. `min_speed`: the
        slowest factor allowed (so a clip still fits its 30 s window)."""
        a = self.augmentation
        if a.speeds:
            factor = max(float(rng.choice(a.speeds)), min_speed)
            audio = change_speed(audio, factor)
        if a.noise_share > 0 and rng.random() < a.noise_share:
            audio = add_noise(audio, rng, a.noise_snr_db, a.noise_dir)
        if a.gain_db:
            audio = audio * np.float32(10 ** (rng.uniform(*a.gain_db) / 20))
        return audio.astype(np.float32, copy=False)

    def mask(self, features: np.ndarray, start: int, frames: int, rng: np.random.Generator) -> None:
        """SpecAugment in place on the clip at frames [start, start + frames) of
        `features` (mel bins, frames): nothing outside it (padding, other clips) changes."""
        a = self.augmentation
        frames = max(0, min(frames, features.shape[1] - start))
        if a.time_mask_share and frames:
            for lo, hi in mask_spans(frames, a.time_mask_share, rng):
                features[:, start + lo : start + hi] = 0.0
        if a.freq_mask_share and frames:
            for lo, hi in mask_spans(features.shape[0], a.freq_mask_share, rng):
                features[lo:hi, start : start + frames] = 0.0


def change_speed(audio: np.ndarray, factor: float) -> np.ndarray:
    """Kaldi/sox speed perturbation: played `factor` times as fast (tempo and pitch), so
    the clip lasts 1/factor as long; by resampling with soxr."""
    if factor == 1.0 or len(audio) == 0:
        return audio
    import soxr

    return soxr.resample(audio, SAMPLE_RATE * factor, SAMPLE_RATE, quality="HQ")


def add_noise(
    audio: np.ndarray, rng: np.random.Generator, snr_db: tuple[float, float], noise_dir: str | None
) -> np.ndarray:
    """`audio` plus noise scaled to an SNR drawn from `snr_db` (signal power over the whole
    clip against the noise's). A silent clip is left as it is."""
    from fitwhisper.data.noise import coloured_noise, noise_from_folder

    snr = rng.uniform(*snr_db)
    n = len(audio)
    noise = noise_from_folder(noise_dir, n, rng) if noise_dir else coloured_noise(n, rng)
    signal_power = float(np.mean(np.square(audio, dtype=np.float64))) if n else 0.0
    noise_power = float(np.mean(np.square(noise, dtype=np.float64))) if n else 0.0
    if signal_power <= 0 or noise_power <= 0:
        return audio
    scale = math.sqrt(signal_power / (noise_power * 10 ** (snr / 10)))
    return audio + (noise * scale).astype(np.float32)


def mask_spans(length: int, share: float, rng: np.random.Generator) -> list[tuple[int, int]]:
    """MASKS_PER_AXIS spans of [0, length) that do not overlap and cover round(share x
    length) positions in all: the width is split at a random point, and the spans are laid
    out in random gaps (so the masked share is what was asked, not less where masks meet)."""
    total = round(share * length)
    if total <= 0:
        return []
    cut = int(rng.integers(total + 1))
    widths = [w for w in (cut, total - cut) if w > 0]
    # Sorted random offsets into the unmasked rest; each span starts past the ones before.
    offsets = np.sort(rng.integers(0, length - total + 1, size=len(widths)))
    spans, used = [], 0
    for offset, width in zip(offsets, widths, strict=True):
        lo = int(offset) + used
        spans.append((lo, lo + width))
        used += width
    return spans
