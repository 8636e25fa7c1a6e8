"""The settings of one `fitwhisper transcribe` call: `TranscribeOptions`, how to decode
(shared by both engines), and `TranscribeJob`, what to transcribe with which model and
engine, and where the text goes. The command's flags are generated from their fields
(`fitwhisper.cli.flags`), so each field's help text is the flag's."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from fitwhisper.option_ranges import PROCESSES, WHISPER_TOKENS
from fitwhisper.scoring import OPENCC_CONFIGS
from fitwhisper.transcribe.formats import FORMATS

Engine = Literal["auto", "transformers", "ct2"]
Mode = Literal["auto", "sequential", "batched"]
Timestamps = Literal["auto", "none", "segment", "word"]
Task = Literal["transcribe", "translate"]

# Whisper's temperature fallback schedule (openai-whisper's default).
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


# Timestamp tokens cost accuracy on clips up to 30 s: on 163 held-out clips tiny.en scored
# 20.4% WER with them and 19.2% without, its fine-tune 13.2% and 11.9%
# (bench/RESULTS-quality.md). Text alone shows no times, so it is decoded without them.
TEXT_ONLY_FORMATS = ("txt",)


def with_timestamps_for(opts: TranscribeOptions, formats: list[str]) -> TranscribeOptions:
    """--timestamps auto decided for these outputs: none when every one is text only,
    else segment. An engine given auto (no outputs known) decodes segments."""
    if opts.timestamps != "auto":
        return opts
    text_only = bool(formats) and all(f in TEXT_ONLY_FORMATS for f in formats)
    return dataclasses.replace(opts, timestamps="none" if text_only else "segment")


@dataclass(frozen=True)
class TranscribeOptions:
    """How to decode. None thresholds mean the engine's own default (docs/transcription.md)."""

    language: str | None = field(
        default=None,
        metadata={"help": "e.g. zh; none: the model's own, else detected.", "metavar": "LANG"},
    )
    task: Task = field(
        default="transcribe",
        metadata={"help": "transcribe, or translate into English."},
    )
    # Beam search of 5, as faster-whisper and openai-whisper's command line decode: on
    # speakers their training never heard it was never worse than greedy and scored
    # fine-tuned models 0.6 to 1.7 points better, at about greedy's wall time through this
    # command on CPU (bench/RESULTS-quality.md, "Beam search"). `evaluate` stays greedy, as
    # training scores (eval_config.py).
    beam_size: int = field(
        default=5,
        metadata={
            "min": 1,
            "help": "Beam search of N; 1: greedy (faster, as `evaluate` scores).",
            "aliases": ["--beam-size"],
        },
    )
    timestamps: Timestamps = field(
        default="auto",
        metadata={
            "help": "auto: none when every output is txt, else segment; word (ct2 engine) "
            "adds word times to json; none decodes clips of up to 30 s without timestamp "
            "tokens (one segment per clip), about a point more accurate."
        },
    )
    initial_prompt: str | None = field(
        default=None,
        metadata={
            "help": "Text to prime the decoder.",
            "aliases": ["--initial-prompt"],
            "metavar": "TEXT",
        },
    )
    condition_on_previous_text: bool = field(
        default=True,
        metadata={
            "help": "Feed a window's text to the next (long files); off: fewer repetition loops.",
            "negative_aliases": ["--no_condition_on_previous_text"],
        },
    )
    temperature_fallback: bool = field(
        default=True,
        metadata={
            "help": "Re-decode at 0.2, 0.4 ... 1.0 when a window fails a threshold; off: "
            "greedy only.",
            "negative_aliases": ["--no_temperature_fallback"],
        },
    )
    compression_ratio_threshold: float | None = field(
        default=None,
        metadata={
            "above": 0,
            "help": "Re-decode a window that repeats itself; none: 2.4 (text gzip ratio, ct2) "
            "or 1.35 (token zlib ratio, transformers).",
        },
    )
    logprob_threshold: float | None = field(
        default=-1.0,
        metadata={
            "max": 0,
            "why": "a log-probability",
            "help": "Re-decode a window whose average token log-probability is below this.",
        },
    )
    no_speech_threshold: float | None = field(
        default=0.6,
        metadata={
            "min": 0,
            "max": 1,
            "why": "a probability",
            "help": "Skip a window whose no-speech probability is above this and whose average "
            "log-probability is below --logprob_threshold (silence, music).",
        },
    )
    batch_size: int = field(
        default=8,
        metadata={"min": 1, "help": "Files or chunks per batch.", "aliases": ["--batch-size"]},
    )
    max_new_tokens: int | None = field(
        default=None,
        metadata={
            **WHISPER_TOKENS,
            "help": "Most tokens written per 30 s window; none: the model's limit, 448.",
        },
    )
    mode: Mode = field(
        default="auto",
        metadata={
            "help": "Files over 30 s: sequential runs Whisper's long-form algorithm "
            "(previous-text conditioning, temperature fallback); batched cuts them at pauses "
            "(voice activity) and decodes the chunks in batches (ct2 only). auto: "
            "batched on the ct2 engine (measured faster at equal CER), sequential on "
            "transformers. Clips of up to 30 s are batched across files in every mode but "
            "sequential."
        },
    )
    vad: bool = field(
        default=True,
        metadata={
            "help": "Decode only the speech, found by voice activity detection (Silero, from "
            "the ct2 extra's faster-whisper; without it an energy gate that skips digital "
            "silence only): silence and noise give no text, in every mode and engine. Off: "
            "every window is decoded, where Whisper can write 'you' over silence "
            "(--mode auto is then sequential).",
            "negative_aliases": ["--no_vad"],
        },
    )
    encoder_window: Literal["auto", "full", "short"] = field(
        default="auto",
        metadata={
            "help": "Clips up to 30 s: full pads each to 30 s (Whisper's window); short "
            "encodes each batch on its longest clip and 1 s; auto: short for a model whose "
            "training run measured it within 1 point of 30 s on the held-out clips (it "
            "records this), full for any other (a model trained on 30 s windows breaks on "
            "short ones). Both engines; ct2 only where clips are batched (not "
            "--mode sequential, and with a known language)."
        },
    )
    device: str = field(
        default="auto",
        metadata={"help": "auto, cpu, cuda or cuda:N.", "metavar": "DEVICE"},
    )
    compute_type: str = field(
        default="auto",
        metadata={
            "help": "ct2 engine: int8, int8_float16, float16, float32; auto: int8 on CPU, "
            "float16 on CUDA.",
            "metavar": "TYPE",
        },
    )
    threads: int = field(
        default=0, metadata={**PROCESSES, "help": "CPU threads (0: library default)."}
    )
    output_script: str | None = field(
        default=None,
        metadata={
            "help": "Convert the output's Chinese script: traditional (OpenCC s2tw, for zh-TW), "
            f"simplified (t2s), or an OpenCC table ({', '.join(OPENCC_CONFIGS)}).",
            "aliases": ["--output-script", "--opencc"],
            "metavar": "SCRIPT",
        },
    )

    @property
    def temperatures(self) -> tuple[float, ...]:
        return FALLBACK_TEMPERATURES if self.temperature_fallback else (0.0,)


@dataclass(frozen=True)
class TranscribeJob:
    """What to transcribe, with which model and engine, and where the text goes."""

    model: str = field(
        metadata={
            "path": "model",
            "help": "Model spec, as for evaluate.",
            "required": True,
            "metavar": "MODEL",
        }
    )
    audio: list[str] = field(
        default_factory=list,
        metadata={
            "path": "any",
            "help": "Audio files or folders.",
            "positional": True,
            "nargs": "*",
            "metavar": "AUDIO",
        },
    )
    audio_list: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "A text file, one audio path a line.",
            "aliases": ["--audio-list"],
            "metavar": "FILE",
        },
    )
    output_dir: str | None = field(
        default=None,
        metadata={
            "path": "new_folder",
            "files_among_others": True,
            "help": "Write one file per input and format here (NAME.FORMAT).",
            "aliases": ["--output-dir"],
            "metavar": "DIR",
        },
    )
    output_file: str | None = field(
        default=None,
        metadata={
            "path": "new_file",
            "help": "Write the one input's transcript here; the format follows the suffix "
            "unless --output_format is given.",
            "aliases": ["--output-file"],
            "metavar": "FILE",
        },
    )
    output_format: str | None = field(
        default=None,
        metadata={
            "help": f"Comma-separated, from {', '.join(FORMATS)} or all; none: the "
            "--output_file's suffix, else txt.",
            "aliases": ["--output-format"],
            "metavar": "FORMATS",
        },
    )
    engine: Engine = field(
        default="auto",
        metadata={
            "help": "auto: ct2 on CPU (measured faster; a transformers model is "
            "exported to CTranslate2 int8 once, into the cache), transformers for LoRA "
            "adapters (unmerged) and on CUDA."
        },
    )
