"""The training methods: one small object each, looked up by name as the export formats
are (`export/formats.py`), one vocabulary for `train`, `plan`, `tune`, the presets and
`doctor`.

    full   the whole model trains (`--freeze_encoder`: the decoder only); saves a model
    lora   LoRA adapters (PEFT) on a frozen base; saves an adapter
    8bit   the base loaded in 8 bits (bitsandbytes LLM.int8()), LoRA on top
    4bit   the base loaded in 4-bit NF4 (QLoRA), LoRA on top

The flags that select them are `--use_lora`, `--use_8bit` and `--use_4bit` (`method_of`);
`plan --allow_methods` takes the names. The loading and preparing that needs torch lives in
`train/method_loading.py`, which reads these objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

Method = Literal["full", "lora", "8bit", "4bit"]


@dataclass(frozen=True)
class TrainingMethod:
    """What one method loads, what it trains, how it saves and what it refuses."""

    name: Method
    title: str  # in sentences and plans: "8-bit base + LoRA"
    label: str  # in table columns (`fitwhisper doctor`, the presets): "8-bit+LoRA"
    base_bits: int | None  # the base quantised to 8 or 4 bits by bitsandbytes; None: as stored

    @property
    def quantised(self) -> bool:
        return self.base_bits is not None

    @property
    def adapters(self) -> bool:
        """Whether it trains LoRA adapters on a frozen base (and saves an adapter), rather
        than the whole model. Every quantised base trains adapters: its weights cannot."""
        return self.name != "full"

    @property
    def flag(self) -> str | None:
        """The flag that selects it on the command line (full: none)."""
        return None if self.name == "full" else f"--use_{self.name}"

    @property
    def flags(self) -> dict[str, bool]:
        """The option fields that select it, those that are on (full: none)."""
        return {k: v for k, v in self.options().items() if v}

    def options(self) -> dict[str, bool]:
        """Every method field (use_lora, use_8bit, use_4bit), set to select this method."""
        return {
            "use_lora": self.adapters,
            "use_8bit": self.base_bits == 8,
            "use_4bit": self.base_bits == 4,
        }

    def weight_sharding_refusal(
        self, sharding: Literal["fsdp", "zero3"], named: str
    ) -> tuple[str, str] | None:
        """Why this method cannot train with its weights split across processes by
        `sharding` (`named` as the user asked for it), and what to do instead; None where
        it can.

        `train` (train/sharding.py) and `plan` (memory/sharded.py) both ask here. Refused:
        an 8-bit/4-bit base under FSDP or ZeRO-3. bitsandbytes packs those weights in
        integer tensors: FSDP1 cannot flatten them (torch's fsdp/_flat_param.py: "Cannot
        flatten integer dtype tensors"), and PEFT's recipes for QLoRA under FSDP and ZeRO-3
        store the 4-bit weights in a float dtype instead (bnb_4bit_quant_storage), which
        fitwhisper does not; 8-bit has no such recipe. ZeRO-3 partitioning fitwhisper's
        integer-packed base ran on bitsandbytes' CPU backend only, never on CUDA.
        """
        if not self.quantised:
            return None
        name = "FSDP" if sharding == "fsdp" else "ZeRO-3"
        return (
            f"{self.flag} with {named}: {name} splits every weight across the processes, and "
            "fitwhisper's 8-bit/4-bit base (bitsandbytes, packed in integer tensors) is not "
            "supported split that way",
            "train the quantised base with plain DDP (torchrun without --deepspeed), or with "
            f"--deepspeed zero2 (weights whole on every GPU), or drop {self.flag} and shard "
            f"LoRA (--use_lora) or a full fine-tune with {named}",
        )


# Heaviest first: `plan` and the presets try them in this order.
METHODS: dict[Method, TrainingMethod] = {
    m.name: m
    for m in (
        TrainingMethod("full", "full", "full", None),
        TrainingMethod("lora", "LoRA", "LoRA", None),
        TrainingMethod("8bit", "8-bit base + LoRA", "8-bit+LoRA", 8),
        TrainingMethod("4bit", "4-bit base + LoRA", "4-bit+LoRA", 4),
    )
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


def method_of(options: _MethodFlags) -> TrainingMethod:
    """The method the flags select (a ModelConfig, a MemoryRequest, plan's options); 8-bit
    and 4-bit always train LoRA adapters, so they win over --use_lora."""
    if options.use_4bit:
        return METHODS["4bit"]
    if options.use_8bit:
        return METHODS["8bit"]
    return METHODS["lora" if options.use_lora else "full"]
