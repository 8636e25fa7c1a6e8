"""`fitwhisper evaluate`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from fitwhisper.config import DataConfig
    from fitwhisper.scoring import NORMALIZE_OPTION_CHOICES, NORMALIZERS, OPENCC_CONFIGS

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
        choices=["wer", "cer", "mer"],
        help="Default: CER for languages written without spaces (Chinese, Japanese, Thai, ...), "
        "WER otherwise. mer: mixed error rate for code-switched text, each Chinese character "
        "and each other word (English, numbers) one token; CER and MER are reported together.",
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
    # The chinese normaliser's options, stated in every report with the normaliser.
    option_help = {
        "punctuation": "remove (default): full- and half-width punctuation dropped; halfwidth: "
        "kept, full-width and CJK marks folded to ASCII (，=, 。=.); keep: as written.",
        "spaces": "cjk (default): removed next to Chinese characters, one kept between other "
        "words; remove: all; keep: as written.",
        "case": "lower (default): Latin letters lower-cased; keep: as written.",
        "numerals": "keep (default): as written; arabic: Chinese numerals to digits (二十九 -> "
        "29); chinese: digits to Chinese numerals. Applied to both sides.",
    }
    for name, choices in NORMALIZE_OPTION_CHOICES.items():
        p.add_argument(
            f"--{name}",
            choices=choices,
            default=choices[0],
            help=f"chinese normaliser: {option_help[name]}",
        )
    p.add_argument(
        "--output_script",
        default="none",
        metavar="SCRIPT",
        help="Convert the model's output into this Chinese script before scoring: none "
        "(default), traditional (OpenCC s2tw, for zh-TW), simplified (t2s), or an OpenCC table "
        "such as s2twp. Unlike --opencc, references stay as written.",
    )
    p.add_argument(
        "--expected_script",
        choices=["auto", "traditional", "simplified", "none"],
        default="auto",
        help="Report the share of output Han characters valid in this script. auto "
        "(default): the --output_script, else the script of the references (none for text "
        "without script-specific characters).",
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
    f = data_fields["language_token"]
    p.add_argument(
        "--language_token",
        choices=["per_row", "fixed", "none"],
        default=f.default,
        help=f.metadata["help"] + " Use the value the model was trained with.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.config import DataConfig
    from fitwhisper.evaluate import compare_manifest, evaluate_manifest
    from fitwhisper.scoring import NormalizeOptions

    options = dict(
        language=args.language,
        task=args.task,
        batch_size=args.batch_size,
        generation_max_length=args.generation_max_length,
        max_samples=args.max_samples,
        metric=args.metric,
        normalizer=args.normalizer,
        opencc=args.opencc,
        options=NormalizeOptions(
            punctuation=args.punctuation,
            spaces=args.spaces,
            case=args.case,
            numerals=args.numerals,
        ),
        output_script=args.output_script,
        expected_script=args.expected_script,
        bad_rows=args.bad_rows,
        data_cfg=DataConfig(
            audio_column=args.audio_column,
            text_column=args.text_column,
            language_column=args.language_column,
            language_token=args.language_token,
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
