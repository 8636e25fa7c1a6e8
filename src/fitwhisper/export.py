"""Export a model to CTranslate2 (faster-whisper) and check it still scores the same.

Run with `fitwhisper export MODEL OUT [--quantization int8] [--manifest M]`. MODEL is
anything the resolver accepts; a LoRA adapter is merged into its base first (merge.py).
The conversion is CTranslate2's own `TransformersConverter`. With a manifest, the source
model (transformers, greedy) and the exported one (faster-whisper, greedy) transcribe the
same rows and are scored with the same metric and normaliser as `fitwhisper evaluate`.

`cached_ct2` is the same export into the cache, keyed by the model folder's files, for
`fitwhisper transcribe --engine ct2` on a transformers model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fitwhisper.errors import ConfigError, ModelLoadError
from fitwhisper.scoring import Score

log = logging.getLogger(__name__)

Quantization = Literal["float32", "float16", "int8_float16", "int8", "int8_float32"]
QUANTIZATIONS: tuple[str, ...] = ("float32", "float16", "int8_float16", "int8", "int8_float32")


@dataclass(frozen=True)
class ExportResult:
    out: Path
    source: str
    quantization: str
    size_mb: float


@dataclass(frozen=True)
class Rescore:
    """The source and the exported model on the same rows, same metric and normaliser."""

    source: Score
    exported: Score
    n_rows: int

    def as_dict(self) -> dict:
        m = self.source.metric
        return {
            "metric": m,
            "normalizer": self.source.normalizer,
            "rows": self.n_rows,
            "source": self.source.as_dict(),
            "exported": self.exported.as_dict(),
            "difference": {m: self.exported.normalized - self.source.normalized},
        }

    def format(self) -> str:
        m = self.source.metric.upper()
        d = 100 * (self.exported.normalized - self.source.normalized)
        return (
            f"{m} ({self.source.normalizer}) on {self.n_rows} rows: "
            f"source {100 * self.source.normalized:.2f}%, "
            f"exported {100 * self.exported.normalized:.2f}%  ({d:+.2f} points)"
        )


def export_ct2(
    model_spec: str,
    out: str | Path,
    *,
    quantization: str = "int8",
    overwrite: bool = False,
) -> ExportResult:
    """Write a CTranslate2 model folder that faster-whisper loads.

    Raises:
        ConfigError: unknown quantization, or `out` exists and `overwrite` is off.
        ModelLoadError: the model cannot be resolved or converted.
    """
    if quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown --quantization {quantization!r}", hint="use " + ", ".join(QUANTIZATIONS)
        )
    dest = Path(out)
    if dest.exists() and any(dest.iterdir()):
        if not overwrite:
            raise ConfigError(f"{dest} exists and is not empty", hint="pass --force to replace it")
        shutil.rmtree(dest)
    _convert(model_spec, dest, quantization)
    size = sum(f.stat().st_size for f in dest.iterdir()) / 1e6
    log.info("exported %s to %s (%s, %.0f MB)", model_spec, dest, quantization, size)
    return ExportResult(dest, str(model_spec), quantization, size)


def cached_ct2(model_spec: str, quantization: str) -> Path:
    """The CTranslate2 export of a model in CACHE/ct2-export/<hash>/, made on first use and
    reused while the model's files (names, sizes, modification times) stay the same."""
    import ctranslate2

    from fitwhisper.models.offline import cache_dir, convert_cached, stamp_hash
    from fitwhisper.models.resolve import resolve_model

    resolved = resolve_model(model_spec)
    stamp = {
        "model": _fingerprint(resolved.path_or_id),
        "adapter": _fingerprint(resolved.adapter) if resolved.adapter else None,
        "quantization": quantization,
        "ctranslate2": ctranslate2.__version__,
    }
    dest = cache_dir() / "ct2-export" / stamp_hash(stamp)
    return convert_cached(
        dest,
        stamp,
        lambda d: _convert(model_spec, d, quantization),
        what=f"{model_spec} for CTranslate2 ({quantization}; first use only)",
    )


def rescore(
    source_spec: str,
    exported: str | Path,
    manifest: str | Path,
    *,
    language: str | None = None,
    max_samples: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    opencc: str | None = None,
) -> Rescore:
    """Score the source model and its export on the same manifest rows (greedy, no
    temperature fallback, no timestamps: the settings of `fitwhisper evaluate`); `opencc`
    converts both sides' script before scoring, as `evaluate --opencc` does."""
    from fitwhisper.data.audio import load_audio
    from fitwhisper.evaluate import checked_rows, evaluate_manifest, make_scorer, scoring_language
    from fitwhisper.models.resolve import load_processor
    from fitwhisper.scoring import score
    from fitwhisper.transcribe.ct2_engine import CT2Engine
    from fitwhisper.transcribe.options import TranscribeOptions

    source = evaluate_manifest(
        source_spec,
        manifest,
        language=language,
        max_samples=max_samples,
        batch_size=batch_size,
        opencc=opencc,
    )
    rows, _ = checked_rows(manifest, load_processor(source_spec), "error", max_samples)
    opts = TranscribeOptions(
        language=language,
        timestamps="none",
        temperature_fallback=False,
        condition_on_previous_text=False,
        batch_size=batch_size,
    )
    engine = CT2Engine(exported, opts, device)
    texts = [
        t.text for t in engine.transcribe([r.id for r in rows], [load_audio(r.audio) for r in rows])
    ]
    metric, norm = make_scorer(scoring_language(rows, language), opencc=opencc)
    exported_score = score([r.text for r in rows], texts, metric, norm)
    return Rescore(source.score, exported_score, len(rows))


# --- helpers ------------------------------------------------------------------------------


def _convert(model_spec: str, dest: Path, quantization: str) -> None:
    """Merge if needed, convert with ctranslate2's TransformersConverter into a temporary
    sibling of `dest`, add what faster-whisper reads besides the weights, rename."""
    from ctranslate2.converters import TransformersConverter

    from fitwhisper.models.resolve import load_processor, resolve_model

    resolved = resolve_model(model_spec)
    processor = load_processor(model_spec)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=dest.parent) as tmp:
        source = resolved.path_or_id
        if resolved.adapter is not None:
            from fitwhisper.merge import merge_adapter

            source = merge_adapter(model_spec, Path(tmp) / "merged").out
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
                f"CTranslate2 could not convert {model_spec}: {e}",
                hint="export needs a Whisper model in transformers format (or a LoRA adapter "
                "on one)",
            ) from e
        processor.feature_extractor.to_json_file(str(work / "preprocessor_config.json"))
        gen = _generation_config(source)
        info = {
            "source": str(model_spec),
            "quantization": quantization,
            "language": gen.get("language"),
            "task": gen.get("task"),
        }
        (work / "fitwhisper_export.json").write_text(json.dumps(info, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work, dest)


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
