"""Frozen-encoder output cache (`fitwhisper train --freeze_encoder --cache_encoder_outputs`).

When only the decoder trains, the encoder maps each training item to the same output in
every epoch: its input is the item's log-mel padded to 30 s, its weights do not change.
`cached_encoder_data` runs the encoder once per item before training (eval mode, no
gradients, batched, on the model's device, under the run's mixed precision), keeps its
`last_hidden_state` in `RUN/encoder_cache/hidden.npy` (a float16 memory-mapped array,
`(items, 1500, d_model)`) beside the items' labels, and gives Trainer a dataset of
`{"encoder_hidden", "labels"}` with a collator that passes them on as
`encoder_outputs=(hidden,)`, which `WhisperForConditionalGeneration.forward` takes instead
of running the encoder. No audio is decoded and no encoder runs after the first pass.

`key.json` records what the cache was made from (model, encoder weights, items, dtype);
a later run in the same folder (a resumed one, or a re-run) reuses a cache whose key
matches and rebuilds one whose key differs. The key is written last, so a build that was
interrupted is never reused.

Float16 on disk: half the disk and reads of float32, and its rounding (relative 2^-11)
is finer than bf16 mixed precision's (2^-8). In fp32 runs the training losses stay within
1e-4 relative of training on audio (tests/data/test_encoder_cache.py) and within 1e-5
absolute on offline/base (bench/RESULTS-encoder-cache.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "encoder_cache"
CACHE_DTYPE = np.float16  # on disk; cast to the model's dtype per batch
_FORMAT = 1  # bump when the files' layout changes: older caches are then rebuilt


def cached_encoder_data(
    dataset: Dataset, model, collator, cfg, precision: str = "fp32"
) -> tuple[Dataset, Any]:
    """The training dataset and collator with the encoder's outputs computed once.

    Args:
        dataset: the training items, `{"input_features": (n_mels, 3000) float32,
            "labels": list[int]}` each (a `SpeechDataset` or `packing.PackedDataset`).
        model: the model to train (a PeftModel with decoder adapters is fine); its encoder
            must be frozen.
        collator: the per-clip `WhisperCollator`; it keeps making the labels.
        cfg: the `TrainConfig` (output_dir, batch size, workers).
        precision: the run's precision (fp32, fp16, bf16), as `train` resolved it.

    Returns:
        (EncoderCacheDataset, EncoderCacheCollator).

    Raises:
        ConfigError: the model's encoder changes its input or output from epoch to epoch
            (SpecAugment, a trainable encoder or encoder adapters), or the disk is too small.
    """
    encoder = model.get_encoder()
    if found := model_problems(model):
        raise ConfigError(
            "the options conflict:\n  - " + "\n  - ".join(found),
            hint="train without --cache_encoder_outputs, or change the model as listed",
        )
    _warn_about_encoder_randomness(model.config)
    # Under a launcher the main process builds it and the others reuse it (train/setup.py).
    folder = Path(cfg.output_dir) / CACHE_DIR_NAME
    param = next(encoder.parameters())
    device = training_device(param.device)
    if device != param.device:
        # Before Trainer moves the model: the pass runs where training will, not on the CPU.
        # The whole model moves: an encoder on the GPU beside a decoder on the CPU made
        # scoring before training generate across two devices (the GPU check, H200).
        model.to(device)
    key = {
        "format": _FORMAT,
        "model": str(getattr(model.config, "_name_or_path", "")),
        "encoder_weights": _weights_checksum(encoder),
        "items": len(dataset),
        "items_sha256": items_fingerprint(dataset),
        "frames": int(model.config.max_source_positions),
        "d_model": int(model.config.d_model),
        "dtype": np.dtype(CACHE_DTYPE).name,
        "compute": _autocast_name(precision, device),
    }
    cache = EncoderCache(folder)
    if cache.matches(key):
        log.info(
            "encoder cache: reusing %s (%d items, %.2f GiB)", folder, len(dataset), cache.gib()
        )
    else:
        cache.build(dataset, encoder, key, cfg)
    dtype = param.dtype if param.dtype.is_floating_point else torch.float32
    return EncoderCacheDataset(cache, dataset), EncoderCacheCollator(collator, dtype=dtype)


def training_device(where: torch.device) -> torch.device:
    """Where the encoder runs for the cache: the GPU this process trains on (LOCAL_RANK's
    under a launcher) when its weights are still on the CPU; else where they are (a
    quantised base is placed on its GPU when it loads)."""
    from fitwhisper.precision import training_device_index

    if where.type == "cpu" and torch.cuda.is_available():
        return torch.device("cuda", training_device_index())
    return where


def model_problems(model) -> list[str]:
    """Why this model's encoder outputs cannot be cached (empty: they can)."""
    problems = []
    cfg = model.config
    if getattr(cfg, "apply_spec_augment", False) and (
        cfg.mask_time_prob > 0 or cfg.mask_feature_prob > 0
    ):
        problems.append(
            "--cache_encoder_outputs with SpecAugment on in the model's config "
            f"(apply_spec_augment, mask_time_prob {cfg.mask_time_prob}, mask_feature_prob "
            f"{cfg.mask_feature_prob}): cached encoder outputs would train on unmasked input "
            "in every epoch"
        )
    encoder = model.get_encoder()
    if any("lora_" in name for name, _ in encoder.named_modules()):
        problems.append(
            "--cache_encoder_outputs with LoRA adapters in the encoder: they change its "
            "outputs as they train; add --freeze_encoder to put adapters in the decoder only"
        )
    elif any(p.requires_grad for p in encoder.parameters()):
        problems.append("--cache_encoder_outputs with a trainable encoder: add --freeze_encoder")
    return problems


def _warn_about_encoder_randomness(cfg) -> None:
    """Dropout and layer drop are config values the encoder shares with the decoder; the
    cached outputs are computed without them (eval mode), the decoder keeps them."""
    fields = ("dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop")
    on = {f: getattr(cfg, f, 0.0) for f in fields if getattr(cfg, f, 0.0)}
    if on:
        log.warning(
            "encoder cache: the encoder's outputs are computed once without %s (the "
            "decoder keeps them); train without --cache_encoder_outputs to apply them to "
            "the encoder in every epoch",
            ", ".join(f"{k} {v}" for k, v in on.items()),
        )


def option_problems(model_cfg, train_cfg) -> list[str]:
    """Conflicts of --cache_encoder_outputs with other options, known before loading."""
    if not train_cfg.cache_encoder_outputs:
        return []
    problems = []
    if not model_cfg.freeze_encoder:
        problems.append(
            "--cache_encoder_outputs needs --freeze_encoder: a trained encoder's outputs "
            "change every step"
        )
    # auto is answered full with the cache (train/run_plan.py); only a mode asked for conflicts.
    asked = train_cfg.encoder_input != "auto" or train_cfg.short_encoder_input
    if asked and (mode := train_cfg.encoder_input_mode) != "full":
        problems.append(
            f"--cache_encoder_outputs and --encoder_input {mode}: the cache holds the "
            "encoder's outputs of 30 s windows, a trimmed batch has fewer frames; use "
            "--encoder_input full with the cache"
        )
    return problems


def items_fingerprint(dataset: Dataset) -> str:
    """sha256 of what decides the items: the dataset's kind and settings, each row's audio
    (path, size, modification time), transcript and language, and packed windows."""
    h = hashlib.sha256(type(dataset).__name__.encode())
    settings = {
        k: v
        for k, v in sorted(vars(dataset).items())
        if isinstance(v, (str, int, float, bool)) or v is None
    }
    h.update(json.dumps(settings, sort_keys=True).encode())
    for row in getattr(dataset, "rows", ()):
        h.update(json.dumps([_audio_identity(row.audio), row.text, row.language]).encode())
    for window in getattr(dataset, "windows", ()):
        h.update(repr(window).encode())
    return h.hexdigest()


class EncoderCache:
    """The files of one cache: `hidden.npy` (items, frames, d_model), `labels.json`,
    `key.json` (written last)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.hidden_path = self.folder / "hidden.npy"
        self.labels_path = self.folder / "labels.json"
        self.key_path = self.folder / "key.json"

    def matches(self, key: dict) -> bool:
        try:
            found = json.loads(self.key_path.read_text())
        except (OSError, ValueError):
            return False
        return found == key and self.hidden_path.is_file() and self.labels_path.is_file()

    def gib(self) -> float:
        return self.hidden_path.stat().st_size / 2**30

    def hidden(self) -> np.ndarray:
        return np.load(self.hidden_path, mmap_mode="r")

    def labels(self) -> list[list[int]]:
        return json.loads(self.labels_path.read_text())

    def build(self, dataset: Dataset, encoder, key: dict, cfg) -> None:
        """Run the encoder over every item and write the files (the key last)."""
        n, frames, d_model = key["items"], key["frames"], key["d_model"]
        size_gib = n * frames * d_model * np.dtype(CACHE_DTYPE).itemsize / 2**30
        self.folder.mkdir(parents=True, exist_ok=True)
        self.key_path.unlink(missing_ok=True)  # from here on the old cache is invalid
        free_gib = shutil.disk_usage(self.folder).free / 2**30
        log.info(
            "encoder cache: %d items x %d x %d %s = %.2f GiB in %s (%.1f GiB free)",
            n,
            frames,
            d_model,
            key["dtype"],
            size_gib,
            self.folder,
            free_gib,
        )
        if size_gib > free_gib:
            raise ConfigError(
                f"--cache_encoder_outputs needs {size_gib:.1f} GiB in {self.folder} and "
                f"{free_gib:.1f} GiB are free",
                hint="free disk space, choose an --output_dir on a larger disk, or train "
                "without --cache_encoder_outputs",
            )
        t0 = time.perf_counter()
        partial = self.folder / "hidden.partial.npy"
        out = np.lib.format.open_memmap(
            partial, mode="w+", dtype=CACHE_DTYPE, shape=(n, frames, d_model)
        )
        labels = _run_encoder(dataset, encoder, out, cfg, autocast=key["compute"])
        out.flush()
        del out
        os.replace(partial, self.hidden_path)
        self.labels_path.write_text(json.dumps(labels))
        self.key_path.write_text(json.dumps(key, indent=2) + "\n")
        log.info(
            "encoder cache: built %.2f GiB in %.1f s (%.2f s per item)",
            self.gib(),
            time.perf_counter() - t0,
            (time.perf_counter() - t0) / max(n, 1),
        )


class EncoderCacheDataset(Dataset):
    """Items `{"encoder_hidden": (frames, d_model) float16, "labels": list[int]}` read from
    the cache; `lengths` and `n_clips` come from the dataset it was made of."""

    def __init__(self, cache: EncoderCache, base: Dataset) -> None:
        self.cache = cache
        self.base = base
        self._labels = cache.labels()
        self._hidden: np.ndarray | None = None  # opened lazily: one map per worker process

    def __len__(self) -> int:
        return len(self._labels)

    def __getattr__(self, name: str):
        if name in ("lengths", "n_clips"):
            return getattr(self.base, name)
        raise AttributeError(name)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_hidden": None}

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._hidden is None:
            self._hidden = self.cache.hidden()
        return {"encoder_hidden": np.array(self._hidden[i]), "labels": self._labels[i]}


class EncoderCacheCollator:
    """Stacks cached encoder outputs into `encoder_outputs=(hidden,)`, `(batch, frames,
    d_model)` in the model's dtype; `collator` makes the labels. Items with audio features
    (evaluation during training) go to `collator` unchanged: they run the whole model."""

    def __init__(self, collator, *, dtype: torch.dtype = torch.float32) -> None:
        self.collator = collator
        self.dtype = dtype

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        if "encoder_hidden" not in features[0]:
            return self.collator(features)
        hidden = torch.from_numpy(np.stack([f["encoder_hidden"] for f in features]))
        # A tuple: Trainer moves nested tuples of tensors to the device, and Whisper's
        # forward takes a tuple's first element as the encoder's last_hidden_state.
        return {
            "encoder_outputs": (hidden.to(self.dtype),),
            "labels": self.collator.labels(features),
        }


def _run_encoder(dataset: Dataset, encoder, out: np.ndarray, cfg, *, autocast: str) -> list:
    """Fill `out` with the encoder's last_hidden_state of every item; return the labels."""
    from fitwhisper.logs import progress_enabled

    param = next(encoder.parameters())
    device = param.device
    dtype = param.dtype if param.dtype.is_floating_point else torch.float32
    loader = DataLoader(
        dataset,
        batch_size=cfg.per_device_train_batch_size,
        shuffle=False,
        num_workers=cfg.dataloader_num_workers,
        collate_fn=_as_list,
    )
    bar = None
    if progress_enabled():
        from tqdm import tqdm

        bar = tqdm(total=len(dataset), desc="caching encoder outputs", unit="item")
    labels: list[list[int]] = []
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.no_grad(), _autocast(autocast, device):
            at = 0
            for items in loader:
                features = torch.from_numpy(np.stack([x["input_features"] for x in items]))
                hidden = encoder(features.to(device=device, dtype=dtype)).last_hidden_state
                hidden = hidden.to(torch.float32).cpu().numpy()
                if not np.isfinite(hidden).all():
                    raise RuntimeError(f"the encoder gave non-finite outputs for items {at}..")
                out[at : at + len(items)] = hidden.astype(CACHE_DTYPE)
                labels += [list(map(int, x["labels"])) for x in items]
                at += len(items)
                if bar is not None:
                    bar.update(len(items))
    finally:
        encoder.train(was_training)
        if bar is not None:
            bar.close()
    return labels


def _as_list(items: list) -> list:
    return items


def _autocast_name(precision: str, device: torch.device) -> str:
    """The dtype Trainer's mixed precision gives the encoder: bfloat16, float16 or none."""
    if device.type == "cpu":
        return "none"
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "none")


def _autocast(name: str, device: torch.device):
    import contextlib

    if name == "none":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, name))


def _weights_checksum(encoder) -> str:
    """A cheap fingerprint of the encoder's weights (sum and sum of squares per tensor, 6
    significant digits), so a different model in the same folder rebuilds the cache."""
    with torch.no_grad():
        sums = [
            (float(p.double().sum()), float(p.double().square().sum()))
            for p in encoder.parameters()
        ]
    return hashlib.sha256(
        json.dumps([[f"{a:.6g}", f"{b:.6g}"] for a, b in sums]).encode()
    ).hexdigest()


def _audio_identity(audio) -> list:
    if isinstance(audio, (str, Path)):
        try:
            st = Path(audio).stat()
            return [str(audio), st.st_size, st.st_mtime_ns]
        except OSError:
            return [str(audio)]
    return [str(getattr(audio, "name", audio))]
