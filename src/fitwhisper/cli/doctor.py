"""`fitwhisper doctor`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.memory.doctor import doctor, format_report

    report = doctor(models=[m.strip() for m in args.models.split(",") if m.strip()])
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0
