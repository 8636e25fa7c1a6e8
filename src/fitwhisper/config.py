"""Typed configuration: one set of dataclasses behind the flags, config files and run records.

Help text lives in `field(metadata={"help": ...})` so `--help`, saved YAML and the docs
come from one source. Flag names follow `Seq2SeqTrainingArguments` and the user's documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fitwhisper.eval_config import EvalConfig
from fitwhisper.method import MethodOption
from fitwhisper.option_ranges import COUNT_OR_ALL, FRACTION, PROCESSES, SEED, SHARE, WHISPER_TOKENS
from fitwhisper.whisper_facts import WINDOW_SECONDS

__all__ = ["DataConfig", "EvalConfig", "ModelConfig", "TrainConfig"]

WHISPER_MAX_LABEL_TOKENS = 448  # decoder positions of every Whisper size
# The linear layers of every Whisper block (attention: self and cross; feed-forward: fc1, fc2).
WHISPER_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2")
LORA_TARGETS_DEFAULT = WHISPER_LINEAR_MODULES


# Manifest columns tried in order when none is named (data/manifest.py reads by them).
# NeMo manifests name the audio audio_filepath; WebDataset shards name files by extension.
AUDIO_COLUMNS = (
    "audio_path",
    "audio",
    "audio_filepath",
    "file_name",
    "path",
    "file",
    "wav",
    "flac",
)
TEXT_COLUMNS = ("text", "transcript", "transcription", "sentence", "normalized_text", "txt")


@dataclass
class DataConfig:
    """Where the audio and transcripts are, and which rows are fit to train on."""

    audio_column: str | None = field(
        default=None,
        metadata={
            "help": "Manifest column holding the audio path. Default: the first of "
            f"{', '.join(AUDIO_COLUMNS)} that exists."
        },
    )
    text_column: str | None = field(
        default=None,
        metadata={
            "help": "Manifest column holding the transcript. Default: the first of "
            f"{', '.join(TEXT_COLUMNS)} that exists."
        },
    )
    audio_dir: str | None = field(
        default=None,
        metadata={
            "path": "folder",
            "help": "Folder that relative audio paths resolve against. Default: the "
            "manifest's own folder (Common Voice: its clips/ folder, beside train.tsv).",
        },
    )
    language_column: str = field(
        default="language",
        metadata={"help": "Optional per-row language column; a row's own language wins."},
    )
    language_token: Literal["per_row", "fixed", "none"] = field(
        default="per_row",
        metadata={
            "help": "Language token in the decoder prompt, for code-switched data. per_row: a "
            "row's own language column, else --language. fixed: --language for every training "
            "row (e.g. zh for Mandarin-English code-switching: English words are learnt as "
            "part of zh, as Breeze-ASR-25 was trained). none: no language token in labels or "
            "when scoring (<|startoftranscript|><|transcribe|><|notimestamps|>), so the model "
            "never commits to one language."
        },
    )
    rehearsal_manifest: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "help": "Rehearsal data against forgetting (e.g. English speech when fine-tuning "
            "on Mandarin): --rehearsal_share of the training stream is drawn from it; its rows "
            "keep their own language column.",
        },
    )
    rehearsal_share: float = field(
        default=0.1,
        metadata={
            "above": 0,
            "below": 1,
            "help": "Fraction of training rows drawn from --rehearsal_manifest (0.1: one in "
            "ten), sampled with the run's seed, with repetition if it is small.",
        },
    )
    min_audio_len: float = field(
        default=0.1, metadata={"min": 0, "help": "Shortest usable clip, in seconds."}
    )
    max_audio_len: float = field(
        default=WINDOW_SECONDS,
        metadata={
            "above": 0,
            "max": int(WINDOW_SECONDS),
            "why": "Whisper's window is 30 s",
            "help": "Longest usable clip, in seconds (Whisper's window is 30 s).",
        },
    )
    max_label_tokens: int = field(
        default=WHISPER_MAX_LABEL_TOKENS,
        metadata={
            **WHISPER_TOKENS,
            "help": "Longest transcript in tokens, special tokens included (limit 448).",
        },
    )
    bad_rows: Literal["error", "skip"] = field(
        default="error",
        metadata={
            "help": "What to do with rows that fail the data check: 'error' stops before "
            "training and lists them; 'skip' leaves them out, counted and listed."
        },
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={**COUNT_OR_ALL, "help": "Use at most this many training rows (for quick runs)."},
    )
    max_eval_samples: int | None = field(
        default=None,
        metadata={**COUNT_OR_ALL, "help": "Use at most this many evaluation rows."},
    )

    def manifest_columns(self) -> dict[str, str | None]:
        """The column names, as `load_manifest` keyword arguments."""
        return {
            "audio_column": self.audio_column,
            "text_column": self.text_column,
            "language_column": self.language_column,
            "audio_dir": self.audio_dir,
        }


@dataclass
class ModelConfig:
    """Which model to start from and what to train of it."""

    model: str = field(
        default="openai/whisper-small",
        metadata={
            "path": "model",
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
    output_script: str | None = field(
        default=None,
        metadata={
            "help": "Chinese script the transcripts should be in: traditional (OpenCC s2tw, "
            "for zh-TW), simplified (t2s), an OpenCC table (s2twp), or none. Training "
            "references are converted into it so the model learns to write it, and the share "
            "of output in it is reported. Unset: the model's preset (traditional for "
            "Breeze-ASR-25), else none."
        },
    )
    freeze_encoder: bool = field(
        default=False,
        metadata={
            "help": "Train the decoder only; the encoder stays as loaded (with LoRA: adapters "
            "in the decoder only)."
        },
    )
    cache_dir: str | None = field(
        default=None,
        metadata={
            "path": "new_folder",
            "files_among_others": True,
            "help": "Where Hub downloads go (default: the Hugging Face cache).",
        },
    )
    method: MethodOption = field(
        default="full",
        metadata={
            "help": "What trains. full: the whole model. lora: LoRA adapters (PEFT) on the "
            "frozen base, and the run saves only the adapter (`fitwhisper merge` makes a full "
            "model of it); adapters want a higher --learning_rate than full fine-tuning: "
            "without one they train at 1e-3. dora: DoRA adapters (LoRA plus a trained "
            "magnitude per output; a little slower). 8bit-lora / 4bit-lora: LoRA on a base "
            "loaded in 8 bits (LLM.int8(), about half the weight memory) or 4-bit NF4 (QLoRA, "
            "about a quarter: large-v3 on an 8 GB card), by bitsandbytes, CUDA or CPU."
        },
    )
    use_lora: bool = field(
        default=False, metadata={"help": "Same as --method lora (the earlier flag)."}
    )
    lora_r: int = field(
        default=16,
        metadata={
            "min": 1,
            "help": "LoRA rank: the size of each adapter's low-rank update (4-64).",
        },
    )
    lora_alpha: int = field(
        default=32,
        metadata={
            "min": 1,
            "help": "LoRA scale: updates are multiplied by lora_alpha / lora_r (often 2 x r).",
        },
    )
    lora_dropout: float = field(
        default=0.05,
        metadata={**SHARE, "help": "Dropout on the adapters' input (0.05-0.1)."},
    )
    lora_target_modules: list[str] = field(
        default_factory=lambda: list(LORA_TARGETS_DEFAULT),
        metadata={
            "help": "Whisper layers that get adapters, as a comma list or a repeated flag, from "
            "q_proj, k_proj, v_proj, out_proj (self- and cross-attention) and fc1, fc2 (feed-"
            "forward). Default: all of them, since adapters on every linear layer are what "
            "matched full fine-tuning in the QLoRA paper; at rank 16 that is 2-3% of "
            "Whisper's weights. q_proj,v_proj (the Hugging Face blog's choice) is a quarter "
            "of that."
        },
    )
    use_8bit: bool = field(
        default=False, metadata={"help": "Same as --method 8bit-lora (the earlier flag)."}
    )
    use_4bit: bool = field(
        default=False, metadata={"help": "Same as --method 4bit-lora (the earlier flag)."}
    )
    bnb_4bit_compute_dtype: Literal["auto", "float32", "float16", "bfloat16"] = field(
        default="auto",
        metadata={
            "help": "dtype the 4-bit layers compute in. auto: the run's mixed precision "
            "(bfloat16 with bf16, float16 with fp16, whether flagged or chosen from the GPU), "
            "float32 otherwise."
        },
    )

    def __post_init__(self) -> None:
        # Config files may give "q_proj,v_proj" or a list; flags may repeat. One flat list.
        modules = self.lora_target_modules
        items = [modules] if isinstance(modules, str) else list(modules)
        self.lora_target_modules = [
            m.strip() for i in items for m in str(i).split(",") if m.strip()
        ]


@dataclass
class TrainConfig:
    """How to train; names follow Seq2SeqTrainingArguments."""

    output_dir: str = field(
        default="runs/fitwhisper", metadata={"path": "new_folder", "help": "The run folder."}
    )
    train_manifest: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "help": "Training data: a manifest (JSON, JSONL incl. NeMo's, CSV/TSV, "
            "audiofolder, save_to_disk), tar shards (a .tar, glob, shards-{000..099}.tar, "
            "pipe:CMD, URL) or a folder made by `fitwhisper shard`, or a Hub dataset "
            "(hf://ORG/NAME:CONFIG@SPLIT, or a local folder in the Hub's layout).",
            "aliases": ["--train_file"],
        },
    )
    train_mix: list[str] | None = field(
        default=None,
        metadata={
            "path": "any",
            "metavar": "SOURCE:WEIGHT",
            "help": "More training sources, mixed with --train_manifest by weight (each "
            "streamed: tar shards, a shard folder or a Hub dataset; a weight left out is 1): "
            "--train_manifest ours/:0.7 --train_mix hf://ORG/NAME@train:0.3 draws 70% of the "
            "clips from ours/. A small source at a large weight is repeated.",
        },
    )
    mix_temperature: float = field(
        default=1.0,
        metadata={
            "above": 0,
            "help": "Shares of a mix are weight^(1/T), normalised: above 1 evens them out, "
            "below 1 sharpens them.",
        },
    )
    streaming: Literal["auto", "on", "off"] = field(
        default="auto",
        metadata={
            "help": "Read the training data as it is trained on, shard by shard (checked on "
            "the fly, bad clips skipped and counted; resumes mid-stream): auto does for tar "
            "shards, shard folders and Hub datasets, and reads a manifest whole. off reads a "
            "shard folder's index whole (every batching option then works)."
        },
    )
    check: str = field(
        default="full",
        metadata={
            "help": "The data check of training data read whole: full decodes every clip "
            "before the first step (once per content: later runs read the check's cache). "
            "sample:N decodes N rows drawn at random and reads only the others' headers "
            "(missing files, lengths, transcripts are still checked); a clip of those that "
            "fails when training loads it is replaced by the next one, logged and counted in "
            "data_report.json. Held-out, rehearsal and regression rows are always checked "
            "in full; streamed data is checked clip by clip as it is read.",
            "metavar": "full|sample:N",
        },
    )
    eval_manifest: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "help": "Held-out data scored by generation (WER/CER): any form --train_manifest "
            "takes, read whole.",
            "aliases": ["--validation_file"],
        },
    )
    regression_manifest: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "help": "Forgetting guard: any manifest (e.g. English speech when fine-tuning on "
            "Mandarin), scored by generation before and after training, in its own language "
            "and metric; side by side in RUN/eval/regression.json.",
        },
    )
    push_to_hub: bool = field(
        default=False,
        metadata={
            "help": "Upload RUN/final/ (weights, processor, model card) to the Hugging Face Hub "
            "after training, as --hub_model_id; the Hub is checked before training starts."
        },
    )
    hub_model_id: str | None = field(
        default=None,
        metadata={"help": "The Hub repository for --push_to_hub.", "metavar": "OWNER/NAME"},
    )
    score_before: bool = field(
        default=True,
        metadata={
            "help": "Score --eval_manifest with the starting weights too (RUN/eval/before/), "
            "so the model card shows what the fine-tune changed; --no-score_before skips it "
            "(one generation pass over the held-out clips). Not for --use_8bit/--use_4bit "
            "runs, whose bf16 training it broke."
        },
    )
    per_device_train_batch_size: int = field(
        default=8, metadata={"min": 1, "help": "Clips per device per forward pass when training."}
    )
    per_device_eval_batch_size: int = field(
        default=8,
        metadata={"min": 1, "help": "Clips per device per generate call when evaluating."},
    )
    gradient_accumulation_steps: int = field(
        default=1,
        metadata={
            "min": 1,
            "help": "Forward passes per optimizer step: effective batch = "
            "per-device batch x accumulation x processes.",
        },
    )
    learning_rate: float = field(
        default=1e-5,
        metadata={
            "above": 0,
            "shown_default": "1e-5 for full fine-tuning, 1e-3 for LoRA (also on an 8-bit or "
            "4-bit base): the method's recipe, recipes.py",
            "help": "Peak learning rate; RUN/run_plan.json says which applied.",
        },
    )
    weight_decay: float = field(default=0.0, metadata={"min": 0, "help": "AdamW weight decay."})
    optim: Literal["adamw_torch", "adamw_8bit", "adafactor"] = field(
        default="adamw_torch",
        metadata={
            "help": "Optimizer. adamw_torch: AdamW. adamw_8bit: AdamW with 8-bit states "
            "(bitsandbytes, CUDA or CPU; about a quarter of AdamW's state memory). adafactor: "
            "factored second moments, the least memory."
        },
    )
    warmup_steps: int = field(default=0, metadata={"min": 0, "help": "Linear warm-up steps."})
    warmup_ratio: float = field(
        default=0.0,
        metadata={
            **SHARE,
            "help": "Warm-up as a fraction of all steps (0.1: a tenth); instead of warmup_steps.",
        },
    )
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = field(
        default="linear", metadata={"help": "Learning-rate schedule after warm-up."}
    )
    max_steps: int = field(
        default=-1,
        metadata={
            "min": 1,
            "also": {-1: "to train by epochs"},
            "help": "Stop after this many optimizer steps (-1: use epochs).",
        },
    )
    num_train_epochs: float = field(
        default=3.0,
        metadata={
            "min": 0,
            "help": "Passes over the data. Left out: 3, or more on a small set so the run "
            "makes enough optimizer steps (RUN/run_plan.json says how many and why).",
        },
    )
    logging_steps: int = field(default=10, metadata={"min": 1, "help": "Log loss every N steps."})
    eval_strategy: Literal["no", "steps", "epoch"] = field(
        default="no", metadata={"help": "When to score the eval manifest during training."}
    )
    eval_steps: int | None = field(
        default=None, metadata={"min": 1, "help": "Steps between evaluations."}
    )
    save_strategy: Literal["no", "steps", "epoch"] = field(
        default="no", metadata={"help": "When to write checkpoints."}
    )
    save_steps: int = field(default=500, metadata={"min": 1, "help": "Steps between checkpoints."})
    save_total_limit: int | None = field(
        default=2, metadata={"min": 1, "help": "Keep at most this many checkpoints."}
    )
    seed: int = field(
        default=42,
        metadata={**SEED, "help": "Random seed for model, data order, dropout."},
    )
    fp16: bool | None = field(
        default=None,
        metadata={
            "help": "fp16 mixed precision (CUDA only). Unset (auto): bf16 where the GPU "
            "supports it, else fp16 on CUDA, fp32 on CPU."
        },
    )
    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision (CUDA Ampere or newer, or CPU). Unset: auto, as fp16."
        },
    )
    gradient_checkpointing: bool = field(
        default=False, metadata={"help": "Recompute activations in backward to save memory."}
    )
    dataloader_num_workers: int = field(
        default=0,
        metadata={
            **PROCESSES,
            "help": "Processes decoding audio while the model trains. Unset: the run plan "
            "decides (none on a CPU, whose cores do the model's arithmetic; on a GPU enough "
            "for the clips a step takes, from the cores per process and the measured cost "
            "of a clip), with pinned memory and prefetching; RUN/run_plan.json says why.",
        },
    )
    log_mel: Literal["auto", "cpu", "device"] = field(
        default="auto",
        metadata={
            "help": "Where training clips become log-mel features. cpu: in the data loader, "
            "clip by clip (transformers' feature extractor). device: the loader sends "
            "waveforms and the trainer makes the whole batch's features on the training "
            "device with torch's STFT (equal to the extractor within 1e-3), so few CPU "
            "cores can feed a GPU. auto (default): cpu, until measured on a GPU."
        },
    )
    report_to: Literal["tensorboard", "wandb", "none"] = field(
        default="tensorboard", metadata={"help": "Where training curves go."}
    )
    generation_max_length: int = field(
        default=225,
        metadata={
            **WHISPER_TOKENS,
            "help": "Longest transcript generated when scoring, in tokens.",
        },
    )
    logging_dir: str | None = field(
        default=None,
        metadata={
            "path": "new_folder",
            "files_among_others": True,
            "help": "TensorBoard folder; none means RUN/logs.",
            "aliases": ["--logdir"],
        },
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
            "min": 1,
            "help": "Stop after this many evaluations without improvement of "
            "metric_for_best_model; needs eval and --load_best_model_at_end.",
        },
    )
    early_stopping_threshold: float = field(
        default=0.0,
        metadata={"min": 0, "help": "Smallest change of the metric that counts as improvement."},
    )
    resume: str | None = field(
        default=None,
        metadata={
            "path": "folder",
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
    auto_fit: bool = field(
        default=False,
        metadata={
            "help": "Before loading the model, choose the fastest per-device batch, "
            "accumulation, checkpointing, optimizer and (unless --use_lora/--use_8bit/"
            "--use_4bit name one) method that fit this machine's GPU (or --gpu_memory), "
            "keeping the effective batch (per-device batch x accumulation). CUDA only.",
            "aliases": ["--auto-fit"],
        },
    )
    gpu_memory: str | None = field(
        default=None,
        metadata={
            "help": "GPU memory --auto_fit plans for, e.g. 8GB or 12GiB (GB = GiB); none: the "
            "visible GPU's total.",
            "aliases": ["--gpu-memory"],
        },
    )
    plan: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "A plan.json written by `fitwhisper plan --output`: its batch, "
            "accumulation, checkpointing, optimizer, precision and method are used; a flag "
            "or config-file value that contradicts it is an error.",
        },
    )
    pack_clips: bool = field(
        default=False,
        metadata={
            "help": "Pack consecutive training clips (in manifest order, one language) into "
            "windows of up to 30 s, transcripts joined in Whisper's timestamp format, so "
            "several clips share one encoder pass; a share of windows "
            "(--packed_single_clip_share) holds one clip as plain text. 3.4x less work per "
            "5 s clip at the baseline's CER on Mandarin, worse WER on short English digit "
            "strings (bench/RESULTS-train-speed.md), so it is off by default. Evaluation is "
            "per clip."
        },
    )
    packed_timestamp_fraction: float = field(
        default=1.0,
        metadata={
            **FRACTION,
            "help": "With --pack_clips: the share of windows of several clips labelled with "
            "timestamp tokens; the others are plain text after <|notimestamps|> (windows of "
            "one clip always are).",
        },
    )
    packed_single_clip_share: float = field(
        default=0.4,
        metadata={
            **SHARE,
            "help": "With --pack_clips: the share of windows (evenly spread) that hold one "
            "clip, labelled as plain text, so the model keeps seeing a short clip followed "
            "by silence and learns to stop there (0: pack every window; that ran away "
            "repeating words on short clips).",
        },
    )
    group_by_duration: bool = field(
        default=False,
        metadata={
            "help": "Batch clips (or packed windows) of similar duration together "
            "(transformers' length-grouped order on the durations the data check measured, "
            "drawn from --seed and the epoch). "
            "Only saves work with --encoder_input mixed (the default) or trimmed, where a batch "
            "is as long as its longest clip."
        },
    )
    encoder_input: Literal["auto", "full", "trimmed", "mixed"] = field(
        default="auto",
        metadata={
            "help": "The encoder's training input. mixed: each batch cut to its longest clip "
            "(icefall's sliced positions), several times faster on short clips, with "
            "--full_window_share of the batches at 30 s, the window other engines feed the "
            "model. trimmed: every batch cut. full: clips padded to 30 s, as Whisper was "
            "trained. auto (default): mixed, or full with --freeze_encoder or "
            "--cache_encoder_outputs (a frozen encoder cannot learn the short window). The "
            "model records it; transcribe/evaluate then encode short clips on their own "
            "length."
        },
    )
    full_window_share: float = field(
        default=0.25,
        metadata={
            **FRACTION,
            "help": "--encoder_input mixed: the share of batches padded to 30 s (chosen by "
            "each batch's contents: a resumed run chooses the same). 0.25 since 2026-11-29: "
            "on speakers the training never heard it scored 0.4 points better than 0.05 on "
            "Mandarin and English, level with the standard recipe, at 0.76-0.79x the speed "
            "of 0.05 (bench/RESULTS-quality.md).",
        },
    )
    packed_window_share: float = field(
        default=0.03,
        metadata={
            **SHARE,
            "help": "--encoder_input mixed: the share of training items made 30 s windows of "
            "several consecutive clips labelled with timestamps, as long audio reaches the "
            "model (none below 34 training clips). With single clips alone, small English "
            "runs dropped whole utterances of a long file after a pause (29-53% WER, where "
            "0.03 gave 0-1.6%). Cost: the batches that hold a window run at 30 s: 0.55x "
            "the speed of single clips alone on 80 Mandarin sentences, 0.88x on 400 English "
            "strings; with thousands of clips about as many encoder frames as without. "
            "0: every clip alone.",
        },
    )
    segment_timestamp_share: float = field(
        default=0.5,
        metadata={
            **FRACTION,
            "help": "Rows with timed segments (a `segments` column, offsets into long "
            "recordings, SRT/VTT files beside recordings) train as windows of up to 30 s: "
            "the share of those windows labelled with their segments' times in Whisper's "
            "timestamp format; the others are plain text after <|notimestamps|>, so both "
            "modes stay alive. Drawn per window from --seed. 0.5 is a middle, not yet "
            "chosen by measurement.",
        },
    )
    previous_text_share: float = field(
        default=0.2,
        metadata={
            **FRACTION,
            "help": "The share of training items that have earlier text trained with it as "
            "Whisper's <|startofprev|> context (the loss on the target alone), so "
            "conditioning on previous text and --initial_prompt keep helping: windows cut "
            "from long recordings take their recording's earlier text (and, with "
            "--speaker_context, clips their speaker's previous clip's). Drawn per item from "
            "--seed; off with --cache_encoder_outputs. 0.2 is cautious (distil-whisper's "
            "default), not yet chosen by measurement.",
        },
    )
    speaker_context: bool = field(
        default=False,
        metadata={
            "help": "Clips whose manifest names the speaker (a speaker, speaker_id or "
            "client_id column) have that speaker's previous clip's transcript (manifest "
            "order) as earlier text, trained as context at --previous_text_share, so a "
            "fine-tune on clips keeps using a prompt. Off by default: on tiny.en and "
            "speechocean762's unseen speakers it matched the defaults' error (10.4% vs "
            "10.5% single clips, 10.6% vs 10.9% long-form) and timed segments closer "
            "(0.37 s vs 0.59 s) at 1.4x the training time (bench/RESULTS-quality.md). Not "
            "for streamed shards' clips, nor with --cache_encoder_outputs.",
        },
    )
    # The earlier spelling of --encoder_input trimmed.
    short_encoder_input: bool = field(
        default=False, metadata={"help": "Same as --encoder_input trimmed."}
    )
    cache_encoder_outputs: bool = field(
        default=False,
        metadata={
            "help": "With --freeze_encoder: run the frozen encoder once per training clip "
            "(or packed window) before training, keep its outputs in RUN/encoder_cache/ "
            "(float16 on disk: 1500 x d_model x 2 bytes per item, 3.7 MiB for large-v3) and "
            "train the decoder alone on them in every epoch. A run in the same folder with "
            "the same model and data reuses the cache. Not with --encoder_input trimmed or "
            "mixed (auto picks full with the cache), nor with SpecAugment (the model's "
            "apply_spec_augment) or --augment, whose encoder input changes each epoch. "
            "Evaluation still runs the whole model on the audio."
        },
    )
    augment: Literal["none", "light", "medium", "strong"] = field(
        default="none",
        metadata={
            "help": "Augment training clips on the fly (never evaluation): light: SpecAugment "
            "masks (5% of a clip's frames, 10% of the mel bins) and gain within 3 dB; "
            "medium: speed 0.9/1.0/1.1, noise on 30% of the clips at 15-30 dB SNR, gain "
            "within 6 dB, masks of 10% and 15%; strong: noise on 60% at 5-20 dB, gain "
            "within 10 dB, masks of 15% and 20%. The options below override their part. "
            "Each clip's augmentation follows from --seed, the epoch and the clip, so a "
            "resumed run equals an uninterrupted one (docs/augmentation.md)."
        },
    )
    spec_augment: bool | None = field(
        default=None,
        metadata={
            "help": "SpecAugment: two time masks and two frequency masks (set to 0) on each "
            "clip's log-mel, within the clip's own frames. Unset: as --augment says, or on "
            "when a mask share is given."
        },
    )
    time_mask_share: float | None = field(
        default=None,
        metadata={
            "min": 0,
            "max": 0.5,
            "why": "a clip masked over more than half its frames leaves little to learn from",
            "none": "the --augment preset's",
            "help": "SpecAugment: the share of each clip's frames its time masks cover.",
        },
    )
    freq_mask_share: float | None = field(
        default=None,
        metadata={
            "min": 0,
            "max": 0.5,
            "why": "a clip masked over more than half its mel bins leaves little to learn from",
            "none": "the --augment preset's",
            "help": "SpecAugment: the share of mel bins its frequency masks cover.",
        },
    )
    speed_perturb: list[float] | None = field(
        default=None,
        metadata={
            "min": 0.5,
            "max": 2.0,
            "why": "speech at other speeds is no longer natural",
            "metavar": "0.9,1.0,1.1",
            "help": "Speed perturbation: each clip plays at one of these factors, drawn per "
            "clip and epoch (resampled with soxr: 0.9 lasts 1/0.9 as long, pitch lower). "
            "1.0 alone turns it off.",
        },
    )
    noise_dir: str | None = field(
        default=None,
        metadata={
            "path": "folder",
            "help": "Folder of noise recordings (any audio files, searched recursively) added "
            "to --noise_share of the clips at an SNR from --noise_snr_db. Unset with noise "
            "on: generated coloured noise (white to brown).",
        },
    )
    noise_share: float | None = field(
        default=None,
        metadata={
            **FRACTION,
            "none": "the --augment preset's",
            "help": "The share of training clips that get noise.",
        },
    )
    noise_snr_db: list[float] | None = field(
        default=None,
        metadata={
            "min": -20,
            "max": 80,
            "why": "speech below -20 dB SNR is inaudible; above 80 dB noise adds nothing",
            "items": 2,
            "metavar": "LOW,HIGH",
            "help": "Signal-to-noise ratio range of added noise, in dB (e.g. 10,30), drawn "
            "uniformly per clip.",
        },
    )
    gain_db: list[float] | None = field(
        default=None,
        metadata={
            "min": -40,
            "max": 40,
            "why": "beyond 40 dB a clip is silence or clipping",
            "items": 2,
            "metavar": "LOW,HIGH",
            "help": "Gain range in dB, drawn uniformly per clip; 0,0 turns it off. Write "
            "--gain_db=-6,6 (with =: a value that starts with - is otherwise read as a flag).",
        },
    )
    on_nonfinite: Literal["stop", "skip"] = field(
        default="stop",
        metadata={
            "help": "What a NaN or Inf loss or gradient does. stop: the run ends at that step "
            "with an error naming its clips (nothing of it saved; checkpoints stay). skip: "
            "that step's update is dropped and counted; the count is logged at the end."
        },
    )
    attn_implementation: Literal["sdpa", "eager"] = field(
        default="sdpa",
        metadata={
            "help": "Attention kernel: sdpa (torch's scaled_dot_product_attention, fused "
            "where the hardware allows) or eager (plain matmul + softmax)."
        },
    )
    deepspeed: str | None = field(
        default=None,
        metadata={
            "help": "Shard training with DeepSpeed ZeRO (processes under torchrun or accelerate "
            "launch, or one without a launcher): "
            "zero2 (optimizer states and gradients split across processes), zero3 (the "
            "weights too), zero3_offload (zero3 with weights and optimizer states in CPU "
            "memory), or a DeepSpeed JSON file of your own. The shipped configs leave batch, "
            'accumulation, learning rate, clipping and precision "auto": the other flags '
            "fill them. Needs the deepspeed package (pip install 'fitwhisper[deepspeed]').",
            "metavar": "zero2|zero3|zero3_offload|FILE",
        },
    )

    def __post_init__(self) -> None:
        # Flags and config files give text ("0.9,1.1", YAML's [10, 30]); numbers from here on.
        # Text that is no number stays, for the option check to name (option_ranges).
        for name in ("speed_perturb", "noise_snr_db", "gain_db"):
            if (values := getattr(self, name)) is not None:
                setattr(self, name, [_number_or_text(v) for v in values])

    @property
    def encoder_input_mode(self) -> str:
        """--encoder_input, with the earlier --short_encoder_input read as trimmed, once
        `train` answered auto (train/run_plan.py, the one place that does)."""
        if self.short_encoder_input and self.encoder_input in ("auto", "full"):
            return "trimmed"
        if self.encoder_input == "auto":
            raise ValueError("--encoder_input auto is answered by train/run_plan.py first")
        return self.encoder_input


def _number_or_text(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value
