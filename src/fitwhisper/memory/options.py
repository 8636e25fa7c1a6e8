"""The options of `fitwhisper plan`, and the search's defaults: no heavy imports, so the
command's flags and help are built without torch.

Where a plan option is a `train` option (model, batch, checkpointing, method, LoRA, clip
and label lengths, attention), its default and help are `train`'s own field, so a plan
describes what `train` would run with the same flags.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.method import MethodOption
from fitwhisper.option_ranges import PROCESSES

DEFAULT_MARGIN = 0.10  # of the budget, kept free for what the prediction leaves out
DEFAULT_EFFECTIVE_BATCH = 16  # effective batches of 8-32 are the usual Whisper recipes


def same_as(cls: type, name: str, extra_help: str = "") -> Any:
    """A field with the default, help and declared values of `cls`'s field `name` (one
    text for both commands); `extra_help` is appended."""
    f = {x.name: x for x in dataclasses.fields(cls)}[name]
    from fitwhisper.option_ranges import VALUE_KEYS

    meta = {k: v for k, v in f.metadata.items() if k in VALUE_KEYS}
    meta["help"] = f.metadata["help"] + extra_help
    if f.default_factory is not dataclasses.MISSING:
        return field(default_factory=f.default_factory, metadata=meta)
    return field(default=f.default, metadata=meta)


@dataclass(frozen=True)
class PlanOptions:
    """One training configuration to predict, and the GPU to fit it to."""

    model: str = same_as(ModelConfig, "model")
    per_device_train_batch_size: int = same_as(TrainConfig, "per_device_train_batch_size")
    gradient_checkpointing: bool = same_as(TrainConfig, "gradient_checkpointing")
    freeze_encoder: bool = same_as(ModelConfig, "freeze_encoder")
    fp16: bool = field(default=False, metadata={"help": "fp16 mixed precision.", "switch": True})
    bf16: bool = field(default=False, metadata={"help": "bf16 mixed precision.", "switch": True})
    fp32: bool = field(
        default=False, metadata={"help": "fp32, no mixed precision.", "switch": True}
    )
    gpu: str | None = field(
        default=None,
        metadata={
            "help": "The GPU planned for, for its precision, by train's rule: without --fp16/"
            "--bf16/--fp32, bf16 mixed precision unless NAME is a pre-Ampere card (T4, V100, "
            "P100, RTX 20xx, ...) or fp16-only, which get fp16; without --gpu, this machine's "
            "GPU decides, and bf16 is assumed when there is none. --device cpu plans fp32.",
            "metavar": "NAME",
        },
    )
    method: MethodOption = same_as(ModelConfig, "method")
    use_lora: bool = same_as(ModelConfig, "use_lora")
    lora_r: int = same_as(ModelConfig, "lora_r")
    lora_target_modules: list[str] = same_as(ModelConfig, "lora_target_modules")
    lora_dropout: float = same_as(ModelConfig, "lora_dropout")
    use_8bit: bool = same_as(ModelConfig, "use_8bit")
    use_4bit: bool = same_as(ModelConfig, "use_4bit")
    optim: Literal["adamw_torch", "adamw_torch_fused", "adamw_8bit", "adafactor"] = field(
        default="adamw_torch", metadata={"help": "Optimizer."}
    )
    max_audio_len: float = same_as(DataConfig, "max_audio_len")
    max_label_tokens: int = same_as(
        DataConfig,
        "max_label_tokens",
        " Batches are padded to their longest transcript, so this is the worst case.",
    )
    data: str | None = field(
        default=None,
        metadata={
            "path": "any",
            "metavar": "SHARDS",
            "help": "A folder made by `fitwhisper shard`: its index's longest clip and "
            "longest transcript (a bound on its tokens) replace --max_audio_len and "
            "--max_label_tokens where they are shorter. Nothing in the shards is read.",
        },
    )
    attn_implementation: Literal["sdpa", "eager"] = same_as(TrainConfig, "attn_implementation")
    device: Literal["cuda", "cpu"] = field(
        default="cuda",
        metadata={
            "help": "Device to plan for; cpu predicts tensor bytes on a CPU run.",
        },
    )
    num_gpus: int = field(
        default=1,
        metadata={
            **PROCESSES,
            "min": 1,
            "help": "GPUs per node of a data-parallel run (torchrun --nproc_per_node); above "
            "1 (in all), the plan is per GPU.",
            "metavar": "N",
        },
    )
    num_nodes: int = field(
        default=1,
        metadata={
            "min": 1,
            "help": "Machines of the run, each with --num_gpus GPUs.",
            "metavar": "M",
        },
    )
    deepspeed: Literal["zero2", "zero3", "zero3_offload"] | None = field(
        default=None,
        metadata={
            "help": "DeepSpeed ZeRO stage planned for: zero2 shards gradients and optimizer "
            "states over all GPUs, zero3 the weights too, zero3_offload keeps the optimizer "
            "states in CPU memory. Default: plain DDP (every GPU holds everything); with "
            "--fit/--gpu_memory and no --deepspeed, ZeRO-2 then ZeRO-3 are tried when DDP "
            "does not fit.",
        },
    )
    json: bool = field(
        default=False, metadata={"help": "Print JSON instead of a table.", "switch": True}
    )
    # The recommendation: a search over settings for a GPU's memory.
    gpu_memory: str | None = field(
        default=None,
        metadata={
            "help": "Memory of the GPU to fit, e.g. 8GB, 12GiB, 40GB (GB = GiB = 2**30 bytes, "
            "as GPU makers count). Turns on the search.",
            "aliases": ["--gpu-memory"],
            "metavar": "SIZE",
        },
    )
    fit: bool = field(
        default=False,
        metadata={
            "help": "Search for this machine's GPU (its total memory); implied by --gpu_memory.",
            "switch": True,
        },
    )
    effective_batch_size: int = field(
        default=DEFAULT_EFFECTIVE_BATCH,
        metadata={
            "min": 1,
            "help": "Clips per optimizer step to keep: per-device batch x accumulation.",
        },
    )
    margin: float = field(
        default=DEFAULT_MARGIN,
        metadata={
            "min": 0,
            "below": 1,
            "help": "Fraction of the GPU's memory kept free for what the prediction leaves out.",
        },
    )
    allow_methods: str | None = field(
        default=None,
        metadata={
            "help": "Methods the search may use, from full, lora, dora, 8bit, 4bit; lighter "
            "ones only when the heavier cannot fit. Default: the method named by --method (or "
            "--use_lora/--use_8bit/--use_4bit) alone, else full, lora, 8bit and 4bit.",
            "metavar": "A,B",
        },
    )
    output: str | None = field(
        default=None,
        metadata={
            "path": "new_file",
            "help": "Write the recommendation as JSON (plan.json) for `fitwhisper train "
            "--plan FILE`.",
            "metavar": "FILE",
        },
    )
    presets: bool = field(
        default=False,
        metadata={
            "help": "Print the presets table (8-80 GB x model sizes x methods) and exit; with "
            "--readme FILE, write it between the presets markers of FILE instead.",
            "switch": True,
        },
    )
    readme: str | None = field(
        default=None,
        metadata={
            "path": "file",
            "help": "With --presets: the Markdown file (docs/memory-planning.md) whose presets "
            "table is rewritten.",
            "metavar": "FILE",
        },
    )
    workers: int | None = field(
        default=None,
        metadata={
            "min": 1,
            "none": "the CPUs, at most 4",
            "help": "With --presets: parallel processes (none: CPUs, at most 4).",
        },
    )


# `fitwhisper plan --help` shows the search's options in a group of their own.
RECOMMEND_FIELDS = (
    "gpu_memory",
    "fit",
    "effective_batch_size",
    "margin",
    "allow_methods",
    "output",
    "presets",
    "readme",
    "workers",
)
PLAN_FIELDS = tuple(
    f.name for f in dataclasses.fields(PlanOptions) if f.name not in RECOMMEND_FIELDS
)
