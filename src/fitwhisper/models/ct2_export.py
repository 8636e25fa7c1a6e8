"""Convert a model to CTranslate2 (faster-whisper): into a folder, or once into the cache.

`convert_to_ct2` merges a LoRA adapter into its base first (`models.merge`), then runs
CTranslate2's own `TransformersConverter` and adds what faster-whisper reads besides the
weights. `cached_ct2` is the same conversion into CACHE/ct2-export/<hash>/, keyed by the
model folder's files, for `fitwhisper transcribe --engine ct2` on a transformers model.
`fitwhisper export` (the `export` package) writes a folder of the user's choosing with it.

Both take a `ResolvedModel`: the caller resolves the model spec once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fitwhisper.errors import DivergenceError, ModelLoadError
from fitwhisper.models.short_window import recorded_window
from fitwhisper.output_guard import as_if_made_by_mkdir

if TYPE_CHECKING:
    from fitwhisper.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

Quantization = Literal["float32", "float16", "int8_float16", "int8", "int8_float32"]
QUANTIZATIONS: tuple[str, ...] = ("float32", "float16", "int8_float16", "int8", "int8_float32")
EXPORT_INFO = "fitwhisper_export.json"  # source, quantization, language, task


def cached_ct2(model: ResolvedModel, quantization: str) -> Path:
    """The CTranslate2 export of a model in CACHE/ct2-export/<hash>/, made on first use and
    reused while the model's files (names, sizes, modification times) stay the same."""
    import ctranslate2

    from fitwhisper.models.offline import cache_dir, convert_cached, stamp_hash

    # The stamp's keys are those of the first release: existing cache entries stay valid.
    stamp = {
        "model": _fingerprint(model.path_or_id),
        "adapter": _fingerprint(model.adapter) if model.adapter else None,
        "quantization": quantization,
        "ctranslate2": ctranslate2.__version__,
    }
    dest = cache_dir() / "ct2-export" / stamp_hash(stamp)
    return convert_cached(
        dest,
        stamp,
        lambda d: convert_to_ct2(model, d, quantization),
        what=f"{model.spec} for CTranslate2 ({quantization}; first use only)",
    )


WORK_PREFIX = ".export-"  # the converter's work folder beside its destination, then its pid


def convert_to_ct2(model: ResolvedModel, dest: Path, quantization: str) -> None:
    """Merge if needed, convert with ctranslate2's TransformersConverter into a temporary
    sibling of `dest`, add what faster-whisper reads besides the weights, rename.

    Raises:
        ModelLoadError: CTranslate2 cannot convert the model.
        DivergenceError: a weight is NaN or Inf (a diverged run's model is never exported).
    """
    from ctranslate2.converters import TransformersConverter

    from fitwhisper.models.resolve import load_processor

    processor = load_processor(model)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=dest.parent) as tmp:
        source = model.path_or_id
        if model.adapter is not None:
            from fitwhisper.models.merge import merge_adapter

            source = merge_adapter(model, Path(tmp) / "merged").out
        refuse_nonfinite(Path(source), model.spec)
        work = Path(tmp) / "ct2"
        try:
            # tokenizer.json is copied by the converter; transformers 5 keeps the feature
            # extractor's settings in processor_config.json, which faster-whisper does not
            # read, so preprocessor_config.json (n_mels, ...) is written below instead.
            TransformersConverter(str(source), copy_files=["tokenizer.json"]).convert(
                str(work), quantization=quantization, force=True
            )
        except (ValueError, OSError, RuntimeError) as e:
            raise ModelLoadError(
                f"CTranslate2 could not convert {model.spec}: {e}",
                hint="export needs a Whisper model in transformers format (or a LoRA adapter "
                "on one)",
            ) from e
        processor.feature_extractor.to_json_file(str(work / "preprocessor_config.json"))
        gen = _generation_config(source)
        info = {
            "source": model.spec,
            "quantization": quantization,
            "language": gen.get("language"),
            "task": gen.get("task"),
            # What `fitwhisper transcribe --encoder_window auto` uses on the folder.
            "encoder_window": recorded_window(source),
        }
        (work / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n")
        as_if_made_by_mkdir(work)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work, dest)


def export_info(folder: Path) -> dict:
    """A CTranslate2 folder's EXPORT_INFO (source, language, task, encoder window); {} for a
    folder without one (not exported by fitwhisper) or one that cannot be read."""
    try:
        return json.loads((Path(folder) / EXPORT_INFO).read_text())
    except (OSError, ValueError):
        return {}


# --- helpers ------------------------------------------------------------------------------


def refuse_nonfinite(folder: Path, spec: str) -> None:
    """Raise DivergenceError when a floating-point tensor of the folder's safetensors files
    holds NaN or Inf: one pass over the weights, one tensor in memory at a time."""
    import torch
    from safetensors import safe_open

    for file in sorted(folder.glob("*.safetensors")) if folder.is_dir() else ():
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                t = f.get_tensor(name)
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    raise DivergenceError(
                        f"{spec} has non-finite weights (NaN or Inf, first: {name}): not exported",
                        hint="export an earlier checkpoint of the run, or train again with a "
                        "lower --learning_rate after `fitwhisper check-data`",
                    )


def _generation_config(source) -> dict:
    path = Path(str(source)) / "generation_config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _fingerprint(folder) -> list | str:
    path = Path(str(folder))
    if not path.is_dir():
        return str(folder)  # a Hub id: its revision is the Hub cache's business
    return [
        [f.name, f.stat().st_size, f.stat().st_mtime_ns]
        for f in sorted(path.iterdir())
        if f.is_file() and not f.name.startswith(".")
    ]
