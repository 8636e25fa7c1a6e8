"""`fitwhisper import-ct2`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
