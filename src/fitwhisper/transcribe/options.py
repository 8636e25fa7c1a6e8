"""The settings of one `fitwhisper transcribe` call, shared by both engines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Engine = Literal["auto", "transformers", "ct2"]
Mode = Literal["auto", "sequential", "batched"]
Timestamps = Literal["none", "segment", "word"]

SHORT_CLIP_S = 30.0  # one Whisper window: clips up to this long are decoded in one pass
# Whisper's temperature fallback schedule (openai-whisper's default).
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class TranscribeOptions:
    """How to decode. None thresholds mean the engine's own default (see README)."""

    language: str | None = None  # None: the model's own (a fine-tune's), else detected
    task: Literal["transcribe", "translate"] = "transcribe"
    beam_size: int = 1
    timestamps: Timestamps = "segment"
    initial_prompt: str | None = None
    condition_on_previous_text: bool = True
    temperature_fallback: bool = True
    compression_ratio_threshold: float | None = None
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    batch_size: int = 8
    max_new_tokens: int | None = None  # per 30 s window; None: up to the model's limit
    mode: Mode = "auto"
    device: str = "auto"
    compute_type: str = "auto"  # CTranslate2 only: int8 on CPU, float16 on CUDA
    threads: int = 0  # CPU threads; 0 = the library's default
    opencc: str | None = None  # convert the output's script, e.g. s2tw

    @property
    def temperatures(self) -> tuple[float, ...]:
        return FALLBACK_TEMPERATURES if self.temperature_fallback else (0.0,)
