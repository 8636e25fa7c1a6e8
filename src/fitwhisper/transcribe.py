"""Transcription with a trained (or any resolvable) model.

`transcribe_file` is the simple path the demo uses: the transformers ASR pipeline over a
model folder whose generation config already carries language and task.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def transcribe_file(model_spec: str | Path, audio_path: str | Path, *, device: str = "cpu") -> str:
    """Transcribe one audio file of up to 30 s and return the text.

    Args:
        model_spec: anything `fitwhisper.models.resolve.resolve_model` accepts, or a run's
            `final/` folder.
        audio_path: any format `fitwhisper.data.audio.load_audio` decodes.
        device: "cpu", "cuda" or "cuda:N".
    """
    from transformers import pipeline

    from fitwhisper.data.audio import SAMPLE_RATE_HZ, load_audio
    from fitwhisper.models.resolve import resolve_model

    resolved = resolve_model(str(model_spec))
    asr = pipeline("automatic-speech-recognition", model=str(resolved.path_or_id), device=device)
    audio = load_audio(audio_path)
    out = asr({"raw": audio, "sampling_rate": SAMPLE_RATE_HZ})
    return out["text"].strip()
