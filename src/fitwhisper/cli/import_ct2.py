"""`fitwhisper import-ct2`: flags (from `ImportCt2Args`) and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

from fitwhisper.cli.flags import Options, add_command, build_config


@dataclass(frozen=True)
class ImportCt2Args:
    """The CTranslate2 model to import and where the checkpoint goes."""

    src: str = field(
        metadata={
            "path": "any",
            "help": "CTranslate2 model folder (model.bin or model.bin.part1, .part2, ...), or a "
            "model.bin file.",
            "positional": True,
            "metavar": "SRC",
        }
    )
    out: str = field(
        metadata={
            "path": "new_folder",
            "help": "Folder to write the checkpoint to.",
            "positional": True,
            "metavar": "OUT",
        }
    )
    part: list[str] = field(
        default_factory=list,
        metadata={
            "path": "file",
            "help": "A further part of a split model.bin; repeat in order. SRC is then the "
            "first part.",
        },
    )
    dtype: Literal["float32", "float16"] = field(
        default="float32",
        metadata={"help": "dtype of the written weights (default: float32, for training)."},
    )
    config: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "CTranslate2 config.json (default: next to the model).",
            "metavar": "FILE",
        },
    )
    tokenizer: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "tokenizer.json (default: next to the model).",
            "metavar": "FILE",
        },
    )
    force: bool = field(
        default=False,
        metadata={
            "help": "Replace OUT if it exists and an earlier fitwhisper command made it "
            "(never a folder it did not make).",
            "switch": True,
        },
    )


OPTIONS = (Options(ImportCt2Args),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "import-ct2",
        OPTIONS,
        run,
        help="Convert a CTranslate2/faster-whisper model folder into a transformers checkpoint.",
        description="Convert a CTranslate2 (faster-whisper) Whisper model into a transformers "
        "checkpoint folder that from_pretrained and the ASR pipeline load. Quantised models "
        "(int8, int16) are dequantised; known tokenizer.json defects (a lost BPE merge, missing "
        "timestamp tokens) are repaired and reported.",
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.models.ct2_import import import_ct2
    from fitwhisper.output_guard import Output, check_outputs

    a = build_config(ImportCt2Args, args)
    check_outputs(
        [Output("OUT", a.out, "new_folder", replace=a.force)],
        [
            ("SRC", a.src),
            *(("--part", p) for p in a.part or ()),
            ("--config", a.config),
            ("--tokenizer", a.tokenizer),
        ],
    )
    # Paths stay strings in the parser; import_ct2 takes str or Path.
    src = [a.src, *a.part] if a.part else a.src
    r = import_ct2(
        src,
        a.out,
        dtype=a.dtype,
        overwrite=a.force,
        config_file=a.config,
        tokenizer_file=a.tokenizer,
    )
    lang = "multilingual" if r.multilingual else "English-only"
    print(f"imported Whisper {r.kind} ({lang}, {r.n_params / 1e6:.2f}M params)")
    print(f"  weights   {r.source_dtype} -> {r.dtype}")
    for fix in r.repairs:
        print(f"  repaired  {fix}")
    print(f"  wrote     {r.out}  (loads with from_pretrained, or --model {r.out})")
    return 0
