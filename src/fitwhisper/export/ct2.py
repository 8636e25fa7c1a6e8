"""`fitwhisper export MODEL OUT`: write a model as a CTranslate2 (faster-whisper) folder.

MODEL is anything the resolver accepts; a LoRA adapter is merged into its base first. The
conversion itself (CTranslate2's own `TransformersConverter`) is `models.ct2_export`'s;
this module checks the destination and reports what was written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fitwhisper.errors import ConfigError
from fitwhisper.models.ct2_export import QUANTIZATIONS
from fitwhisper.output_guard import Output, check_outputs, replace_folder

if TYPE_CHECKING:
    from fitwhisper.models.resolve import ResolvedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    out: Path
    source: str
    quantization: str
    size_mb: float


def export_ct2(
    model_spec: str | Path | ResolvedModel,
    out: str | Path,
    *,
    quantization: str = "int8",
    overwrite: bool = False,
) -> ExportResult:
    """Write a CTranslate2 model folder that faster-whisper loads.

    Raises:
        ConfigError: unknown quantization, or `out` exists and `overwrite` is off.
        ModelLoadError: the model cannot be resolved or converted.
        DivergenceError: the model has NaN or Inf weights.
    """
    from fitwhisper.models.ct2_export import convert_to_ct2
    from fitwhisper.models.resolve import as_resolved

    if quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown --quantization {quantization!r}", hint="use " + ", ".join(QUANTIZATIONS)
        )
    dest = Path(out)
    model = as_resolved(model_spec)
    # Before the conversion, not after it (fitwhisper.output_guard).
    inputs = {"MODEL": model.spec, "MODEL (resolved)": model.path_or_id, "adapter": model.adapter}
    check_outputs([Output("OUT", dest, "new_folder", replace=overwrite)], inputs)
    replace_folder(dest)
    convert_to_ct2(model, dest, quantization)
    size = sum(f.stat().st_size for f in dest.iterdir()) / 1e6
    log.info("exported %s to %s (%s, %.0f MB)", model.spec, dest, quantization, size)
    return ExportResult(dest, model.spec, quantization, size)


def check_ct2(model_dir: Path, *, quantization: str = "int8") -> None:
    """What CTranslate2's converter refuses and can be seen without weights: an unknown
    quantization, a folder that is not a transformers Whisper model.

    Raises:
        ConfigError: either.
    """
    import json

    if quantization not in QUANTIZATIONS:
        raise ConfigError(
            f"unknown --quantization {quantization!r}", hint="use " + ", ".join(QUANTIZATIONS)
        )
    hint = "export needs a Whisper model in transformers format (or a LoRA adapter on one)"
    config = Path(model_dir) / "config.json"
    try:
        kind = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise ConfigError(f"{model_dir} has no readable config.json ({e})", hint=hint) from e
    if kind != "whisper":
        raise ConfigError(f"{model_dir} is not a Whisper model (model_type {kind!r})", hint=hint)


def transcribe_ct2(
    dest: Path,
    audios: list,
    *,
    language: str | None,
    task: str = "transcribe",
    timestamps: bool = False,
    threads: int = 2,
) -> list[dict]:
    """faster-whisper on the exported folder, greedy without temperature fallback or voice
    activity detection (the settings the other formats' engines run with); language None:
    what the export recorded for the fine-tune, else faster-whisper's detection. A clip
    under 30 s is given padded with silence to 30 s, as the model saw clips in training
    (`data.audio.padded_like_training`); segment times stay inside the clip."""
    import json

    from faster_whisper import WhisperModel

    from fitwhisper.data.audio import padded_like_training
    from fitwhisper.models.ct2_export import EXPORT_INFO
    from fitwhisper.whisper_facts import SAMPLE_RATE, language_code

    info_file = Path(dest) / EXPORT_INFO
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    recorded = info.get("language")
    language = language or (language_code(recorded) if recorded else None)
    model = WhisperModel(str(dest), device="cpu", compute_type="default", cpu_threads=threads)
    out = []
    for audio in audios:
        duration = len(audio) / SAMPLE_RATE
        segments, meta = model.transcribe(
            padded_like_training(audio),
            language=language,
            task=task,
            beam_size=1,
            temperature=0.0,
            without_timestamps=not timestamps,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        segs = [
            {"start": min(s.start, duration), "end": min(s.end, duration), "text": s.text.strip()}
            for s in segments
        ]
        out.append(
            {
                "text": " ".join(s["text"] for s in segs).strip(),
                "language": meta.language,
                "segments": segs,
            }
        )
    return out
