"""Transcription (I1-I4): files of any length, two engines, five output formats.

    fitwhisper transcribe --model MODEL AUDIO... [--output_dir DIR --output_format srt]

- `inputs`: files, folders and list files to audio paths, with per-input problems
- `options`: the settings shared by both engines
- `hf_engine`: transformers' `generate` (long-form, batched; LoRA adapters unmerged)
- `ct2_engine`: faster-whisper on a CTranslate2 folder (sequential or batched)
- `run`: engine choice, decoding, batching, per-file errors; `transcribe_file`
- `formats`: segments and the txt/json/srt/vtt/tsv writers
"""

from fitwhisper.transcribe.formats import FORMATS, Segment, Transcript, render
from fitwhisper.transcribe.options import TranscribeOptions
from fitwhisper.transcribe.run import transcribe_file

__all__ = ["FORMATS", "Segment", "TranscribeOptions", "Transcript", "render", "transcribe_file"]
