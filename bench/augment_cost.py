"""What each training augmentation costs per clip on this CPU (data/augment.py), against
making the clip's log-mel (what every training item costs anyway) and, where it is
installed, audiomentations' nearest transform.

    PYTHONPATH=src python bench/augment_cost.py [--clip_s 5] [--repeats 50]
        [--audiomentations /path/to/site-packages]   # compare with audiomentations

One thread (a dataloader worker's share); the median over `repeats` clips of a real
recording when ../shared/data has one, else a tone with noise. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

SR = 16_000
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _clip(seconds: float) -> tuple[np.ndarray, str]:
    from fitwhisper.data.audio import load_audio

    for wav in sorted(SHARED.rglob("*.flac"))[:200] if SHARED.is_dir() else []:
        audio = load_audio(str(wav))
        if len(audio) >= seconds * SR:
            return audio[: int(seconds * SR)], str(wav.relative_to(SHARED))
    t = np.arange(int(seconds * SR)) / SR
    rng = np.random.default_rng(0)
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    ), "a tone with noise"


def _ms(fn, repeats: int) -> float:
    fn(0)  # warm: imports, caches
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        fn(i + 1)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip_s", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--audiomentations", help="a folder that holds audiomentations")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    import tempfile

    import soundfile as sf
    from transformers import WhisperFeatureExtractor

    from fitwhisper.data.augment import PRESETS, Augmentation, Augmenter, add_noise, change_speed

    audio, source = _clip(args.clip_s)
    fe = WhisperFeatureExtractor(feature_size=80)
    features = fe(audio, sampling_rate=SR, return_tensors="np").input_features[0]
    frames = len(audio) // 160
    noise_dir = Path(tempfile.mkdtemp())
    sf.write(noise_dir / "noise.wav", 0.1 * np.random.default_rng(1).standard_normal(60 * SR), SR)

    def rng(i):
        return np.random.default_rng(i)

    masks = Augmenter(Augmentation(time_mask_share=0.15, freq_mask_share=0.2), 0)
    rows = [
        (
            "log-mel of the clip (WhisperFeatureExtractor, every item)",
            lambda i: fe(audio, sampling_rate=SR, return_tensors="np"),
        ),
        ("speed 0.9 (soxr HQ)", lambda i: change_speed(audio, 0.9)),
        ("speed 1.1 (soxr HQ)", lambda i: change_speed(audio, 1.1)),
        ("noise, generated coloured", lambda i: add_noise(audio, rng(i), (5, 20), None)),
        (
            "noise, from --noise_dir (decoded file cached)",
            lambda i: add_noise(audio, rng(i), (5, 20), str(noise_dir)),
        ),
        ("gain", lambda i: audio * np.float32(10 ** (rng(i).uniform(-6, 6) / 20))),
        (
            "SpecAugment masks (on a copy of the log-mel)",
            lambda i: masks.mask(features.copy(), 0, frames, rng(i)),
        ),
        (
            "all of --augment strong: waveform parts + masks, log-mel not counted",
            lambda i: _strong(Augmenter(PRESETS["strong"], 0, i), audio, features),
        ),
    ]
    if args.audiomentations:
        sys.path.append(args.audiomentations)
        import audiomentations as am

        colour = am.AddColorNoise(min_snr_db=5, max_snr_db=20, p=1.0)
        background = am.AddBackgroundNoise(
            sounds_path=str(noise_dir), min_snr_db=5, max_snr_db=20, p=1.0
        )
        gain = am.Gain(min_gain_db=-6, max_gain_db=6, p=1.0)
        stretch = am.TimeStretch(min_rate=0.9, max_rate=0.9, p=1.0)
        rows += [
            (f"audiomentations {am.__version__} AddColorNoise", lambda i: colour(audio, SR)),
            ("audiomentations AddBackgroundNoise", lambda i: background(audio, SR)),
            ("audiomentations Gain", lambda i: gain(audio, SR)),
            ("audiomentations TimeStretch 0.9 (keeps pitch)", lambda i: stretch(audio, SR)),
        ]
    print(f"{args.clip_s:g} s clip ({source}), one thread, median of {args.repeats}:\n")
    print("| augmentation | ms per clip |\n|---|---:|")
    for name, fn in rows:
        print(f"| {name} | {_ms(fn, args.repeats):.2f} |")


def _strong(augmenter, audio, features) -> None:
    """Each clip's draws (noise for 60% of them), on its own epoch's generator."""
    rng = augmenter.for_clip(0)
    out = augmenter.waveform(audio, rng)
    augmenter.mask(features.copy(), 0, len(out) // 160, rng)


if __name__ == "__main__":
    main()
