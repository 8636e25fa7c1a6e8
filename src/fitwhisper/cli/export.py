"""`fitwhisper export`: flags (from `ExportArgs`) and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.models.ct2_export import Quantization
from fitwhisper.option_ranges import COUNT_OR_ALL
from fitwhisper.scoring import OPENCC_CONFIGS

# OpenCC's tables as a Literal, so the flag's choices come from the field's type.
OpenCCConfig = Literal[OPENCC_CONFIGS]  # type: ignore[valid-type]
# No f32: whisper.cpp (1.8, pywhispercpp 1.5) aborts the process on an f32 file, whose conv
# kernels its CPU im2col cannot take (ggml-org/whisper.cpp#2557).
GgmlType = Literal["f16", "q8_0", "q5_0", "q5_1", "q4_0", "q4_1"]


@dataclass(frozen=True)
class ExportArgs:
    """What to export, where to, and what to re-score it on."""

    model: str = field(
        metadata={
            "path": "model",
            "help": "Model spec, as for evaluate.",
            "positional": True,
            "metavar": "MODEL",
        }
    )
    out: str = field(
        metadata={
            "path": "new_folder",
            "help": "Folder to write to: the model itself for one --format, a folder per "
            "format (OUT/ct2, OUT/ggml, ...) for several; README.md (the model card) and, "
            "with --manifest, export_report.json go here.",
            "positional": True,
            "metavar": "OUT",
        }
    )
    format: list[str] = field(
        default_factory=lambda: ["ct2"],
        metadata={
            "help": "ct2 (faster-whisper), ggml (whisper.cpp), onnx (onnxruntime), openai "
            "(openai-whisper); several as a comma list, e.g. ct2,ggml,onnx,openai",
            "metavar": "FORMATS",
        },
    )
    quantization: Quantization = field(
        default="int8",
        metadata={
            "help": "ct2 weight type: int8 (default; smallest, fastest on CPU), int8_float16 "
            "or float16 (GPU), float32."
        },
    )
    ggml_dtype: GgmlType = field(
        default="f16",
        metadata={
            "help": "ggml weight type: f16 (whisper.cpp's converter's default; f32 is not "
            "offered: whisper.cpp's CPU build aborts on it), or "
            "quantised by ggml's own quantiser (the library inside pywhispercpp's wheel, "
            "whisper.cpp's quantize tool's rules): q8_0, q5_0, q5_1, q4_0, q4_1."
        },
    )
    manifest: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "help": "Re-score: the source and each export, in its own engine, transcribe "
            "these rows and a long file made of them (with timestamps); table printed and "
            "written to OUT/export_report.json and the model card.",
        },
    )
    language: str | None = field(
        default=None,
        metadata={"help": "Language of the manifest's speech, e.g. zh.", "metavar": "LANG"},
    )
    max_samples: int | None = field(
        default=None,
        metadata={**COUNT_OR_ALL, "help": "Score only the first N rows.", "metavar": "N"},
    )
    opencc: OpenCCConfig | None = field(
        default=None,
        metadata={
            "help": "OpenCC conversion of both sides before scoring, as for evaluate (e.g. t2s).",
            "metavar": "CONFIG",
        },
    )
    batch_size: int = field(
        default=8, metadata={"min": 1, "help": "Clips per batch when re-scoring."}
    )
    force: bool = field(
        default=False,
        metadata={
            "help": "Replace OUT if it exists and an earlier fitwhisper command made it "
            "(never a folder it did not make, nor the model).",
            "switch": True,
        },
    )


OPTIONS = (Options(ExportArgs),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "export",
        OPTIONS,
        run,
        help="Export a model (LoRA adapters merged) to faster-whisper, whisper.cpp, ONNX "
        "or openai-whisper, and check each scores as its source.",
        description="Merges a LoRA adapter into its base when MODEL is one, then writes each "
        "--format: ct2 (CTranslate2's own converter; faster-whisper, `fitwhisper transcribe "
        "--engine ct2`), ggml (the file whisper.cpp loads, mel filters and vocabulary "
        "inside), onnx (encoder and decoder with past key values for onnxruntime) and "
        "openai (the checkpoint whisper.load_model reads). The fine-tune's language and "
        "task travel with each. With --manifest, the source and every export transcribe "
        "the same rows, each in its own engine, scored with the metric and normaliser of "
        "`fitwhisper evaluate`, plus a long file with timestamps; the table is printed and "
        "written to OUT/export_report.json. The model card (README.md, the Hub's format) "
        "is copied from the source and gets the table.",
    )


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from fitwhisper.export.card import write_export_cards
    from fitwhisper.export.formats import FORMATS, check_formats, export_formats, export_outputs
    from fitwhisper.export.rescoring import rescore, scoring_rows
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.models.short_window import thirty_second_note
    from fitwhisper.output_guard import check_outputs

    a = build_config(ExportArgs, args)
    formats = check_formats(a.format)
    # As given, before anything resolves; export_formats checks the resolved model again
    # (a run folder's final/, a LoRA adapter's base).
    check_outputs(
        export_outputs(a.out, formats, a.force), {"MODEL": a.model, "--manifest": a.manifest}
    )
    model = resolve_model(a.model)
    # The manifest's rows are checked before any format is written (and the formats'
    # refusals inside export_formats, before the first is written).
    rows = scoring_rows(model, a.manifest, a.max_samples) if a.manifest else None
    written = export_formats(
        model,
        a.out,
        formats,
        quantization=a.quantization,
        ggml_dtype=a.ggml_dtype,
        overwrite=a.force,
    )
    for w in written:
        print(f"exported {w.source} -> {w.out} ({w.format}, {w.size_mb:.0f} MB)")
        print(f"  load it: {FORMATS[w.format].loads_with.replace('OUT', str(w.out))}")
    if written and (note := thirty_second_note(model.path_or_id)):
        print(note)
    rescored = None
    if a.manifest:
        rescored = rescore(
            model,
            {w.format: w.out for w in written},
            a.manifest,
            language=a.language,
            max_samples=a.max_samples,
            batch_size=a.batch_size,
            opencc=a.opencc,
            rows=rows,
        )
        print(rescored.format())
        report = Path(a.out) / "export_report.json"
        report.write_text(json.dumps(rescored.as_dict(), indent=2, ensure_ascii=False) + "\n")
        print(f"  wrote  {report}")
    source = model.adapter or (model.path_or_id if model.kind != "hub" else None)
    cards = write_export_cards(
        source and Path(str(source)), model.spec, a.language, Path(a.out), written, rescored
    )
    print(f"  wrote  {cards[0]} (model card)")
    return 0
