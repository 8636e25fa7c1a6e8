"""`fitwhisper export`: flags (from `ExportArgs`) and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.models.ct2_export import Quantization
from fitwhisper.scoring import OPENCC_CONFIGS

# OpenCC's tables as a Literal, so the flag's choices come from the field's type.
OpenCCConfig = Literal[OPENCC_CONFIGS]  # type: ignore[valid-type]


@dataclass(frozen=True)
class ExportArgs:
    """What to export, where to, and what to re-score it on."""

    model: str = field(
        metadata={"help": "Model spec, as for evaluate.", "positional": True, "metavar": "MODEL"}
    )
    out: str = field(
        metadata={
            "help": "Folder to write the CTranslate2 model to.",
            "positional": True,
            "metavar": "OUT",
        }
    )
    quantization: Quantization = field(
        default="int8",
        metadata={
            "help": "Weight type: int8 (default; smallest, fastest on CPU), int8_float16 or "
            "float16 (GPU), float32."
        },
    )
    manifest: str | None = field(
        default=None, metadata={"help": "Re-score this manifest with both models."}
    )
    language: str | None = field(
        default=None,
        metadata={"help": "Language of the manifest's speech, e.g. zh.", "metavar": "LANG"},
    )
    max_samples: int | None = field(
        default=None, metadata={"help": "Score only the first N rows.", "metavar": "N"}
    )
    opencc: OpenCCConfig | None = field(
        default=None,
        metadata={
            "help": "OpenCC conversion of both sides before scoring, as for evaluate (e.g. t2s).",
            "metavar": "CONFIG",
        },
    )
    batch_size: int = field(default=8, metadata={"help": "Clips per batch when re-scoring."})
    force: bool = field(
        default=False, metadata={"help": "Replace OUT if it exists.", "switch": True}
    )


OPTIONS = (Options(ExportArgs),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "export",
        OPTIONS,
        run,
        help="Export a model (LoRA adapters merged) to CTranslate2 for faster-whisper.",
        description="Merges a LoRA adapter into its base when MODEL is one, converts with "
        "CTranslate2's own TransformersConverter and writes a folder that faster-whisper's "
        "WhisperModel and `fitwhisper transcribe --engine ct2` load. With --manifest, the "
        "source and the exported model transcribe the same rows (greedy) and are scored with "
        "the metric and normaliser of `fitwhisper evaluate`; the change is printed and "
        "written to OUT/export_report.json.",
    )


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from fitwhisper.export import export_ct2, rescore

    a = build_config(ExportArgs, args)
    r = export_ct2(a.model, a.out, quantization=a.quantization, overwrite=a.force)
    print(f"exported {r.source} -> {r.out} ({r.quantization}, {r.size_mb:.0f} MB)")
    print(f"  use it: fitwhisper transcribe --model {r.out} AUDIO  (or faster-whisper)")
    if a.manifest:
        s = rescore(
            a.model,
            r.out,
            a.manifest,
            language=a.language,
            max_samples=a.max_samples,
            batch_size=a.batch_size,
            opencc=a.opencc,
        )
        print(s.format())
        report = Path(r.out) / "export_report.json"
        report.write_text(json.dumps(s.as_dict(), indent=2, ensure_ascii=False) + "\n")
        print(f"  wrote  {report}")
    return 0
