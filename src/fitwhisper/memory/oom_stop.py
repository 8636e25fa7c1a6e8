"""When the OOM back-off (backoff.py) stops instead of splitting, and the error it stops with.

The back-off runs a batch that ran out of memory as smaller micro-batches on the process
that ran out, alone. That is safe only where one process may make more passes in a step
than the others. `refusal` names the cases where it may not, and the run then stops with
advice instead:

- DeepSpeed, training: the engine owns gradient accumulation (each backward is one of its
  micro-steps, and ZeRO-2/3 cannot hold back the gradient reduction with no_sync).
- FSDP or DeepSpeed ZeRO-3, training and evaluation: every forward pass gathers the weights
  from all processes (FSDP's all-gathers; in generation `synced_gpus` and FSDP1's
  summon_full_params), so a process that split its batch would wait on collectives the
  others never join: a hang.
- DDP, an OOM in the backward pass: the forward pass armed DDP's reducer and the backward
  had marked gradients ready (and may have launched bucket all-reduces); the micro-batches'
  backward fires its hooks again: "Expected to mark a variable ready only once", "Expected
  to have finished reduction in the prior iteration", or all-reduces out of step with the
  other processes (a hang). An OOM in the forward pass leaves the reducer as it was and is
  split as usual (backoff.py: its micro-batches but the last under no_sync).

`no_fit_error` is the error for these and for a batch of one clip that does not fit.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Literal

import torch

from fitwhisper.errors import OutOfMemoryError
from fitwhisper.memory.predict import MemoryRequest
from fitwhisper.method import method_of
from fitwhisper.models import checkpointing

log = logging.getLogger(__name__)

GIB = 2**30
Phase = Literal["training", "evaluation"]


@dataclass(frozen=True)
class Refusal:
    """Why a batch that ran out of memory is not split, and what to do instead."""

    why: str  # follows "out of memory in <phase> with a batch of N"
    hint: str


def refusal(
    trainer, phase: Phase, *, model: torch.nn.Module | None = None, in_backward: bool = False
) -> Refusal | None:
    """Why `trainer` must not split a batch that ran out of memory in `phase`, or None.

    Args:
        trainer: the BackoffTrainer (its DeepSpeed/FSDP flags, arguments, memory request).
        model: the model training_step was given (DDP-wrapped under DDP).
        in_backward: the OOM came after the forward pass had finished.
    """
    deepspeed = getattr(trainer, "is_deepspeed_enabled", False)
    if deepspeed and phase == "training":
        return Refusal(
            "under DeepSpeed, which leaves no room to split the batch (it owns gradient "
            "accumulation)",
            _either(_smaller_batch(phase), "shard more: --deepspeed zero3, then zero3_offload"),
        )
    fsdp = getattr(trainer, "is_fsdp_enabled", False)
    if fsdp or (deepspeed and _zero3()):
        return Refusal(
            f"under {'FSDP' if fsdp else 'DeepSpeed ZeRO-3'}, where every forward pass "
            "gathers the weights from all processes: one process cannot split its batch into "
            "more passes than the others make (they would wait for it for ever)",
            _either(_smaller_batch(phase), _checkpointing(trainer, phase)),
        )
    if in_backward and isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return Refusal(
            "in the backward pass under DDP, after the gradient all-reduce had begun: the "
            "batch cannot be split and run again there (DDP would see its gradients made "
            "twice and stop, or wait on the other processes for ever)",
            _either(
                _smaller_batch(phase),
                _checkpointing(trainer, phase),
                f"run `{_plan(trainer, trainer.args.world_size)}` to find settings that fit",
            ),
        )
    return None


def no_fit_error(
    trainer, phase: Phase, batch: int, refused: Refusal | None = None
) -> OutOfMemoryError:
    """The error that ends the run: `refused` says why the batch was not split; without
    it, not even a batch of `batch` (one clip) fits."""
    where = ""
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        where = f" on this GPU ({total / GIB:.1f} GiB, {free / GIB:.1f} GiB free now)"
    head = f"out of memory in {phase} with a batch of {batch}{where}"
    if refused:
        return OutOfMemoryError(f"{head} {refused.why}", hint=refused.hint)
    message = f"{head}: even one clip does not fit with these settings"
    hint = "run `fitwhisper plan` to find settings that fit"
    request = getattr(trainer, "memory_request", None)
    if request:
        need = _predicted_total(request)
        if need is not None:
            message += f"; the predicted peak of a training step at batch 1 is {need / GIB:.1f} GiB"
        hint = f"`{plan_command(request)}` shows where that memory goes"
    hint += (
        "; LoRA (--use_lora), --use_8bit or --use_4bit, --gradient_checkpointing, "
        "fp16/bf16 or a smaller model need less"
        + ("" if phase == "training" else "; a lower --generation_max_length helps too")
    )
    return OutOfMemoryError(message, hint=hint)


def plan_command(request: MemoryRequest, processes: int = 1) -> str:
    """The `fitwhisper plan` command for `request` at batch 1, on `processes` GPUs."""
    flags = [f"--model {request.model}", "--per_device_train_batch_size 1"]
    if request.precision != "fp32":
        flags.append(f"--{request.precision}")
    for name in ("gradient_checkpointing", "freeze_encoder"):
        if getattr(request, name):
            flags.append(f"--{name}")
    if flag := method_of(request).flag:
        flags.append(flag)
    flags.append(f"--max_audio_len {request.max_audio_len:g}")
    if processes > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or processes)
        nodes = max(processes // max(per_node, 1), 1)
        flags.append(f"--num_gpus {per_node}" + (f" --num_nodes {nodes}" if nodes > 1 else ""))
    return "fitwhisper plan " + " ".join(flags)


def _smaller_batch(phase: Phase) -> str:
    if phase == "evaluation":
        return "lower --per_device_eval_batch_size or --generation_max_length"
    return (
        "lower --per_device_train_batch_size (raise --gradient_accumulation_steps to keep "
        "the effective batch)"
    )


def _checkpointing(trainer, phase: Phase) -> str:
    """The advice to turn on gradient checkpointing, where it would help and is off."""
    on = checkpointing.is_on(getattr(trainer, "args", None))
    return "" if on or phase != "training" else "turn on --gradient_checkpointing"


def _either(*advice: str) -> str:
    """ "a, b, or c" of the pieces of advice given (empty ones left out)."""
    given = [a for a in advice if a]
    return given[0] if len(given) == 1 else ", ".join(given[:-1]) + ", or " + given[-1]


def _plan(trainer, processes: int) -> str:
    request = getattr(trainer, "memory_request", None)
    return plan_command(request, processes) if request else "fitwhisper plan"


def _zero3() -> bool:
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def _predicted_total(request: MemoryRequest) -> int | None:
    """predict_memory's total at batch 1 for this run, or None when it cannot say."""
    from fitwhisper.memory.predict import predict_memory

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        return predict_memory(request, per_device_train_batch_size=1, device=device).total_bytes
    except Exception as e:  # the message must not fail on an option the predictor lacks
        log.debug("no prediction for the out-of-memory message: %s", e)
        return None
