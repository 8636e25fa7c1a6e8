"""Whisper's log-mel spectrogram for a whole batch on the training device (`train --log_mel
device`): the data loader hands over waveforms, and the trainer turns them into features
where the model runs, so a machine with few cores per GPU is not bound by its CPU.

The arithmetic is that of transformers' `WhisperFeatureExtractor._torch_extract_fbank_features`
(torch's STFT, Hann window, the extractor's own mel filters, log10 floored 8 below each clip's
peak, scaled), with the extractor's own `n_fft`, `hop_length` and `mel_filters`. It is not
called directly because it returns numpy on the CPU: on a GPU every step would copy the
features back and forth and wait for the device. tests/data/test_log_mel.py holds it to the
extractor on real speech within `TOLERANCE`.

Batches cut short (`--encoder_input trimmed|mixed`) stay exact: the waveforms are padded with
`n_fft // 2` zeros before the STFT, so every frame kept sees what it sees in the clip padded
to 30 s, and frames past the cut are never computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# The largest difference allowed from the feature extractor, in log-mel units (features
# span about -1.5 to 1.5). On a CPU the two are bit-identical (160 real clips of the four
# shared sets, batches of 40); a GPU's FFT rounds otherwise, by an amount not yet measured.
TOLERANCE = 1e-3

# A SpecAugment mask as the data loader sends it: frames [t0, t1) x mel bins [f0, f1) of
# one item set to 0 (data/augment.py draws them in the workers, seeded per clip and epoch).
Mask = tuple[int, int, int, int]


def log_mel(
    audio: torch.Tensor, feature_extractor, masks: torch.Tensor | None = None
) -> torch.Tensor:
    """The log-mel features of `audio` (batch, samples), on its device, `(batch, mels,
    samples // hop_length)` float32, as the feature extractor makes them from each clip
    padded with zeros to the same length; `masks` (batch, k, 4) int: rectangles set to 0
    afterwards (all-zero rows are none)."""
    fe = feature_extractor
    audio = audio.to(torch.float32)
    frames = audio.shape[-1] // fe.hop_length
    if audio.shape[-1] < fe.n_samples:  # the zeros a 30 s padding would have put there
        audio = torch.nn.functional.pad(audio, (0, fe.n_fft // 2))
    window = torch.hann_window(fe.n_fft, device=audio.device)
    stft = torch.stft(audio, fe.n_fft, fe.hop_length, window=window, return_complex=True)
    # Contiguous, as transformers makes it: the matmul's strided path is far slower on CPUs.
    power = (stft[..., :frames].abs() ** 2).contiguous()
    filters = _filters(fe, audio.device)
    spec = torch.clamp(filters.T @ power, min=1e-10).log10()
    peak = spec.amax(dim=(1, 2), keepdim=True)
    spec = (torch.maximum(spec, peak - 8.0) + 4.0) / 4.0
    if masks is not None and masks.numel():
        spec = spec * keep_mask(masks.to(spec.device), spec.shape[1], spec.shape[2])
    return spec


def keep_mask(masks: torch.Tensor, mels: int, frames: int) -> torch.Tensor:
    """(batch, mels, frames) of 1.0, with 0.0 inside each item's mask rectangles."""
    t = torch.arange(frames, device=masks.device)
    f = torch.arange(mels, device=masks.device)
    keep = torch.ones(masks.shape[0], mels, frames, device=masks.device)
    for k in range(masks.shape[1]):
        t0, t1, f0, f1 = (masks[:, k, j, None] for j in range(4))
        in_time = (t >= t0) & (t < t1)  # (batch, frames)
        in_freq = (f >= f0) & (f < f1)  # (batch, mels)
        keep = keep.masked_fill(in_freq[:, :, None] & in_time[:, None, :], 0.0)
    return keep


def stack_audio(clips: Sequence[np.ndarray], samples: int) -> torch.Tensor:
    """Waveforms as one (batch, samples) float32 tensor, each cut or padded with zeros."""
    out = torch.zeros(len(clips), samples, dtype=torch.float32)
    for i, clip in enumerate(clips):
        n = min(len(clip), samples)
        out[i, :n] = torch.from_numpy(np.asarray(clip[:n], dtype=np.float32))
    return out


def stack_masks(per_item: Sequence[Sequence[Mask]]) -> torch.Tensor:
    """Each item's mask rectangles as (batch, most, 4) int64, padded with empty ones."""
    most = max((len(m) for m in per_item), default=0)
    out = torch.zeros(len(per_item), most, 4, dtype=torch.long)
    for i, masks in enumerate(per_item):
        if masks:
            out[i, : len(masks)] = torch.as_tensor(masks, dtype=torch.long)
    return out


_FILTERS: dict[str, tuple[np.ndarray, torch.Tensor]] = {}


def _filters(fe, device: torch.device) -> torch.Tensor:
    """The extractor's mel filters as a float32 tensor on `device`, copied there once per
    device (and again when another extractor's filters come)."""
    held = _FILTERS.get(str(device))
    if held is None or held[0] is not fe.mel_filters:
        tensor = torch.from_numpy(np.asarray(fe.mel_filters)).to(device, torch.float32)
        held = _FILTERS[str(device)] = (fe.mel_filters, tensor)
    return held[1]
