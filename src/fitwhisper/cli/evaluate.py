"""`fitwhisper evaluate`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
