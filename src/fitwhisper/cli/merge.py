"""`fitwhisper merge`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.models.merge import merge_adapter

    r = merge_adapter(args.adapter, args.out, overwrite=args.force)
    print(f"merged {r.adapter} into its base {r.base} ({r.n_params / 1e6:.2f}M params)")
    print(f"  wrote  {r.out}  (loads with from_pretrained, or --model {r.out})")
    return 0
