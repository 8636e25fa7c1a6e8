"""The training methods: one small object each, looked up by name as the export formats
are (`export/formats.py`), one vocabulary for `train`, `plan`, `tune`, the presets and
`doctor`.

    full   the whole model trains (`--freeze_encoder`: the decoder only); saves a model
    lora   LoRA adapters (PEFT) on a frozen base; saves an adapter
    dora   DoRA adapters (PEFT's use_dora: LoRA plus a trained magnitude per output)
    8bit   the base loaded in 8 bits (bitsandbytes LLM.int8()), LoRA on top
    4bit   the base loaded in 4-bit NF4 (QLoRA), LoRA on top

`--method full|lora|dora|8bit-lora|4bit-lora` selects one; the earlier flags `--use_lora`,
`--use_8bit` and `--use_4bit` stay as its aliases. `method_of` is the one reader of all of
them: code elsewhere asks the object it returns, never the flags. Each object holds what
the planner needs (its time factor), its PEFT options, its recipe (learning rate, applied by
recipes.py) and its learning-rate range for `tune` (tune/space.py). `plan --allow_methods`
takes the names. The loading and preparing that needs torch lives in
`train/method_loading.py`, which reads these objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Method = Literal["full", "lora", "dora", "8bit", "4bit"]
# What `--method` takes: the names, with the quantised ones saying they train LoRA.
MethodOption = Literal["full", "lora", "dora", "8bit-lora", "4bit-lora"]
# The earlier flags, each an alias of a --method value.
ALIASES = {"use_4bit": "4bit-lora", "use_8bit": "8bit-lora", "use_lora": "lora"}


@dataclass(frozen=True)
class TrainingMethod:
    """What one method loads, what it trains, how it saves and what it refuses."""

    name: Method
    option: MethodOption  # what --method calls it
    title: str  # in sentences and plans: "8-bit base + LoRA"
    label: str  # in table columns (`fitwhisper doctor`, the presets): "8-bit+LoRA"
    base_bits: int | None  # the base quantised to 8 or 4 bits by bitsandbytes; None: as stored
    # The planner's time per clip against full fine-tuning (memory/search.py): adapters
    # skip the frozen weights' gradients; a quantised base dequantises in every matmul.
    relative_time: float = 1.0
    # PEFT LoraConfig options beyond rank, alpha, dropout and targets, as (name, value).
    peft_options: tuple[tuple[str, Any], ...] = ()
    # Whether the frozen base may load in the run's half precision under mixed precision
    # (train/method_loading.py `base_dtype`): plain LoRA only, measured; DoRA's weight norm
    # and bitsandbytes' layers keep theirs.
    half_base: bool = False
    # Its recipe (recipes.py applies it to what the user left alone): the learning rate,
    # None for TrainConfig's own (full fine-tuning's 1e-5), and why, as the run plan says.
    learning_rate: float | None = None
    learning_rate_reason: str = ""
    # `tune`'s learning-rate range for it (tune/space.py, log-uniform); adapter methods
    # also search the adapters' rank, alpha and dropout.
    learning_rate_range: tuple[float, float] = (3e-6, 1e-4)

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
        """How the command line selects it (full: nothing to pass): the earlier flag where
        one names it, as plans and messages have always said it."""
        if self.name == "full":
            return None
        alias = next((k for k, v in ALIASES.items() if v == self.option), None)
        return f"--{alias}" if alias else f"--method {self.option}"

    def options(self) -> dict[str, Any]:
        """The option fields that select it: `method`, with the earlier flags set as they
        would be (plan.json has held those since before --method)."""
        return {
            "method": self.option,
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


# Adapters start at zero and hold a small share of the weights: at full fine-tuning's
# 1e-5 they barely move (bench/RESULTS-quality.md), so every adapter method trains at this.
ADAPTER_LEARNING_RATE = 1e-3
_ADAPTER_RECIPE = dict(
    learning_rate=ADAPTER_LEARNING_RATE,
    learning_rate_reason=f"LoRA's default {ADAPTER_LEARNING_RATE:g} (no --learning_rate): "
    "adapters start at zero and barely move at full fine-tuning's 1e-5 "
    "(bench/RESULTS-quality.md)",
    learning_rate_range=(1e-5, 3e-3),
)

# Heaviest first: `plan` and the presets try them in this order (DoRA only when asked for:
# it is LoRA with more to compute, never a lighter fallback).
METHODS: dict[Method, TrainingMethod] = {
    m.name: m
    for m in (
        TrainingMethod("full", "full", "full", "full", None),
        TrainingMethod(
            "lora", "lora", "LoRA", "LoRA", None, 0.75, half_base=True, **_ADAPTER_RECIPE
        ),
        TrainingMethod(
            "dora",
            "dora",
            "DoRA",
            "DoRA",
            None,
            relative_time=0.75 * 1.3,
            peft_options=(("use_dora", True),),
            **_ADAPTER_RECIPE,
        ),
        TrainingMethod(
            "8bit", "8bit-lora", "8-bit base + LoRA", "8-bit+LoRA", 8, 0.75 * 1.5, **_ADAPTER_RECIPE
        ),
        TrainingMethod(
            "4bit", "4bit-lora", "4-bit base + LoRA", "4-bit+LoRA", 4, 0.75 * 1.3, **_ADAPTER_RECIPE
        ),
    )
}
# Those `plan`, `--auto_fit` and the presets choose among when no method is named.
FALLBACKS: tuple[Method, ...] = ("full", "lora", "8bit", "4bit")
_NAME_OF_OPTION: dict[str, Method] = {m.option: m.name for m in METHODS.values()}


def _by_option(option: str) -> TrainingMethod:
    return METHODS[_NAME_OF_OPTION[option]]


# The first bitsandbytes whose CPU backend trains 8-bit/4-bit bases and adamw_8bit (tested).
BNB_CPU_VERSION = (0, 50)


def bitsandbytes_runs_here(version: str | None, *, cuda: bool) -> bool:
    """Whether the installed bitsandbytes (`version`, None: not installed) can train here:
    any on CUDA, 0.50 or newer on CPU."""
    if version is None:
        return False
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    return cuda or parts >= BNB_CPU_VERSION


def method_of(options: Any) -> TrainingMethod:
    """The method a set of options selects (a ModelConfig, plan's options, a MemoryRequest,
    a run record's model section as a namespace): `method` (a MemoryRequest's
    `training_method`, a name), else the earlier flags, 4-bit and 8-bit winning over
    --use_lora as they always did. Conflicts between them are `method_problems`'."""
    if (name := getattr(options, "training_method", None)) is not None:
        return METHODS[name]
    named = getattr(options, "method", None) or "full"
    if named != "full" and named in _NAME_OF_OPTION:
        return _by_option(named)
    # An unknown name selects nothing here; `method_problems` names it before anything loads.
    for alias, option in ALIASES.items():
        if getattr(options, alias, False):
            return _by_option(option)
    return METHODS["full"]


def method_problems(options: Any) -> list[str]:
    """The method options that contradict each other, as sentences."""
    if getattr(options, "use_8bit", False) and getattr(options, "use_4bit", False):
        return ["--use_8bit and --use_4bit are both set; pick one"]
    named = getattr(options, "method", None) or "full"
    if named == "full":
        return []
    if named not in _NAME_OF_OPTION:
        return [f"--method {named!r} is none of {', '.join(_NAME_OF_OPTION)}"]
    method = _by_option(named)
    for alias, option in ALIASES.items():
        aliased = _by_option(option)
        # --use_lora beside an adapter method says nothing new; any other alias must agree.
        agrees = aliased is method or (alias == "use_lora" and method.adapters)
        if getattr(options, alias, False) and not agrees:
            return [f"--method {named} and --{alias} (--method {option}) name two methods"]
    return []


def with_method(options: Any, method: TrainingMethod) -> dict[str, Any]:
    """The fields that make `options` select `method`, for `dataclasses.replace`."""
    return {k: v for k, v in method.options().items() if hasattr(options, k)}
