"""`fitwhisper merge`: flags (from `MergeArgs`) and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config


@dataclass(frozen=True)
class MergeArgs:
    """The adapter to merge and where the merged model goes."""

    adapter: str = field(
        metadata={
            "path": "folder",
            "help": "A LoRA run's final/ folder, or the run folder itself.",
            "positional": True,
            "metavar": "ADAPTER",
        }
    )
    out: str = field(
        metadata={
            "path": "new_folder",
            "help": "Folder to write the merged model to.",
            "positional": True,
            "metavar": "OUT",
        }
    )
    force: bool = field(
        default=False,
        metadata={
            "help": "Replace OUT if it exists and an earlier fitwhisper command made it (never a "
            "folder it did not make, nor the adapter or its base model).",
            "switch": True,
        },
    )


OPTIONS = (Options(MergeArgs),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "merge",
        OPTIONS,
        run,
        help="Merge a LoRA adapter into its base model: a full model that loads anywhere.",
        description="Loads the adapter's base model (named in its adapter_config.json; a Hub "
        "id, a folder or an offline name) in float32, folds the LoRA updates into its weights "
        "and writes a transformers folder with the processor and the generation config "
        "(language, task) that from_pretrained and the ASR pipeline load without PEFT.",
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.models.merge import merge_adapter, merge_inputs
    from fitwhisper.output_guard import Output, check_outputs

    a = build_config(MergeArgs, args)
    check_outputs([Output("OUT", a.out, "new_folder", replace=a.force)], merge_inputs(a.adapter))
    r = merge_adapter(a.adapter, a.out, overwrite=a.force)
    print(f"merged {r.adapter} into its base {r.base} ({r.n_params / 1e6:.2f}M params)")
    print(f"  wrote  {r.out}  (loads with from_pretrained, or --model {r.out})")
    return 0
