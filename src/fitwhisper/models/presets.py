"""Per-model defaults: what a model is for, filled in where the user left an option unset.

Breeze-ASR-25 (MediaTek Research) is Whisper large-v2 (80 mel bins, 51865 tokens) fine-tuned
for Taiwanese Mandarin and Mandarin-English code-switching: its users want language zh,
transcription, and Traditional characters. Its architecture for memory planning lives in
memory/architectures.py (so `fitwhisper plan` needs no download).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPreset:
    """Defaults for one model; `base` names the openai checkpoint it derives from."""

    language: str
    task: str
    output_script: str | None
    base: str
    num_mel_bins: int


MODEL_PRESETS: dict[str, ModelPreset] = {
    "MediaTek-Research/Breeze-ASR-25": ModelPreset(
        language="zh",
        task="transcribe",
        output_script="traditional",
        base="openai/whisper-large-v2",
        num_mel_bins=80,
    ),
}


def preset_for(model: str | None) -> ModelPreset | None:
    """The preset of a model spec: a Hub id, or a local copy whose folder name is the id's
    name (./Breeze-ASR-25), or None."""
    if not model:
        return None
    text = str(model).rstrip("/\\")
    if text in MODEL_PRESETS:
        return MODEL_PRESETS[text]
    name = text.replace("\\", "/").split("/")[-1].lower()
    for hub_id, preset in MODEL_PRESETS.items():
        if name == hub_id.split("/")[-1].lower():
            return preset
    return None


def preset_language(model: str | None) -> str | None:
    """The language a model's preset sets (zh for Breeze-ASR-25), or None."""
    preset = preset_for(model)
    return preset.language if preset else None


def apply_model_preset(model_cfg):
    """`model_cfg` with the preset's language and output script where they are unset (a
    given value always wins); logged, so the run record shows what was filled in."""
    preset = preset_for(model_cfg.model)
    if preset is None:
        return model_cfg
    changes = {}
    if model_cfg.language is None:
        changes["language"] = preset.language
    if getattr(model_cfg, "output_script", "none") is None:
        changes["output_script"] = preset.output_script
    if changes:
        log.info(
            "%s preset: %s", model_cfg.model, ", ".join(f"--{k} {v}" for k, v in changes.items())
        )
    return dataclasses.replace(model_cfg, **changes)
