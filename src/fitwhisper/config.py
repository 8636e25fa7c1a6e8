"""Typed configuration: one set of dataclasses behind the flags, config files and run records.

Help text lives in `field(metadata={"help": ...})` so `--help`, saved YAML and the README
come from one source. Flag names follow `Seq2SeqTrainingArguments` and the user's documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

WHISPER_MAX_LABEL_TOKENS = 448  # decoder positions of every Whisper size


@dataclass
class DataConfig:
    """Where the audio and transcripts are, and which rows are fit to train on."""

    audio_column: str | None = field(
        default=None,
        metadata={
            "help": "Manifest column holding the audio path. Default: the first of "
            "audio_path, audio, file_name, path, file, wav that exists."
        },
    )
    text_column: str | None = field(
        default=None,
        metadata={
            "help": "Manifest column holding the transcript. Default: the first of "
            "text, transcript, transcription, sentence, normalized_text that exists."
        },
    )
    language_column: str = field(
        default="language",
        metadata={"help": "Optional per-row language column; a row's own language wins."},
    )
    min_audio_len: float = field(
        default=0.1, metadata={"help": "Shortest usable clip, in seconds."}
    )
    max_audio_len: float = field(
        default=30.0,
        metadata={"help": "Longest usable clip, in seconds (Whisper's window is 30 s)."},
    )
    max_label_tokens: int = field(
        default=WHISPER_MAX_LABEL_TOKENS,
        metadata={"help": "Longest transcript in tokens, special tokens included (decoder limit 448)."},
    )
    bad_rows: Literal["error", "skip"] = field(
        default="error",
        metadata={
            "help": "What to do with rows that fail the data check: 'error' stops before "
            "training and lists them; 'skip' leaves them out, counted and listed."
        },
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many training rows (for quick runs)."}
    )
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use at most this many evaluation rows."}
    )
