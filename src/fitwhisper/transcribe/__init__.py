"""Transcription: files of any length, two engines, five output formats.

    fitwhisper transcribe --model MODEL AUDIO... [--output_dir DIR --output_format srt]

- `inputs`: files, folders and list files to audio paths, with per-input problems
- `options`: the decoding settings shared by both engines, and the job (inputs, outputs)
- `engine`: what `run` asks of an engine (`Engine`), the shape both engines have
- `hf_engine`: transformers' `generate` (long-form, batched; LoRA adapters unmerged)
- `ct2_engine`: faster-whisper on a CTranslate2 folder (sequential or batched)
- `ct2_short_window`: its batched pipeline on the short encoder window, for a model whose
  training chose it
- `ct2_padding`: short clips padded with silence before faster-whisper's log-mel, as in
  training (faster-whisper fills the window with zeros), and the batched pipeline's prompt
  written as `prompt` writes it
- `ct2_tails`: speech the batched pipeline cut into a chunk but never decoded (an early
  end-of-text), decoded again
- `speech`: where the speech is (voice activity, or an energy gate), and its times mapped
  back onto the file: both engines decode speech only
- `repeats`: the guard that drops a text repeated segment after segment (a loop)
- `prompt`: `--initial_prompt` as the decoder reads it (a short timestamped segment when
  decoding with timestamps)
- `run`: engine choice, decoding, batching, per-file errors; `transcribe_file`
- `formats`: segments and the txt/json/srt/vtt/tsv writers

Only the light modules (options, formats) load with the package; `transcribe_file` loads
`run` (numpy, audio decoding) on first use, so the command line's `--help` stays fast.
"""

from __future__ import annotations

from typing import Any

from fitwhisper.transcribe.formats import FORMATS, Segment, Transcript, render
from fitwhisper.transcribe.options import TranscribeJob, TranscribeOptions

__all__ = [
    "FORMATS",
    "Segment",
    "TranscribeJob",
    "TranscribeOptions",
    "Transcript",
    "render",
    "transcribe_file",
]


def __getattr__(name: str) -> Any:  # PEP 562: `run` is imported on first use
    if name == "transcribe_file":
        from fitwhisper.transcribe.run import transcribe_file

        return transcribe_file
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
