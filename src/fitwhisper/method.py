"""The training methods by name: one vocabulary for `train`, `plan` and the presets.

    full   the whole model trains (`--freeze_encoder`: the decoder only)
    lora   LoRA adapters (PEFT) on a frozen base
    8bit   the base loaded in 8 bits (bitsandbytes LLM.int8()), LoRA on top
    4bit   the base loaded in 4-bit NF4 (QLoRA), LoRA on top

The flags that select them are `--use_lora`, `--use_8bit` and `--use_4bit`; `plan
--allow_methods` takes the names. How each one loads and trains is `train/methods.py`.
"""

from __future__ import annotations

from typing import Literal, Protocol

Method = Literal["full", "lora", "8bit", "4bit"]
METHODS: tuple[Method, ...] = ("full", "lora", "8bit", "4bit")  # heaviest first
METHOD_NAMES: dict[Method, str] = {
    "full": "full",
    "lora": "LoRA",
    "8bit": "8-bit base + LoRA",
    "4bit": "4-bit base + LoRA",
}
# Short labels for table columns (`fitwhisper doctor`, the presets).
METHOD_LABELS: dict[Method, str] = {
    "full": "full",
    "lora": "LoRA",
    "8bit": "8-bit+LoRA",
    "4bit": "4-bit+LoRA",
}


# The first bitsandbytes whose CPU backend trains 8-bit/4-bit bases and adamw_8bit (tested).
BNB_CPU_VERSION = (0, 50)


def bitsandbytes_runs_here(version: str | None, *, cuda: bool) -> bool:
    """Whether the installed bitsandbytes (`version`, None: not installed) can train here:
    any on CUDA, 0.50 or newer on CPU."""
    if version is None:
        return False
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    return cuda or parts >= BNB_CPU_VERSION


class _MethodFlags(Protocol):
    use_lora: bool
    use_8bit: bool
    use_4bit: bool


def method_of(options: _MethodFlags) -> Method:
    """The method the flags select (a ModelConfig, a MemoryRequest, plan's options); 8-bit
    and 4-bit always train LoRA adapters, so they win over --use_lora."""
    if options.use_4bit:
        return "4bit"
    if options.use_8bit:
        return "8bit"
    return "lora" if options.use_lora else "full"


def method_flags(method: Method) -> dict[str, bool]:
    """The flags that select `method`, those that are on (full: none)."""
    return {
        "full": {},
        "lora": {"use_lora": True},
        "8bit": {"use_8bit": True, "use_lora": True},
        "4bit": {"use_4bit": True, "use_lora": True},
    }[method]


def is_quantised(method: Method) -> bool:
    return method in ("8bit", "4bit")


def weight_sharding_refusal(
    method: Method, sharding: Literal["fsdp", "zero3"], named: str
) -> tuple[str, str] | None:
    """Why `method` cannot train with its weights split across processes by `sharding`
    (`named` as the user asked for it), and what to do instead; None where it can.

    `train` (train/sharding.py) and `plan` (memory/sharded.py) both ask here. Refused: an
    8-bit/4-bit base under FSDP or ZeRO-3. bitsandbytes packs those weights in integer
    tensors: FSDP1 cannot flatten them (torch's fsdp/_flat_param.py: "Cannot flatten
    integer dtype tensors"), and PEFT's recipes for QLoRA under FSDP and ZeRO-3 store the
    4-bit weights in a float dtype instead (bnb_4bit_quant_storage), which fitwhisper does
    not; 8-bit has no such recipe. ZeRO-3 partitioning fitwhisper's integer-packed base ran
    on bitsandbytes' CPU backend only, never on CUDA.
    """
    if not is_quantised(method):
        return None
    flag = f"--use_{method}"
    name = "FSDP" if sharding == "fsdp" else "ZeRO-3"
    return (
        f"{flag} with {named}: {name} splits every weight across the processes, and "
        "fitwhisper's 8-bit/4-bit base (bitsandbytes, packed in integer tensors) is not "
        "supported split that way",
        "train the quantised base with plain DDP (torchrun without --deepspeed), or with "
        f"--deepspeed zero2 (weights whole on every GPU), or drop {flag} and shard LoRA "
        f"(--use_lora) or a full fine-tune with {named}",
    )
