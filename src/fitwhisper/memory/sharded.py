"""Per-GPU memory of data-parallel training: DDP, DeepSpeed ZeRO-2, ZeRO-3, ZeRO-3 + offload.

    fitwhisper plan --model openai/whisper-large-v3 --num_gpus 8 --deepspeed zero3

Nothing is traced again: the single-process prediction (`predict_memory`) is taken apart and
each part is placed where the strategy keeps it, by the documented rules:

- DDP (torch.nn.parallel.DistributedDataParallel, as HF Trainer/accelerate wrap it): every
  rank holds the whole model, its gradients and optimizer states. With
  gradient_as_bucket_view=False (the default of torch and of accelerate's DDP kwargs) the
  all-reduce buckets (bucket_cap_mb 25 each) are a second copy of all gradients: torch's
  docstring says turning it on saves "the total gradients size".
- DeepSpeed with fp16/bf16 casts the whole model to 16 bits; the fp32 master weights belong
  to the optimizer state (12 bytes per trainable parameter with Adam), and at the step each
  rank turns its 16-bit gradient partition into fp32 (4 bytes per parameter / world).
- ZeRO-2: optimizer states and gradients partitioned over the world; every rank keeps all
  weights (frozen ones too: only the optimizer's parameters are partitioned).
- ZeRO-3: weights partitioned too (all of them, frozen included); a layer's parameters are
  gathered for its forward and backward: the gathered working set is DeepSpeed's estimator
  term, 4 bytes x the largest layer's parameters (16-bit weights + gradients).
- ZeRO-3 + offload (the shipped zero3_offload.json: offload_optimizer and offload_param to
  the CPU): weights (16-bit, frozen ones too), optimizer states, fp32 masters and fp32
  gradients live in the node's CPU memory and the optimizer step runs there; the GPU holds
  the gathered layer and the reduce bucket.
- ZeRO reduce buckets: the shipped config's reduce_bucket_size (HF fills "auto" with
  d_model**2), two buffers under ZeRO-2 with overlap_comm (stage_1_and_2.py setup_buckets),
  one under ZeRO-3 (stage3.py's IPG buffer), in the optimizer's dtype.
- CPU RAM per node (every DeepSpeed plan): the model loads whole in each rank before
  DeepSpeed takes it (no zero.Init: the model exists before the DeepSpeed config), so a node
  needs the larger of its ranks' load copies and the offloaded states, times DeepSpeed's
  additional_buffer_factor (1.5), as its estimators with zero_init=False count it.

Reference: DeepSpeed's `estimate_zero2_model_states_mem_needs` (stage_1_and_2.py) and
`estimate_zero3_model_states_mem_needs` (stage3.py); `tests/memory/test_sharded.py` checks
the model states against them. ZeRO-3 here keeps the 16-bit gradient partition (stage3.py's
grad_partitions_flat_buffer) beside the fp32 gradient at the step, 2 bytes/parameter/world
more than the estimator counts.

Activations and the step's temporaries are the traced single-GPU ones (torch autocast;
DeepSpeed's 16-bit model needs no cast copies of the weights, so this errs high). The peak
per GPU is bounded from the single-process peak: in the forward and backward, at most the
single-process activations plus gradients are live beyond the persistent bytes, and only
the gradients shrink with sharding (the bound is the largest that split allows).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from fitwhisper.errors import ConfigError
from fitwhisper.memory.predict import (
    ALLOCATOR_SLACK,
    GIB,
    MemoryPrediction,
    MemoryRequest,
    not_live_at_once,
)
from fitwhisper.method import method_of

Strategy = Literal["ddp", "zero2", "zero3", "zero3_offload"]
DEEPSPEED_STAGES = ("zero2", "zero3", "zero3_offload")
STRATEGY_NAMES = {
    "single": "one process",
    "ddp": "DDP",
    "zero2": "DeepSpeed ZeRO-2",
    "zero3": "DeepSpeed ZeRO-3",
    "zero3_offload": "DeepSpeed ZeRO-3, weights and optimizer offloaded to CPU",
}
# DeepSpeed's estimators' default additional_buffer_factor on their CPU figures.
CPU_BUFFER_FACTOR = 1.5


@dataclass(frozen=True)
class ShardedPrediction:
    """Predicted memory of ONE GPU of a data-parallel run, in bytes."""

    single: MemoryPrediction  # the one-process prediction it is made from
    strategy: str  # "single" (one process), "ddp", "zero2", "zero3", "zero3_offload"
    num_gpus: int  # per node
    num_nodes: int
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    optimizer_step_bytes: int
    communication_bytes: int  # DDP buckets; ZeRO reduce buckets and gathered layer
    peak_tensor_bytes: int
    peak_phase: str
    cuda_context_bytes: int
    allocator_slack_bytes: int
    total_bytes: int
    cpu_bytes_per_node: int  # CPU RAM of each node's ranks (0 outside DeepSpeed)
    fp32_gradient_bytes: int = 0  # of optimizer_step_bytes: the fp32 gradient partition
    gathered_bytes: int = 0  # of communication_bytes: ZeRO-3's gathered layer
    sharded: tuple[str, ...] = field(default=())  # which parts are split over the world
    offloaded: tuple[str, ...] = field(default=())  # which parts live in CPU memory
    communication: str = ""  # what the communication row is
    assumptions: str = ""

    @property
    def world_size(self) -> int:
        return self.num_gpus * self.num_nodes

    @property
    def model_states_bytes(self) -> int:
        """Weights, gradients, optimizer states and the fp32 gradient partition: what
        DeepSpeed's estimators count (less the gathered layer)."""
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.fp32_gradient_bytes
        )

    @property
    def overlap_bytes(self) -> int:
        parts = (
            self.weights_bytes,
            self.gradients_bytes,
            self.optimizer_bytes,
            self.activations_bytes,
            self.optimizer_step_bytes,
            self.communication_bytes,
        )
        return not_live_at_once(self.peak_tensor_bytes, parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["single"] = self.single.to_dict()
        d["world_size"] = self.world_size
        d["overlap_bytes"] = self.overlap_bytes
        d["launch"] = launch_command(self.strategy, self.num_gpus, self.num_nodes)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format_table(self) -> str:
        if self.strategy == "single":
            return self.single.format_table()
        s, r = self.single, self.single.request
        n = self.world_size
        ds = self.strategy in DEEPSPEED_STAGES
        half = {"fp16": "fp16", "bf16": "bf16"}.get(r.precision) if ds else None
        stored = half or ("fp32" if r.precision == "fp32" or ds else "fp32 (autocast)")

        def where(part: str) -> str:
            if part in self.offloaded:
                return "offloaded to CPU"
            return f"sharded 1/{n}" if part in self.sharded else "full copy on every GPU"

        optim_what = f"{r.optim} states" + (" + fp32 masters" if half else "")
        step_what = "traced step temporaries" + (" + fp32 gradient partition" if half else "")
        rows = [
            ("weights", self.weights_bytes, f"{stored}, {where('weights')}"),
            ("gradients", self.gradients_bytes, f"{stored}, {where('gradients')}"),
            ("optimizer states", self.optimizer_bytes, f"{optim_what}, {where('optimizer')}"),
            ("activations", self.activations_bytes, "traced peak, as for one GPU"),
            (
                "optimizer step",
                self.optimizer_step_bytes,
                "runs on the CPU" if "optimizer" in self.offloaded else step_what,
            ),
            ("communication", self.communication_bytes, self.communication),
            ("not live at once", self.overlap_bytes, f"peak is in the {self.peak_phase}"),
            ("peak of tensors", self.peak_tensor_bytes, ""),
            ("CUDA context", self.cuda_context_bytes, "assumed"),
            (
                "allocator slack",
                self.allocator_slack_bytes,
                f"{ALLOCATOR_SLACK:.0%} of peak, assumed",
            ),
        ]
        nodes = f"{self.num_nodes} nodes x " if self.num_nodes > 1 else ""
        head = s.format_table().split("\n  ")[:2]  # the run's description, two lines
        lines = [
            "\n  ".join(head),
            f"  per GPU of {n} ({nodes}{self.num_gpus} GPU{'s' if self.num_gpus > 1 else ''}"
            f"{' per node' if self.num_nodes > 1 else ''}), {STRATEGY_NAMES[self.strategy]}:",
            f"  {'':18} {'GiB':>8}",
        ]
        for name, b, why in rows:
            if name == "peak of tensors":
                lines.append(f"  {'-' * 27}")
            lines.append(f"  {name:18} {b / GIB:8.2f}  {why}".rstrip())
        lines.append(f"  {'-' * 27}")
        lines.append(f"  {'total':18} {self.total_bytes / GIB:8.2f}  predicted peak per GPU")
        if self.cpu_bytes_per_node:
            ranks = f"{self.num_gpus} rank{'s' if self.num_gpus > 1 else ''}"
            what = (
                f"the larger of its {ranks}' model load copies and the offloaded states"
                if self.offloaded
                else f"its {ranks}' model load copies"
            )
            lines.append(
                f"  {'CPU RAM per node':18} {self.cpu_bytes_per_node / GIB:8.2f}  {what}, "
                f"x{CPU_BUFFER_FACTOR} DeepSpeed's buffer factor"
            )
        lines.append(f"  one GPU without sharding would need {s.total_bytes / GIB:.2f} GiB")
        lines.append(f"  assumptions: {self.assumptions}")
        lines.append(f"  launch: {launch_command(self.strategy, self.num_gpus, self.num_nodes)}")
        lines += [f"  note: {x}" for x in s.notes]
        return "\n".join(lines)


def launch_command(strategy: str, num_gpus: int, num_nodes: int) -> str:
    """The command that starts the run."""
    if strategy == "single":
        return "fitwhisper train ..."
    nodes = f"--nnodes {num_nodes} --node_rank R --master_addr HOST " if num_nodes > 1 else ""
    ds = f" --deepspeed {strategy}" if strategy in DEEPSPEED_STAGES else ""
    return f"torchrun {nodes}--nproc_per_node {num_gpus} -m fitwhisper train ...{ds}"


def check_world(num_gpus: int, num_nodes: int, deepspeed: str | None) -> None:
    """Refuse GPU counts and DeepSpeed stages that make no sense.

    Raises:
        ConfigError: num_gpus or num_nodes below 1, or a DeepSpeed stage on one GPU.
    """
    if num_gpus < 1 or num_nodes < 1:
        raise ConfigError(
            f"--num_gpus {num_gpus} --num_nodes {num_nodes}: both count processes' GPUs and "
            "must be at least 1 (--num_gpus is GPUs per node, --num_nodes the machines)",
            hint="e.g. --num_gpus 8, or --num_gpus 8 --num_nodes 2",
        )
    if deepspeed is not None and deepspeed not in DEEPSPEED_STAGES:
        raise ConfigError(
            f"--deepspeed {deepspeed!r} is not a stage planned for",
            hint=f"choose from {', '.join(DEEPSPEED_STAGES)}",
        )
    if deepspeed and num_gpus * num_nodes < 2:
        raise ConfigError(
            f"--deepspeed {deepspeed} shards gradients, optimizer states and weights over the "
            "processes of a run, and with 1 GPU in all there is nothing to shard over, so "
            "the plan would be the one-GPU plan",
            hint="give the GPUs the run will use: --num_gpus 2 or more (per node), or "
            "--num_nodes; for one GPU, plan without --deepspeed",
        )


def shard(
    prediction: MemoryPrediction,
    num_gpus: int = 1,
    num_nodes: int = 1,
    deepspeed: str | None = None,
) -> ShardedPrediction:
    """Per-GPU memory of `prediction`'s run on num_gpus x num_nodes processes.

    Without `deepspeed`: DDP (one process: the prediction itself). See the module docstring
    for the rules.

    Raises:
        ConfigError: bad counts, a stage on one GPU, or a method DeepSpeed is not planned
            for (8-bit/4-bit bases; offload with an optimizer other than AdamW).
    """
    check_world(num_gpus, num_nodes, deepspeed)
    p = prediction
    world = num_gpus * num_nodes
    strategy = deepspeed or ("ddp" if world > 1 else "single")
    if strategy == "single":
        return _one_process(p)
    _check_planned(strategy, p.request)
    if strategy == "ddp":
        lay = _ddp_layout(p)
    else:
        lay = _zero_layout(p, strategy, world, num_gpus)
    peak, phase = _peak(p, lay)
    slack = int(ALLOCATOR_SLACK * peak) if p.request.device == "cuda" else 0
    return ShardedPrediction(
        single=p,
        strategy=strategy,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        weights_bytes=lay.weights,
        gradients_bytes=lay.gradients,
        optimizer_bytes=lay.optimizer,
        activations_bytes=p.activations_bytes,
        optimizer_step_bytes=lay.optimizer_step,
        communication_bytes=lay.communication,
        peak_tensor_bytes=peak,
        peak_phase=phase,
        cuda_context_bytes=p.cuda_context_bytes,
        allocator_slack_bytes=slack,
        total_bytes=peak + p.cuda_context_bytes + slack,
        cpu_bytes_per_node=lay.cpu_per_node,
        sharded=lay.sharded,
        offloaded=lay.offloaded,
        communication=lay.communication_what,
        assumptions=lay.assumptions,
        fp32_gradient_bytes=lay.fp32_gradients,
        gathered_bytes=lay.gathered,
    )


@dataclass(frozen=True)
class _Layout:
    """What each GPU holds of the run's states under one strategy, and the words for it."""

    weights: int
    gradients: int
    optimizer: int
    optimizer_step: int
    communication: int
    communication_what: str
    assumptions: str
    fp32_gradients: int = 0
    gathered: int = 0
    cpu_per_node: int = 0
    sharded: tuple[str, ...] = ()
    offloaded: tuple[str, ...] = ()


def _ddp_layout(p: MemoryPrediction) -> _Layout:
    """DDP: every state whole on every GPU, and the gradient buckets a second copy of the
    gradients (their stored dtype: fp32, also under torch mixed precision)."""
    return _Layout(
        weights=p.weights_bytes,
        gradients=p.gradients_bytes,
        optimizer=p.optimizer_bytes,
        optimizer_step=p.optimizer_step_bytes,
        communication=p.gradients_bytes,
        communication_what="gradient buckets (25 MiB each): a copy of all gradients",
        assumptions=(
            "DDP with gradient_as_bucket_view off (torch's default); "
            "CUDA context and allocator slack as for one GPU; NCCL buffers not counted"
        ),
    )


def _zero_layout(p: MemoryPrediction, strategy: str, world: int, num_gpus: int) -> _Layout:
    """A DeepSpeed ZeRO stage: gradients and optimizer states (and from ZeRO-3 the weights)
    split over the `world` processes, reduce buckets, and what the CPU holds per node."""
    r = p.request
    W, G, Opt, S = p.weights_bytes, p.gradients_bytes, p.optimizer_bytes, p.optimizer_step_bytes
    half = r.precision in ("fp16", "bf16")
    if half:  # DeepSpeed's layout: 16-bit model and gradients, fp32 masters in the optimizer
        w, g, o, fp32_grads = W // 2, G // 2, Opt + G, G
    else:
        w, g, o, fp32_grads = W, G, Opt, 0
    elem = 2 if half else 4
    comm, comm_what = _buckets(strategy, _dims(r)[0], elem)
    fp32_r = _div(fp32_grads, world)
    w_r, g_r, o_r, s_r = w, _div(g, world), _div(o, world), _div(S, world) + fp32_r
    sharded = ("gradients", "optimizer")
    assumptions = "ZeRO-2 keeps every weight on every GPU (frozen ones too)"
    gathered = 0
    if strategy != "zero2":
        w_r = _div(w, world)
        sharded += ("weights",)
        _, name, n = _dims(r)
        gathered = 2 * elem * n  # its weights and gradients gathered: estimator's term
        comm += gathered
        comm_what += f" + gathered largest layer ({name}, {n / 1e6:.1f}M params)"
        assumptions = "ZeRO-3 gathers one layer at a time, no prefetch beyond it"
    load = W * num_gpus  # each rank's whole model, loaded before DeepSpeed takes it
    offloaded_states = 0
    offloaded: tuple[str, ...] = ()
    if strategy == "zero3_offload":
        # Weights (frozen too), fp32 masters (a CPU copy in fp32 training too), Adam states
        # and fp32 gradients on the CPU; on the GPU only the gathered layer and the
        # gradients passing through the bucket.
        offloaded_states = _div(w + Opt + 2 * G, world) * num_gpus
        w_r = g_r = o_r = s_r = fp32_r = 0
        offloaded = ("weights", "gradients", "optimizer")
        assumptions += "; weights and optimizer offloaded to CPU"
    assumptions += (
        "; activations as traced with torch autocast; CUDA context and allocator slack "
        "as for one GPU; NCCL buffers not counted"
    )
    return _Layout(
        weights=w_r,
        gradients=g_r,
        optimizer=o_r,
        optimizer_step=s_r,
        communication=comm,
        communication_what=comm_what,
        assumptions=assumptions,
        fp32_gradients=fp32_r,
        gathered=gathered,
        cpu_per_node=int(CPU_BUFFER_FACTOR * max(load, offloaded_states)),
        sharded=sharded,
        offloaded=offloaded,
    )


def _peak(p: MemoryPrediction, lay: _Layout) -> tuple[int, str]:
    """The per-GPU peak and its phase. The forward/backward holds at most X beyond weights
    and optimizer states, of which at most A activations and G gradients; only the
    gradients shrink with sharding."""
    W, G, A = p.weights_bytes, p.gradients_bytes, p.activations_bytes
    X = p.peak_tensor_bytes - W - p.optimizer_bytes
    a = min(A, X)
    g_live = min(G, X - a)
    w, o, g, comm = lay.weights, lay.optimizer, lay.gradients, lay.communication
    fwd_bwd = w + o + a + (g_live * g // G if G else 0) + comm
    opt = w + o + g + lay.optimizer_step + comm
    if opt > fwd_bwd:
        return opt, "optimizer step"
    # The single process's own phase name when the forward/backward peaks.
    return fwd_bwd, p.peak_phase if p.peak_phase != "optimizer step" else "forward/backward"


def _one_process(p: MemoryPrediction) -> ShardedPrediction:
    """One process: the prediction itself."""
    return ShardedPrediction(
        single=p,
        strategy="single",
        num_gpus=1,
        num_nodes=1,
        weights_bytes=p.weights_bytes,
        gradients_bytes=p.gradients_bytes,
        optimizer_bytes=p.optimizer_bytes,
        activations_bytes=p.activations_bytes,
        optimizer_step_bytes=p.optimizer_step_bytes,
        communication_bytes=0,
        peak_tensor_bytes=p.peak_tensor_bytes,
        peak_phase=p.peak_phase,
        cuda_context_bytes=p.cuda_context_bytes,
        allocator_slack_bytes=p.allocator_slack_bytes,
        total_bytes=p.total_bytes,
        cpu_bytes_per_node=0,
        assumptions="one process",
    )


def config_path(value: str) -> Path:
    """The JSON file `--deepspeed value` names: a shipped config's, or the user's file."""
    if value in DEEPSPEED_STAGES:
        return Path(str(resources.files("fitwhisper") / "assets" / "deepspeed" / f"{value}.json"))
    return Path(value).expanduser()


def load_config(value: str) -> dict:
    """The DeepSpeed config `--deepspeed value` names, parsed (train/sharding.py's
    `problems` checks a user's file first)."""
    return json.loads(config_path(value).read_text(encoding="utf-8"))


def reduce_buckets(strategy: str, d_model: int) -> tuple[int, int]:
    """How many ZeRO reduce buffers each GPU allocates, and their size in elements, as the
    shipped config `strategy` sets them."""
    zero = load_config(strategy)["zero_optimization"]
    size = zero["reduce_bucket_size"]
    # transformers fills "auto" with hidden_size**2 (integrations/deepspeed.py).
    elements = d_model * d_model if size == "auto" else int(size)
    if not zero.get("contiguous_gradients"):
        return 0, elements  # gradients are reduced where they lie, no buffer
    # ZeRO-2 double-buffers with overlap_comm (stage_1_and_2.py setup_buckets); ZeRO-3
    # allocates one IPG buffer (stage3.py).
    count = 2 if zero["stage"] == 2 and zero.get("overlap_comm") else 1
    return count, elements


def _buckets(strategy: str, d_model: int, elem: int) -> tuple[int, str]:
    """The reduce buckets' bytes on each GPU, and the table's words for them."""
    count, elements = reduce_buckets(strategy, d_model)
    what = f"{count} reduce bucket{'s' if count > 1 else ''} of {elements / 1e6:.3g}M elements"
    return count * elements * elem, what


def _check_planned(strategy: str, r: MemoryRequest) -> None:
    """Refuse what DeepSpeed is not planned for: quantised bases (under ZeRO-3 `train`
    refuses them too), offload without AdamW."""
    if strategy in ("zero3", "zero3_offload"):
        refused = method_of(r).weight_sharding_refusal("zero3", f"--deepspeed {strategy}")
        if refused:
            raise ConfigError(refused[0], hint=refused[1])
    if strategy == "zero2" and method_of(r).quantised:
        raise ConfigError(
            "--deepspeed zero2 with an 8-bit/4-bit (bitsandbytes) base is not planned for "
            "(it trains, but the planner does not model its memory)",
            hint="plan the quantised base with plain DDP (no --deepspeed), or LoRA "
            "(--use_lora) or full fine-tuning with --deepspeed zero2",
        )
    if strategy == "zero3_offload" and r.optim not in ("adamw_torch", "adamw_torch_fused"):
        raise ConfigError(
            f"--deepspeed zero3_offload steps on the CPU with DeepSpeed's CPU Adam; --optim "
            f"{r.optim} is not planned for there",
            hint="use --optim adamw_torch, or --deepspeed zero3",
        )


def _div(n: int, world: int) -> int:
    return -(-n // world)  # a partition is padded up: DeepSpeed aligns them


def _dims(r: MemoryRequest) -> tuple[int, str, int]:
    from fitwhisper.memory.architectures import whisper_config

    config = whisper_config(r.model)
    # Only the model and its method matter: one meta model per method, not per batch.
    key = replace(
        r,
        per_device_train_batch_size=1,
        gradient_checkpointing=False,
        max_audio_len=0.0,
        max_label_tokens=1,
        optim="adamw_torch",
    )
    return _largest_layer(key, config.to_json_string(use_diff=False))


@lru_cache(maxsize=64)
def _largest_layer(r: MemoryRequest, config_json: str) -> tuple[int, str, int]:
    """d_model, and the module with the most parameters of its own (DeepSpeed's
    `estimate_zero3_model_states_mem_needs_all_live` measure), from the meta model."""
    from transformers import WhisperConfig

    from fitwhisper.memory.predict import _build_meta

    config = WhisperConfig(**json.loads(config_json))
    model = _build_meta(config, r)
    best, best_name = 0, ""
    for name, m in model.named_modules():
        n = sum(p.numel() for p in m.parameters(recurse=False))
        if n > best:
            best, best_name = n, name.rsplit(".", 1)[-1]
    return config.d_model, best_name, best
