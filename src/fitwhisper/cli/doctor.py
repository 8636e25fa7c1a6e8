"""`fitwhisper doctor`: flags and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.memory.architectures import TABLE_MODELS


@dataclass(frozen=True)
class DoctorOptions:
    """Which models get a verdict, and how the report is printed."""

    models: list[str] = field(
        default_factory=lambda: list(TABLE_MODELS),
        metadata={
            "help": "Comma-separated models to give verdicts for (tiny to large-v3, turbo and "
            "Breeze-ASR-25 by default)."
        },
    )
    json: bool = field(
        default=False, metadata={"help": "Print JSON instead of text.", "switch": True}
    )


OPTIONS = (Options(DoctorOptions),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "doctor",
        OPTIONS,
        run,
        help="What this machine can train: GPUs, free memory, versions, a verdict per model.",
        description="Reports the GPUs with total and free memory, the processes already "
        "holding GPU memory (nvidia-smi or pynvml), library and CUDA versions, bf16/fp16/8-bit "
        "support, and for each model size and method (full, LoRA, 8-bit+LoRA, 4-bit+LoRA) "
        "whether one training step at batch 1 with gradient checkpointing fits the free "
        "memory, as `fitwhisper plan` predicts it. Without a GPU it reports CPU memory.",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.memory.doctor import doctor, format_report

    opts = build_config(DoctorOptions, args)
    report = doctor(models=opts.models)
    print(json.dumps(report, indent=2) if opts.json else format_report(report))
    return 0
