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
        metadata={"help": "Longest transcript in tokens, special tokens included (limit 448)."},
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


@dataclass
class ModelConfig:
    """Which model to start from and what to train of it."""

    model: str = field(
        default="openai/whisper-small",
        metadata={
            "help": "Hub id (openai/whisper-small, MediaTek-Research/Breeze-ASR-25), a local "
            "transformers or CTranslate2 folder, or offline/tiny.en, offline/base.",
            "aliases": ["--model_name_or_path", "--base_model"],  # the user's scripts' names
        },
    )
    language: str | None = field(
        default=None,
        metadata={
            "help": "Language of the speech for multilingual models (e.g. en, zh); a row's own "
            "language column wins. Ignored by English-only (.en) models."
        },
    )
    task: Literal["transcribe", "translate"] = field(
        default="transcribe", metadata={"help": "transcribe, or translate into English."}
    )
    freeze_encoder: bool = field(
        default=False, metadata={"help": "Train the decoder only; the encoder stays as loaded."}
    )
    cache_dir: str | None = field(
        default=None,
        metadata={"help": "Where Hub downloads go (default: the Hugging Face cache)."},
    )


@dataclass
class TrainConfig:
    """How to train; names follow Seq2SeqTrainingArguments."""

    output_dir: str = field(default="runs/fitwhisper", metadata={"help": "The run folder."})
    train_manifest: str | None = field(
        default=None,
        metadata={
            "help": "Training manifest (JSON, JSONL, CSV/TSV, audiofolder).",
            "aliases": ["--train_file"],
        },
    )
    eval_manifest: str | None = field(
        default=None,
        metadata={
            "help": "Held-out manifest scored by generation (WER/CER).",
            "aliases": ["--validation_file"],
        },
    )
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "Clips per device per forward pass when training."}
    )
    per_device_eval_batch_size: int = field(
        default=8, metadata={"help": "Clips per device per generate call when evaluating."}
    )
    gradient_accumulation_steps: int = field(
        default=1,
        metadata={"help": "Forward passes per optimizer step: effective batch = "
                  "per-device batch x accumulation x processes."},
    )  # fmt: skip
    learning_rate: float = field(default=1e-5, metadata={"help": "Peak learning rate."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    warmup_steps: int = field(default=0, metadata={"help": "Linear warm-up steps."})
    warmup_ratio: float = field(
        default=0.0,
        metadata={
            "help": "Warm-up as a fraction of all steps (0.1: a tenth); instead of warmup_steps."
        },
    )
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = field(
        default="linear", metadata={"help": "Learning-rate schedule after warm-up."}
    )
    max_steps: int = field(
        default=-1, metadata={"help": "Stop after this many optimizer steps (-1: use epochs)."}
    )
    num_train_epochs: float = field(default=3.0, metadata={"help": "Passes over the data."})
    logging_steps: int = field(default=10, metadata={"help": "Log loss every N steps."})
    eval_strategy: Literal["no", "steps", "epoch"] = field(
        default="no", metadata={"help": "When to score the eval manifest during training."}
    )
    eval_steps: int | None = field(default=None, metadata={"help": "Steps between evaluations."})
    save_strategy: Literal["no", "steps", "epoch"] = field(
        default="no", metadata={"help": "When to write checkpoints."}
    )
    save_steps: int = field(default=500, metadata={"help": "Steps between checkpoints."})
    save_total_limit: int | None = field(
        default=2, metadata={"help": "Keep at most this many checkpoints."}
    )
    seed: int = field(default=42, metadata={"help": "Random seed for model, data order, dropout."})
    fp16: bool | None = field(
        default=None,
        metadata={"help": "fp16 mixed precision (CUDA only). Unset (auto): bf16 where the GPU "
                  "supports it, else fp16 on CUDA, fp32 on CPU."},
    )  # fmt: skip
    bf16: bool | None = field(
        default=None,
        metadata={"help": "bf16 mixed precision (CUDA, Ampere or newer). Unset: auto, as fp16."},
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in backward to save memory."}
    )
    dataloader_num_workers: int = field(
        default=0, metadata={"help": "Processes decoding audio while the model trains."}
    )
    report_to: Literal["tensorboard", "wandb", "none"] = field(
        default="tensorboard", metadata={"help": "Where training curves go."}
    )
    generation_max_length: int = field(
        default=225, metadata={"help": "Longest transcript generated when scoring, in tokens."}
    )
    logging_dir: str | None = field(
        default=None,
        metadata={"help": "TensorBoard folder; none means RUN/logs.", "aliases": ["--logdir"]},
    )
    use_wandb: bool = field(
        default=False, metadata={"help": "Same as --report_to wandb (the user's scripts' name)."}
    )
    wandb_project: str | None = field(
        default=None, metadata={"help": "W&B project the run goes to; none means W&B's default."}
    )
    load_best_model_at_end: bool = field(
        default=False,
        metadata={
            "help": "Keep the checkpoint with the best metric_for_best_model as final/; needs "
            "matching eval_strategy and save_strategy (and save_steps a multiple of eval_steps)."
        },
    )
    metric_for_best_model: Literal["wer", "cer", "loss"] | None = field(
        default=None,
        metadata={
            "help": "What 'best' means (lower is better): the run's own metric by default, WER "
            "or CER for Chinese; or loss, the eval loss."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop after this many evaluations without improvement of "
            "metric_for_best_model; needs eval and --load_best_model_at_end."
        },
    )
    early_stopping_threshold: float = field(
        default=0.0, metadata={"help": "Smallest change of the metric that counts as improvement."}
    )
    resume: str | None = field(
        default=None,
        metadata={
            "help": "Continue a stopped run: bare --resume takes the newest complete checkpoint "
            "in output_dir, --resume PATH a named one. Optimizer, scheduler, RNG and data "
            "position are restored.",
            "aliases": ["--resume_from_checkpoint"],
            "const": "latest",  # the value of a bare --resume
        },
    )
    resume_despite_changes: bool = field(
        default=False,
        metadata={
            "help": "Resume even though options or manifests differ from the checkpoint's "
            "(the differences are listed first)."
        },
    )
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start afresh in an output_dir that holds checkpoints of an earlier run "
            "(deletes them and its TensorBoard logs)."
        },
    )
