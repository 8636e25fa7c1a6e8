"""Predict the peak device memory of one Whisper training step, broken down.

    fitwhisper plan --model openai/whisper-large-v3 --per_device_train_batch_size 2 \
        --fp16 --gradient_checkpointing

How each figure is made:
- weights, gradients, optimizer states: exact byte counts from the model built on the meta
  device (no weights, no download), with the method applied: LoRA through peft (on meta),
  frozen encoder, and 8-bit/4-bit bitsandbytes layouts counted from the layer shapes
  (bitsandbytes is not needed).
- activations and the step's own peak: one real training step (forward with labels, loss,
  backward, gradient clipping, optimizer step) traced on fake tensors at the exact batch,
  lengths, dtypes, attention implementation and checkpointing setting (`trace.py`).
- fixed overheads: a CUDA context and an allocator slack fraction, both stated below.

What the prediction leaves out: kernel workspaces that never become tensors (cuBLAS
workspace, about 32 MiB with the default CUBLAS_WORKSPACE_CONFIG; cuDNN and flash-attention
scratch), fragmentation beyond ALLOCATOR_SLACK, the fp16 GradScaler's few scalars, dataloader
pinned host memory, NCCL buffers for multi-GPU runs, evaluation and generation (a separate
phase), and, for 8-bit/4-bit, bitsandbytes' internal buffers: its layers are traced as
float16 (mixed precision) or float32 linears of the same shapes.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal

import torch

from fitwhisper.errors import ConfigError
from fitwhisper.method import Method, method_of
from fitwhisper.models import checkpointing
from fitwhisper.whisper_facts import FRAMES_PER_SECOND, WINDOW_SECONDS

log = logging.getLogger(__name__)

Precision = Literal["fp32", "fp16", "bf16"]
Optim = Literal["adamw_torch", "adamw_torch_fused", "adamw_8bit", "adafactor"]
Device = Literal["cuda", "cpu"]

GIB = 2**30
# CUDA context of a PyTorch process: driver context, CUDA runtime and the cuBLAS/cuDNN
# handles, with lazy module loading (CUDA >= 11.7, torch's default). Typically 0.3-0.6 GiB
# in nvidia-smi on A100/H100; an assumption, not measured by fitwhisper.
CUDA_CONTEXT_BYTES = GIB // 2
# Memory the caching allocator reserves beyond live tensors (rounding blocks to 2 MiB
# segments, fragmentation), as a fraction of the peak of live tensors: a stated assumption.
ALLOCATOR_SLACK = 0.10
BNB_BLOCK_4BIT = 64  # nf4 absmax block size (bitsandbytes default)
BNB_BLOCK_OPTIM_8BIT = 256  # blockwise 8-bit optimizer state block size
BNB_MIN_8BIT_SIZE = 4096  # smaller tensors keep 32-bit optimizer states


@dataclass(frozen=True)
class MemoryRequest:
    """One training configuration to predict; names follow `fitwhisper train`."""

    model: str = "openai/whisper-small"
    per_device_train_batch_size: int = 8
    precision: Precision = "fp32"  # fp16/bf16: mixed precision (fp32 weights, autocast)
    optim: Optim = "adamw_torch"
    gradient_checkpointing: bool = False
    freeze_encoder: bool = False
    training_method: Method = "full"  # fitwhisper/method.py: full, lora, dora, 8bit, 4bit
    lora_r: int = 32
    lora_target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: float = 0.05
    max_audio_len: float = WINDOW_SECONDS  # longest clip, seconds; padded to the encoder window
    encoder_window_s: float = WINDOW_SECONDS  # what the encoder sees (30 s standard)
    max_label_tokens: int = 448  # labels are padded to the longest in the batch
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    device: Device = "cuda"
    max_grad_norm: float | None = 1.0

    @property
    def method(self) -> str:
        name = method_of(self).title
        return "full, encoder frozen" if name == "full" and self.freeze_encoder else name

    @classmethod
    def from_configs(cls, model_cfg, data_cfg, train_cfg, *, precision: Precision, **fields):
        """A `train` run (ModelConfig, DataConfig, TrainConfig, and the precision it
        resolved) as a request; `fields` override. The one translation from options to
        memory: `train`'s OOM message and `--auto_fit` both use it."""
        values = dict(
            model=model_cfg.model,
            per_device_train_batch_size=train_cfg.per_device_train_batch_size,
            precision=precision,
            optim=train_cfg.optim,
            gradient_checkpointing=train_cfg.gradient_checkpointing,
            freeze_encoder=model_cfg.freeze_encoder,
            training_method=method_of(model_cfg).name,
            lora_r=model_cfg.lora_r,
            lora_target_modules=tuple(model_cfg.lora_target_modules),
            lora_dropout=model_cfg.lora_dropout,
            max_audio_len=data_cfg.max_audio_len,
            max_label_tokens=data_cfg.max_label_tokens,
            attn_implementation=train_cfg.attn_implementation,
        )
        return cls(**{**values, **fields})


@dataclass(frozen=True)
class MemoryPrediction:
    """Predicted device memory of one training step, in bytes."""

    request: MemoryRequest
    params: int  # parameters of the model (LoRA adapters included)
    trainable_params: int
    weights_bytes: int  # parameters and buffers as stored on the device
    gradients_bytes: int
    optimizer_bytes: int  # optimizer states
    activations_bytes: int  # peak of activations and temporaries in forward + backward
    optimizer_step_bytes: int  # temporaries of gradient clipping + optimizer step
    peak_tensor_bytes: int  # most bytes of live tensors at once, from the traced step
    peak_phase: str  # where that peak is: forward, backward or optimizer step
    cuda_context_bytes: int
    allocator_slack_bytes: int
    total_bytes: int  # peak_tensor_bytes + context + slack: what the device must hold
    attn_implementation: str
    encoder_frames: int
    label_tokens: int
    trace_seconds: float
    notes: tuple[str, ...] = field(default=())

    @property
    def overlap_bytes(self) -> int:
        """Negative: what the rows above the peak hold that is never live at the same time."""
        parts = (
            self.weights_bytes,
            self.gradients_bytes,
            self.optimizer_bytes,
            self.activations_bytes,
            self.optimizer_step_bytes,
        )
        return not_live_at_once(self.peak_tensor_bytes, parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["request"]["lora_target_modules"] = list(self.request.lora_target_modules)
        d["method"] = self.request.method
        d["overlap_bytes"] = self.overlap_bytes
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format_table(self) -> str:
        """The breakdown as the user's documents show it, with where each figure comes from."""
        r = self.request
        mixed = {"fp32": "fp32", "fp16": "fp16 mixed", "bf16": "bf16 mixed"}[r.precision]
        rows = [
            ("weights", self.weights_bytes, "exact, from the model's shapes"),
            ("gradients", self.gradients_bytes, f"{_m(self.trainable_params)} trainable"),
            ("optimizer states", self.optimizer_bytes, r.optim),
            ("activations", self.activations_bytes, "traced peak, forward + backward"),
            ("optimizer step", self.optimizer_step_bytes, "traced clip + step temporaries"),
            ("not live at once", self.overlap_bytes, f"peak is in the {self.peak_phase}"),
            ("peak of tensors", self.peak_tensor_bytes, ""),
            ("CUDA context", self.cuda_context_bytes, "assumed"),
            (
                "allocator slack",
                self.allocator_slack_bytes,
                f"{ALLOCATOR_SLACK:.0%} of peak, assumed",
            ),
        ]
        head = (
            f"{r.model}: {r.method}, {mixed}, batch {r.per_device_train_batch_size}, "
            f"{'gradient checkpointing' if r.gradient_checkpointing else 'no checkpointing'}\n"
            f"  {_m(self.params)} parameters, encoder input {self.encoder_frames} frames "
            f"({self.encoder_frames / FRAMES_PER_SECOND:g} s), labels {self.label_tokens} tokens, "
            f"attention {self.attn_implementation}, device {r.device}\n"
        )
        lines = [f"  {'':18} {'GiB':>8}"]
        for name, n, why in rows:
            if name == "peak of tensors":
                lines.append(f"  {'-' * 27}")
            lines.append(f"  {name:18} {n / GIB:8.2f}  {why}".rstrip())
        lines.append(f"  {'-' * 27}")
        lines.append(f"  {'total':18} {self.total_bytes / GIB:8.2f}  predicted peak on the device")
        notes = "".join(f"\n  note: {n}" for n in self.notes)
        return head + "\n".join(lines) + notes


def not_live_at_once(peak_bytes: int, parts_bytes: tuple[int, ...]) -> int:
    """The plan's "not live at once" row: the traced peak less the rows above it (their sum
    counts tensors that never coexist), so the table adds up to the peak. For one GPU
    (`MemoryPrediction`) and for several (memory/sharded.py)."""
    return peak_bytes - sum(parts_bytes)


def predict_memory(request: MemoryRequest | None = None, **kwargs: Any) -> MemoryPrediction:
    """Predict the peak device memory of one training step of `request`.

    Keyword arguments override fields of `request` (or of the defaults).

    Raises:
        ConfigError: options that conflict or are out of range.
        ModelLoadError: a model whose config cannot be read.
    """
    from fitwhisper.memory.architectures import whisper_config

    req = replace(request or MemoryRequest(), **kwargs)
    _validate(req)
    config = whisper_config(req.model)
    return _predict_cached(req, config.to_json_string(use_diff=False))


# --- the prediction -------------------------------------------------------------------------


# Large enough for the presets table (every model x method x batch x checkpointing).
@lru_cache(maxsize=1024)
def _predict_cached(req: MemoryRequest, config_json: str) -> MemoryPrediction:
    from transformers import WhisperConfig

    config = WhisperConfig(**json.loads(config_json))
    cuda = req.device == "cuda"
    frames = int(round(req.encoder_window_s * FRAMES_PER_SECOND))
    config.max_source_positions = frames // 2
    config._attn_implementation = req.attn_implementation

    # 1. Exact persistent bytes from the full model on the meta device; they do not depend
    #    on the batch, lengths or checkpointing, so a search over those builds it once.
    static_req = replace(
        req,
        per_device_train_batch_size=1,
        gradient_checkpointing=False,
        max_audio_len=0.0,
        max_label_tokens=1,
        attn_implementation="sdpa",
        max_grad_norm=None,
    )
    static = _static_cached(static_req, config.to_json_string(use_diff=False))

    # 2. Trace a step of the same model with at most TRACE_LAYERS layers per stack.
    t0 = time.perf_counter()
    peaks = _traced_peaks(config, req, static, frames, cuda)
    seconds = time.perf_counter() - t0

    slack = int(ALLOCATOR_SLACK * peaks.peak_bytes) if cuda else 0
    context = CUDA_CONTEXT_BYTES if cuda else 0
    notes = []
    if method_of(req).quantised:
        notes.append(
            "bitsandbytes layers are traced as "
            + ("float16" if req.precision != "fp32" else "float32")
            + " linears of the same shapes; their weights are counted in their "
            "quantised layout (non-quantised parameters in float32, as "
            "peft.prepare_model_for_kbit_training leaves them)"
        )
    if req.max_audio_len < req.encoder_window_s:
        notes.append(
            f"clips up to {req.max_audio_len:g} s are padded to the encoder's "
            f"{req.encoder_window_s:g} s window, so shorter clips save no memory"
        )
    return MemoryPrediction(
        request=req,
        params=static["params"],
        trainable_params=static["trainable_params"],
        weights_bytes=static["weights"],
        gradients_bytes=static["gradients"],
        optimizer_bytes=static["optimizer"],
        activations_bytes=peaks.activation_bytes,
        optimizer_step_bytes=peaks.optimizer_step_bytes,
        peak_tensor_bytes=peaks.peak_bytes,
        peak_phase=peaks.peak_phase,
        cuda_context_bytes=context,
        allocator_slack_bytes=slack,
        total_bytes=peaks.peak_bytes + context + slack,
        attn_implementation=req.attn_implementation,
        encoder_frames=frames,
        label_tokens=req.max_label_tokens,
        trace_seconds=round(seconds, 3),
        notes=tuple(notes),
    )


@lru_cache(maxsize=64)
def _static_cached(req: MemoryRequest, config_json: str) -> dict[str, int]:
    from transformers import WhisperConfig

    config = WhisperConfig(**json.loads(config_json))
    return _static_bytes(_build_meta(config, req), req, req.device == "cuda")


def _traced_peaks(
    config,
    req: MemoryRequest,
    static: dict[str, int],
    frames: int,
    cuda: bool,
    expand: bool = True,
):
    """Peaks of the step; `expand=False` traces every layer (slow; for checking)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fitwhisper.memory.trace import TRACE_LAYERS, expand_peaks, fake_parameters, trace_step

    counts = {"enc": config.encoder_layers, "dec": config.decoder_layers}
    traced = {s: min(n, TRACE_LAYERS) if expand else n for s, n in counts.items()}
    small = type(config)(**config.to_dict())
    small.encoder_layers, small.decoder_layers = traced["enc"], traced["dec"]
    small._attn_implementation = req.attn_implementation
    model = _build_meta(small, req)
    whisper = _whisper_module(model)
    dtypes = _stand_in_dtypes(model, req)
    if not req.gradient_checkpointing:  # see _half_base
        dtypes |= _half_base(model, req)
    batch, labels = req.per_device_train_batch_size, req.max_label_tokens
    mixed = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(req.precision)

    with FakeTensorMode():
        fake_parameters(model, dtypes)
        model.train()

        def make_inputs():
            return {
                "input_features": torch.empty(batch, config.num_mel_bins, frames),
                "labels": torch.zeros(batch, labels, dtype=torch.long),
            }

        trace = trace_step(
            model,
            {"enc": list(whisper.model.encoder.layers), "dec": list(whisper.model.decoder.layers)},
            make_inputs,
            lambda params: _make_optimizer(req, params, cuda),
            autocast_dtype=mixed,
            cuda=cuda,
            max_grad_norm=req.max_grad_norm,
        )
    return expand_peaks(
        trace,
        persistent_bytes=static["weights"] + static["optimizer"],
        layer_counts=counts,
        traced_counts=traced,
        trainable_bytes=static["gradients"],
        foreach_optimizer=cuda and req.optim == "adamw_torch",
    )


def _build_meta(config, req: MemoryRequest) -> torch.nn.Module:
    """The model as training sees it, on the meta device: freezing, LoRA, checkpointing."""
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    model.config.use_cache = False  # training never uses the decoder's key/value cache
    # As fitwhisper.train: the encoder's sinusoid table stays fixed.
    model.model.encoder.embed_positions.requires_grad_(False)
    if req.freeze_encoder:
        model.model.encoder.requires_grad_(False)
    if req.gradient_checkpointing:
        checkpointing.enable(model)
    if method_of(req).adapters:
        from peft import LoraConfig, get_peft_model

        with torch.device("meta"), warnings.catch_warnings():
            # peft asks the deprecated is_gradient_checkpointing (transformers 5)
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            model = get_peft_model(
                model,
                LoraConfig(
                    r=req.lora_r,
                    lora_alpha=2 * req.lora_r,
                    lora_dropout=req.lora_dropout,
                    target_modules=list(req.lora_target_modules),
                    **dict(method_of(req).peft_options),
                ),
            )
    return model


def _whisper_module(model: torch.nn.Module):
    from transformers import WhisperForConditionalGeneration

    for m in model.modules():
        if isinstance(m, WhisperForConditionalGeneration):
            return m
    raise AssertionError("no WhisperForConditionalGeneration inside the model")


def _quantised_linears(model: torch.nn.Module) -> dict[str, torch.nn.Linear]:
    """The nn.Linear layers bitsandbytes would quantise: all but the output projection
    (tied to the token embedding, kept by transformers) and the LoRA adapters."""
    out = {}
    for name, m in model.named_modules():
        if type(m) is torch.nn.Linear and "lora_" not in name and not name.endswith("proj_out"):
            out[name] = m
    return out


def _stand_in_dtypes(model: torch.nn.Module, req: MemoryRequest) -> dict[str, torch.dtype]:
    """Quantised weights are traced as float16 frozen linears under mixed precision."""
    if not method_of(req).quantised or req.precision == "fp32":
        return {}
    return {f"{n}.weight": torch.float16 for n in _quantised_linears(model)}


def _half_base(model: torch.nn.Module, req: MemoryRequest) -> dict[str, torch.dtype]:
    """A plain LoRA run's frozen base under mixed precision is held in the run's half
    precision (train/method_loading.py `base_dtype`). Without checkpointing the trace holds it
    so too: an fp32 stand-in made autocast keep a half copy of every frozen weight for the
    backward pass, +59% on large-v3 against an H200 (bench/RESULTS-gpu.md). Checkpointing's
    replay on fake tensors fails on half weights, so there the trace keeps it fp32 (+5% to
    +16% on the H200, on the safe side)."""
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(req.precision)
    if half is None or not method_of(req).half_base:
        return {}
    return {n: half for n, p in model.named_parameters() if not p.requires_grad}


def _static_bytes(model: torch.nn.Module, req: MemoryRequest, cuda: bool) -> dict[str, int]:
    """Exact bytes of weights, gradients and optimizer states of the full model."""

    def dev(n: int) -> int:
        from fitwhisper.memory.trace import round_cuda

        return round_cuda(n) if cuda and n else n

    quantised = {}
    if method_of(req).quantised:
        quantised = {f"{n}.weight": m for n, m in _quantised_linears(model).items()}
    half_base = _half_base(model, req)
    weights = grads = optim = params = trainable = 0
    seen: set[int] = set()
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        n = p.numel()
        params += n
        if name in quantised:
            out_features = p.shape[0]
            if method_of(req).base_bits == 8:  # Int8Params int8 weight + fp32 per-row scale
                weights += dev(n) + dev(4 * out_features)
            else:  # nf4: two weights per byte + an fp32 absmax per 64-value block
                weights += dev(n // 2) + dev(4 * -(-n // BNB_BLOCK_4BIT))
        elif name in half_base:
            weights += dev(n * half_base[name].itemsize)
        else:
            weights += dev(n * p.element_size())
        if p.requires_grad:
            trainable += n
            grads += dev(n * p.element_size())
            optim += _optimizer_state_bytes(req.optim, p, dev)
    for b in model.buffers():
        weights += dev(b.numel() * b.element_size())
    return {
        "params": params,
        "trainable_params": trainable,
        "weights": weights,
        "gradients": grads,
        "optimizer": optim,
    }


def _optimizer_state_bytes(optim: Optim, p: torch.Tensor, dev) -> int:
    """Bytes of one parameter's optimizer state on the device."""
    n = p.numel()
    if optim in ("adamw_torch", "adamw_torch_fused"):
        # exp_avg + exp_avg_sq in the parameter's dtype; the step count lives on the CPU,
        # except for the fused kernel, which keeps it on the device.
        step = dev(4) if optim == "adamw_torch_fused" else 0
        return 2 * dev(n * p.element_size()) + step
    if optim == "adamw_8bit":
        # bitsandbytes blockwise 8-bit: two uint8 states + an fp32 absmax per block each
        if n < BNB_MIN_8BIT_SIZE:
            return 2 * dev(4 * n)
        return 2 * (dev(n) + dev(4 * -(-n // BNB_BLOCK_OPTIM_8BIT)))
    if optim == "adafactor":
        # transformers Adafactor, beta1=None (Trainer's default): factored second moment
        # (row and column means) for matrices, a full one for vectors.
        if p.dim() >= 2:
            rows = p.numel() // p.shape[-1]
            cols = p.numel() // p.shape[-2]
            return dev(4 * rows) + dev(4 * cols)
        return dev(4 * n)
    raise ConfigError(f"unknown optimizer {optim!r}")


def _make_optimizer(req: MemoryRequest, params: list, cuda: bool):
    if not params:
        return None
    if req.optim == "adamw_torch":
        # torch picks the foreach (multi-tensor) kernels on CUDA: one parameter-sized
        # temporary per step; on CPU it steps tensor by tensor.
        return torch.optim.AdamW(params, lr=1e-5, foreach=cuda)
    if req.optim == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    if req.optim == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-5, scale_parameter=False, relative_step=False)
    return None  # adamw_8bit: bitsandbytes' fused kernel; states counted, no temporaries


def _validate(req: MemoryRequest) -> None:
    problems = []
    batch = req.per_device_train_batch_size
    if batch < 1:
        problems.append(f"--per_device_train_batch_size must be at least 1 (got {batch})")
    if req.precision != "fp32" and req.device == "cpu" and req.precision == "fp16":
        problems.append("fp16 mixed precision needs a CUDA GPU; plan for --device cuda")
    if not 1 <= req.max_label_tokens <= 448:
        problems.append(f"--max_label_tokens must be 1-448 (got {req.max_label_tokens})")
    if not 0 < req.encoder_window_s <= WINDOW_SECONDS:
        problems.append(f"the encoder window must be 0-30 s (got {req.encoder_window_s:g})")
    if req.max_audio_len > req.encoder_window_s:
        problems.append(
            f"--max_audio_len {req.max_audio_len:g} s is longer than the encoder's "
            f"{req.encoder_window_s:g} s window"
        )
    if req.lora_r < 1:
        problems.append(f"--lora_r must be at least 1 (got {req.lora_r})")
    if problems:
        raise ConfigError(
            "; ".join(problems), hint="fix the options above; `fitwhisper plan --help`"
        )


def _m(n: int) -> str:
    return f"{n / 1e6:.1f}M"
