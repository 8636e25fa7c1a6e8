"""Choose the fastest training settings that fit a GPU's memory.

    fitwhisper plan --gpu-memory 8GB --model openai/whisper-large-v2

The search keeps the effective batch (per-device batch x accumulation) and tries, for the
method the user asked for (then, where allowed, lighter ones): per-device batches that are
powers of two dividing the effective batch, gradient checkpointing off and on, and AdamW
(then 8-bit AdamW, then Adafactor, only when AdamW fits nowhere). Each candidate's memory is
`predict_memory`'s traced prediction; none is guessed. Memory only grows with the batch, so
each (method, optimizer, checkpointing) needs a binary search over the batches, not a sweep.

Preference, in order: the method (full before LoRA before 8-bit before 4-bit base: a
lighter method is a fallback, never a speed choice), then the optimizer (AdamW before its
lighter stand-ins), then speed. The speed proxy, relative time per clip (lower is faster):

    method.relative_time x (CHECKPOINT_COST if checkpointing) x (1 + STEP_OVERHEAD / batch)

with each method's `relative_time` declared on it (fitwhisper/method.py). These are
stated assumptions, not measurements: checkpointing recomputes the forward pass (+1/3 of a
step's compute); each forward-backward pass has a fixed cost (kernel launches, small
matmuls that leave the GPU idle) worth half a clip's compute; LoRA skips the weight
gradients of the frozen base (about a quarter less compute); 8-bit and 4-bit bases pay to
dequantise every weight on every pass.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fitwhisper.errors import ConfigError
from fitwhisper.memory.options import DEFAULT_EFFECTIVE_BATCH, DEFAULT_MARGIN
from fitwhisper.memory.predict import (
    ALLOCATOR_SLACK,
    GIB,
    MemoryPrediction,
    MemoryRequest,
    predict_memory,
)
from fitwhisper.memory.sharded import (
    DEEPSPEED_STAGES,
    STRATEGY_NAMES,
    ShardedPrediction,
    check_world,
    launch_command,
    shard,
)
from fitwhisper.method import METHODS, Method, method_of

OPTIMIZERS = ("adamw_torch", "adamw_8bit", "adafactor")  # preferred first
# The speed proxy (see the module docstring); relative time per clip.
STEP_OVERHEAD = 0.5  # fixed cost of one forward-backward pass, in clips of compute
CHECKPOINT_COST = 4 / 3  # one more forward pass per step
# GPUs without bf16 (before Ampere): mixed precision is fp16 there.
FP16_ONLY_GPUS = re.compile(
    r"fp16-only|\b(t4|v100|p100|p40|p4|k80|m60|titan v|titan xp|quadro rtx|rtx 20\d\d|"
    r"gtx ?1[06]\d\d|rtx ?20\d\d)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Candidate:
    """One setting the search predicted, and what came of it."""

    method: Method
    optim: str
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    gradient_checkpointing: bool
    predicted_bytes: int
    fits: bool
    relative_time: float  # per clip, lower is faster (the speed proxy)
    reason: str = ""  # why it was not chosen; empty for the recommendation
    strategy: str = "single"  # "single", "ddp", "zero2", "zero3", "zero3_offload"

    def describe(self) -> str:
        ckpt = "checkpointing" if self.gradient_checkpointing else "no checkpointing"
        where = "" if self.strategy == "single" else f"{STRATEGY_NAMES[self.strategy]}, "
        return (
            f"{where}{METHODS[self.method].title}, batch {self.per_device_train_batch_size} x "
            f"{self.gradient_accumulation_steps} accumulation, {ckpt}, {self.optim}"
        )


@dataclass(frozen=True)
class FitPlan:
    """The recommendation: settings, their predicted breakdown, and what was rejected."""

    model: str
    budget_bytes: int  # the GPU's memory
    margin: float  # fraction of the budget kept free
    effective_batch_size: int
    precision: str
    recommended: Candidate
    prediction: MemoryPrediction
    rejected: tuple[Candidate, ...] = field(default=())
    notes: tuple[str, ...] = field(default=())  # what the search skipped, and why
    per_gpu: ShardedPrediction | None = None  # the recommendation on each GPU (world > 1)

    @property
    def num_gpus(self) -> int:
        return self.per_gpu.num_gpus if self.per_gpu else 1

    @property
    def num_nodes(self) -> int:
        return self.per_gpu.num_nodes if self.per_gpu else 1

    @property
    def usable_bytes(self) -> int:
        return int(self.budget_bytes * (1 - self.margin))

    def settings(self) -> dict[str, Any]:
        """The options `fitwhisper train` takes from this plan (`train --plan plan.json`)."""
        r, req = self.recommended, self.prediction.request
        return {
            "model": self.model,
            "per_device_train_batch_size": r.per_device_train_batch_size,
            "gradient_accumulation_steps": r.gradient_accumulation_steps,
            "gradient_checkpointing": r.gradient_checkpointing,
            "optim": r.optim,
            "fp16": self.precision == "fp16",
            "bf16": self.precision == "bf16",
            **METHODS[r.method].options(),
            "freeze_encoder": req.freeze_encoder,
            "lora_r": req.lora_r,
            "lora_target_modules": list(req.lora_target_modules),
            "num_gpus": self.num_gpus,
            "num_nodes": self.num_nodes,
            "deepspeed": r.strategy if r.strategy in DEEPSPEED_STAGES else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "fitwhisper_plan": 1,
            "settings": self.settings(),
            "budget_gib": round(self.budget_bytes / GIB, 3),
            "margin": self.margin,
            "usable_gib": round(self.usable_bytes / GIB, 3),
            "predicted_gib": round(self.recommended.predicted_bytes / GIB, 3),
            "effective_batch_size": self.effective_batch_size,
            "relative_time": self.recommended.relative_time,
            "rejected": [
                {
                    "setting": c.describe(),
                    "predicted_gib": round(c.predicted_bytes / GIB, 3),
                    "reason": c.reason,
                }
                for c in self.rejected
            ],
            "notes": list(self.notes),
            "prediction": self.prediction.to_dict(),
            **({"per_gpu": self.per_gpu.to_dict()} if self.per_gpu else {}),
        }

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return p

    def format(self) -> str:
        r = self.recommended
        eff = self.effective_batch_size
        world = self.num_gpus * self.num_nodes
        gpus = (
            f"{world} GPUs of {_gib(self.budget_bytes)}"
            if world > 1
            else (f"a {_gib(self.budget_bytes)} GPU")
        )
        lines = [
            f"recommended for {self.model} on {gpus} "
            f"(keeping {self.margin:.0%} free: {_gib(self.usable_bytes)} usable):",
            f"  {r.describe()}, {self.precision} mixed precision"
            if self.precision != "fp32"
            else f"  {r.describe()}, fp32",
            f"  effective batch = {r.per_device_train_batch_size} x "
            f"{r.gradient_accumulation_steps} x {world} GPU{'s' if world > 1 else ''} = {eff}",
            f"  predicted peak {_gib(r.predicted_bytes)}, "
            f"{_gib(self.usable_bytes - r.predicted_bytes)} below the usable memory; "
            f"relative time per clip {r.relative_time:.2f}",
            f"  train with: {self.train_command()}",
            "",
            (self.per_gpu or self.prediction).format_table(),
        ]
        if self.rejected:
            lines += ["", "runners-up:"]
            lines += [f"  {c.describe()}: {c.reason}" for c in self.rejected]
        lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)

    def train_command(self) -> str:
        """The train flags, with the launcher for several GPUs (per-GPU plans)."""
        if not self.per_gpu:
            return self.train_flags()
        launch = launch_command(self.recommended.strategy, self.num_gpus, self.num_nodes)
        return launch.replace("...", self.train_flags())

    def train_flags(self) -> str:
        s = self.settings()
        flags = [
            f"--per_device_train_batch_size {s['per_device_train_batch_size']}",
            f"--gradient_accumulation_steps {s['gradient_accumulation_steps']}",
        ]
        if s["gradient_checkpointing"]:
            flags.append("--gradient_checkpointing")
        if s["optim"] != "adamw_torch":
            flags.append(f"--optim {s['optim']}")
        if flag := method_of(SimpleNamespace(**s)).flag:
            flags.append(flag)
        return " ".join(flags)


def parse_memory(text: str) -> int:
    """Bytes of a memory size: '8GB', '12GiB', '24 gb', '8192MiB', or a bare number of GiB.

    GPU makers' GB are GiB (an '8 GB' card has 8192 MiB), so GB and GiB both mean 2**30.

    Raises:
        ConfigError: text that is not a size.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b?)\s*", text, re.IGNORECASE)
    if not m or (m.group(3) and not m.group(2) and m.group(3).lower() != "b"):
        raise ConfigError(
            f"--gpu_memory {text!r} is not a memory size",
            hint="write it as 8GB, 12GiB, 40GB or 8192MiB (GB and GiB both mean 2**30 bytes)",
        )
    unit = m.group(2).lower() or ("" if m.group(3) else "g")
    size = float(m.group(1)) * 1024 ** "_kmgt".index(unit or "_")
    if size <= 0:
        raise ConfigError(f"--gpu_memory {text!r} must be positive", hint="e.g. --gpu_memory 8GB")
    return int(size)


def gpu_precision(gpu: str | None, fp16: bool | None = None, bf16: bool | None = None) -> str:
    """Mixed precision on the GPU planned for, by train's rule (`precision.choose_precision`):
    bf16 unless `gpu` names a pre-Ampere card (T4, V100, ...) or 'fp16-only'; without a
    name, this machine's GPU decides when it has one, else bf16 is assumed."""
    from fitwhisper.precision import choose_precision, hardware

    if gpu:
        bf16_ok = not FP16_ONLY_GPUS.search(gpu)
    else:
        hw = hardware()
        bf16_ok = hw["bf16_supported"] if hw["cuda"] else True
    return choose_precision(fp16, bf16, cuda=True, bf16_supported=bf16_ok)


def detected_gpu_memory() -> int | None:
    """Total memory of the CUDA GPU this process would train on (LOCAL_RANK's under a
    launcher, else the first), or None without one."""
    import torch

    from fitwhisper.precision import training_device_index

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(training_device_index()).total_memory)


def search(
    base: MemoryRequest,
    budget_bytes: int,
    *,
    effective_batch_size: int = DEFAULT_EFFECTIVE_BATCH,
    margin: float = DEFAULT_MARGIN,
    methods: tuple[Method, ...] | None = None,
    optimizers: tuple[str, ...] | None = None,
    num_gpus: int = 1,
    num_nodes: int = 1,
    deepspeed: str | None = None,
) -> FitPlan:
    """The fastest setting of `base` that fits `budget_bytes`, keeping the effective batch.

    Args:
        base: model, precision, LoRA rank and targets, lengths, frozen encoder; its batch,
            checkpointing, optimizer and method are what the search chooses.
        methods: methods to try, in order of preference; default: `base`'s own only.
        optimizers: optimizers to try, preferred first; default: `base`'s, then the lighter
            ones of OPTIMIZERS.
        num_gpus, num_nodes: a data-parallel run; the budget is each GPU's, the effective
            batch is the whole run's. Over one GPU in all, each method tries plain DDP, then
            (without `deepspeed`, and for full and LoRA) ZeRO-2 and ZeRO-3 with the
            preferred optimizer, before the lighter optimizers (with DDP).
        deepspeed: plan this ZeRO stage only.

    Raises:
        ConfigError: bad arguments, or nothing fits (the message names the smallest plan).
    """
    _check_search_options(effective_batch_size, margin)
    world, per_rank = _per_rank(effective_batch_size, num_gpus, num_nodes, deepspeed)
    methods = methods or (method_of(base).name,)
    optimizers = optimizers or (base.optim, *(o for o in OPTIMIZERS if o != base.optim))
    usable = int(budget_bytes * (1 - margin))
    # Powers of two that divide each GPU's share of the effective batch, so accumulation
    # is a whole number.
    batches = [b for b in (2**i for i in range(13)) if per_rank % b == 0 and b <= per_rank]
    tried: dict[tuple, Candidate] = {}
    predictions: dict[tuple, MemoryPrediction] = {}
    per_gpu: dict[tuple, ShardedPrediction] = {}
    notes: list[str] = []

    def candidate(method, optim, batch, ckpt, strategy) -> Candidate:
        key = (method, optim, batch, ckpt, strategy)
        if key not in tried:
            p = predict_memory(_request(base, method, optim, batch, ckpt))
            predictions[key] = p
            if world > 1:
                per_gpu[key] = shard(p, num_gpus, num_nodes, _stage(strategy))
            total = per_gpu[key].total_bytes if world > 1 else p.total_bytes
            tried[key] = Candidate(
                method=method,
                optim=optim,
                per_device_train_batch_size=batch,
                gradient_accumulation_steps=per_rank // batch,
                gradient_checkpointing=ckpt,
                predicted_bytes=total,
                fits=total <= usable,
                relative_time=relative_time(method, batch, ckpt),
                strategy=strategy,
            )
        return tried[key]

    best = _first_fitting(
        candidate, predictions, methods, optimizers, world, deepspeed, batches, usable, notes
    )
    if best is None:
        raise _nothing_fits(base, budget_bytes, usable, margin, tried.values())
    rejected = tuple(
        replace(c, reason=_reason(c, best, usable))
        for c in sorted(tried.values(), key=lambda c: (not c.fits, c.relative_time))
        if c is not best
    )
    key = (
        best.method,
        best.optim,
        best.per_device_train_batch_size,
        best.gradient_checkpointing,
        best.strategy,
    )
    prediction = predictions[key]
    if best.strategy in ("zero2", "zero3") and not deepspeed:
        notes.append(
            f"DDP does not fit {METHODS[best.method].title} on {world} GPUs; "
            f"{STRATEGY_NAMES[best.strategy]} does"
        )
    return FitPlan(
        model=base.model,
        budget_bytes=budget_bytes,
        margin=margin,
        effective_batch_size=effective_batch_size,
        precision=base.precision,
        recommended=best,
        prediction=prediction,
        rejected=rejected,
        notes=tuple(notes),
        per_gpu=per_gpu.get(key),
    )


def _first_fitting(
    candidate,
    predictions: dict,
    methods: tuple[Method, ...],
    optimizers: tuple[str, ...],
    world: int,
    deepspeed: str | None,
    batches: list[int],
    usable: int,
    notes: list[str],
) -> Candidate | None:
    """The best fitting candidate of the first method and stage where one fits."""
    best: Candidate | None = None
    for method in methods:
        skip_lighter = False
        for i, (strategy, optim) in enumerate(_stages(method, optimizers, world, deepspeed)):
            if skip_lighter and optim != optimizers[0]:
                continue
            stage = functools.partial(candidate, strategy=strategy)
            # The smallest setting of the stage first: if batch 1 with checkpointing does
            # not fit, no setting of this method, optimizer and strategy does.
            smallest = stage(method, optim, batches[0], True)
            if smallest.fits:
                best = _best_in_stage(stage, method, optim, batches)
                break
            # A lighter optimizer saves at most the optimizer's states and step temporaries
            # (with their allocator slack); skip the others when that cannot be enough.
            p = predictions[(method, optim, batches[0], True, strategy)]
            saving = (p.optimizer_bytes + p.optimizer_step_bytes) * (1 + ALLOCATOR_SLACK)
            if i == 0 and smallest.predicted_bytes - saving > usable and len(optimizers) > 1:
                notes.append(
                    f"{METHODS[method].title}: {', '.join(optimizers[1:])} not tried: a lighter "
                    f"optimizer saves at most {_gib(int(saving))}, too little to fit"
                )
                skip_lighter = True
        if best:
            break
    return best


def _stages(method: Method, optimizers: tuple[str, ...], world: int, deepspeed: str | None):
    """(strategy, optimizer) in order of preference for one method."""
    if world == 1:
        return [("single", o) for o in optimizers]
    if deepspeed:
        allowed = optimizers[:1] if deepspeed == "zero3_offload" else optimizers
        return [(deepspeed, o) for o in allowed]
    zero = ("zero2", "zero3") if method in ("full", "lora") else ()
    return [
        ("ddp", optimizers[0]),
        *((z, optimizers[0]) for z in zero),
        *(("ddp", o) for o in optimizers[1:]),
    ]


def _stage(strategy: str) -> str | None:
    return strategy if strategy in DEEPSPEED_STAGES else None


def _per_rank(
    effective_batch_size: int, num_gpus: int, num_nodes: int, deepspeed: str | None
) -> tuple[int, int]:
    """(processes in all, clips per process per optimizer step); refuses an uneven split."""
    check_world(num_gpus, num_nodes, deepspeed)
    world = num_gpus * num_nodes
    if effective_batch_size % world:
        raise ConfigError(
            f"--effective_batch_size {effective_batch_size} is not a whole number of clips "
            f"per GPU on {world} GPUs",
            hint=f"use a multiple of {world}, e.g. --effective_batch_size {world * 2}",
        )
    return world, effective_batch_size // world


def _check_search_options(effective_batch_size: int, margin: float) -> None:
    if effective_batch_size < 1:
        raise ConfigError(
            f"--effective_batch_size must be at least 1 (got {effective_batch_size})",
            hint="e.g. --effective_batch_size 16",
        )
    if not 0 <= margin < 1:
        raise ConfigError(f"--margin must be in [0, 1) (got {margin})", hint="e.g. --margin 0.1")


def _nothing_fits(
    base: MemoryRequest, budget_bytes: int, usable: int, margin: float, tried
) -> ConfigError:
    """The error that names the smallest setting tried and what it needs."""
    smallest = min(tried, key=lambda c: c.predicted_bytes)
    return ConfigError(
        f"nothing fits {_gib(budget_bytes)} ({_gib(usable)} after the {margin:.0%} "
        f"margin) for {base.model}: the smallest plan tried, {smallest.describe()}, "
        f"needs {_gib(smallest.predicted_bytes)}",
        hint="use a GPU with more memory, allow lighter methods (--allow_methods "
        "full,lora,8bit,4bit), lower --max_label_tokens, or plan a smaller model",
    )


def relative_time(method: Method, batch: int, checkpointing: bool) -> float:
    """The speed proxy: relative time per clip, lower is faster (module docstring)."""
    ckpt = CHECKPOINT_COST if checkpointing else 1.0
    return round(METHODS[method].relative_time * ckpt * (1 + STEP_OVERHEAD / batch), 4)


def _best_in_stage(candidate, method: Method, optim: str, batches: list[int]) -> Candidate | None:
    """Fastest fitting setting of one method and optimizer (batch 1 with checkpointing fits).

    The largest batch with checkpointing first; then, without checkpointing, only the
    batches that would be faster than that and no larger (checkpointing only lowers
    memory, so a batch that needs it cannot fit without it)."""
    ckpt = _largest_fitting(lambda b: candidate(method, optim, b, True), batches)
    assert ckpt is not None  # the caller saw batch 1 with checkpointing fit
    faster = [
        b
        for b in batches
        if b <= ckpt.per_device_train_batch_size
        and relative_time(method, b, False) < ckpt.relative_time
    ]
    no_ckpt = _largest_fitting(lambda b: candidate(method, optim, b, False), faster)
    return no_ckpt or ckpt


def _largest_fitting(predict, batches: list[int]) -> Candidate | None:
    """Memory grows with the batch, so fits(b) holds up to some b: check the smallest (if it
    does not fit, none does), then binary-search the rest."""
    if not batches or not predict(batches[0]).fits:
        return None
    lo, hi, found = 1, len(batches) - 1, predict(batches[0])
    while lo <= hi:
        mid = (lo + hi) // 2
        c = predict(batches[mid])
        if c.fits:
            found, lo = c, mid + 1
        else:
            hi = mid - 1
    return found


def _request(base: MemoryRequest, method: Method, optim: str, batch: int, ckpt: bool):
    return replace(
        base,
        per_device_train_batch_size=batch,
        gradient_checkpointing=ckpt,
        optim=optim,
        training_method=method,
    )


def _reason(c: Candidate, best: Candidate, usable: int) -> str:
    if not c.fits:
        return f"does not fit: predicted {_gib(c.predicted_bytes)} > {_gib(usable)} usable"
    if (c.method, c.optim) != (best.method, best.optim):
        return f"fits ({_gib(c.predicted_bytes)}), but {best.method}/{best.optim} is preferred"
    return (
        f"fits ({_gib(c.predicted_bytes)}), but slower: relative time "
        f"{c.relative_time:.2f} vs {best.relative_time:.2f}"
    )


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"
