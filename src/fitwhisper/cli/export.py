"""`fitwhisper export`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from fitwhisper.export import QUANTIZATIONS
    from fitwhisper.scoring import OPENCC_CONFIGS

    p = sub.add_parser(
        "export",
        parents=[common],
        help="Export a model (LoRA adapters merged) to CTranslate2 for faster-whisper.",
        description="Merges a LoRA adapter into its base when MODEL is one, converts with "
        "CTranslate2's own TransformersConverter and writes a folder that faster-whisper's "
        "WhisperModel and `fitwhisper transcribe --engine ct2` load. With --manifest, the "
        "source and the exported model transcribe the same rows (greedy) and are scored with "
        "the metric and normaliser of `fitwhisper evaluate`; the change is printed and "
        "written to OUT/export_report.json.",
    )
    p.add_argument("model", metavar="MODEL", help="Model spec, as for evaluate.")
    p.add_argument("out", metavar="OUT", help="Folder to write the CTranslate2 model to.")
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default="int8",
        help="Weight type: int8 (default; smallest, fastest on CPU), int8_float16 or float16 "
        "(GPU), float32.",
    )
    p.add_argument("--manifest", help="Re-score this manifest with both models.")
    p.add_argument("--language", help="Language of the manifest's speech, e.g. zh.")
    p.add_argument("--max_samples", type=int, help="Score only the first N rows.")
    p.add_argument(
        "--opencc",
        metavar="CONFIG",
        choices=OPENCC_CONFIGS,
        help="OpenCC conversion of both sides before scoring, as for evaluate (e.g. t2s).",
    )
    p.add_argument("--batch_size", type=int, default=8, help="Clips per batch when re-scoring.")
    p.add_argument("--force", action="store_true", help="Replace OUT if it exists.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from fitwhisper.export import export_ct2, rescore

    r = export_ct2(args.model, args.out, quantization=args.quantization, overwrite=args.force)
    print(f"exported {r.source} -> {r.out} ({r.quantization}, {r.size_mb:.0f} MB)")
    print(f"  use it: fitwhisper transcribe --model {r.out} AUDIO  (or faster-whisper)")
    if args.manifest:
        s = rescore(
            args.model,
            r.out,
            args.manifest,
            language=args.language,
            max_samples=args.max_samples,
            batch_size=args.batch_size,
            opencc=args.opencc,
        )
        print(s.format())
        report = Path(r.out) / "export_report.json"
        report.write_text(json.dumps(s.as_dict(), indent=2, ensure_ascii=False) + "\n")
        print(f"  wrote  {report}")
    return 0
