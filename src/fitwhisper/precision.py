"""Which arithmetic precision a run trains in: chosen from the GPU unless the user says.

Mixed precision keeps fp32 master weights and runs matmuls in half precision (Trainer's
autocast). bf16 has fp32's range, so it needs no loss scaling and does not overflow the way
fp16 can on Whisper's large activations; it is preferred wherever the GPU has it (Ampere+).
CPUs train in fp32 unless --bf16 asks (torch autocasts to bfloat16 on CPU; the gain is in
memory more than speed). fp16 mixed precision is CUDA-only: its gradient scaler is.
"""

from __future__ import annotations

from typing import Literal

Precision = Literal["fp32", "fp16", "bf16"]


def choose_precision(
    fp16: bool | None, bf16: bool | None, *, cuda: bool, bf16_supported: bool
) -> Precision:
    """Resolve the --fp16/--bf16 flags (None: not given) against the hardware.

    Explicit choices win (conflicts are reported by `precision_problems`); with neither
    given: bf16 on a GPU that supports it, fp16 on other CUDA GPUs, fp32 without CUDA.
    """
    if bf16:
        return "bf16"
    if fp16:
        return "fp16"
    if fp16 is False and bf16 is False:
        return "fp32"
    if not cuda:
        return "fp32"
    if bf16_supported and bf16 is not False:
        return "bf16"
    return "fp16" if fp16 is not False else "fp32"


def precision_problems(
    fp16: bool | None, bf16: bool | None, *, cuda: bool, bf16_supported: bool
) -> list[str]:
    """What is wrong with explicit precision flags on this machine, one line each."""
    problems = []
    if fp16 and bf16:
        problems.append("--fp16 and --bf16 are both set; pick one")
    if fp16 and not cuda:
        problems.append(
            "--fp16 needs a CUDA GPU and none is visible (fp16 mixed precision is CUDA-only); "
            "use --bf16 or leave both unset to train in fp32 on CPU"
        )
    elif bf16 and cuda and not bf16_supported:
        problems.append("--bf16 needs a GPU with bf16 support (Ampere or newer); use --fp16")
    return problems


def hardware() -> dict[str, bool]:
    """The facts `choose_precision` needs about the GPU this process trains on."""
    import torch

    cuda = torch.cuda.is_available()
    return {"cuda": cuda, "bf16_supported": cuda and native_bf16(training_device_index())}


def native_bf16(index: int) -> bool:
    """bf16 in hardware (Ampere, compute capability 8.0, or newer) on CUDA device `index`.

    Not `torch.cuda.is_bf16_supported()`: it also counts emulation on older GPUs (slower than
    fp16 there), and it asks about the current device, which under torchrun is not yet the
    process's own when the precision is chosen. `plan` and `doctor` judge by the same rule.
    """
    import torch

    return torch.cuda.get_device_capability(index) >= (8, 0)


def training_device_index() -> int:
    """The CUDA device this process trains on: LOCAL_RANK under torchrun/accelerate, else 0."""
    import os

    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def run_precision(fp16: bool | None, bf16: bool | None) -> Precision:
    """The precision a run on this machine trains in: the flags, else the GPU decides.
    `train` resolves it once and passes it down (method, Trainer arguments, memory plan)."""
    return choose_precision(fp16, bf16, **hardware())


def problems_here(fp16: bool | None, bf16: bool | None) -> list[str]:
    """`precision_problems` of the flags on this machine."""
    return precision_problems(fp16, bf16, **hardware())
