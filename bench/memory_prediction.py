"""Predicted vs measured peak memory of one training step.

    PYTHONPATH=src python bench/memory_prediction.py [--device cpu|cuda] [--out FILE]
    PYTHONPATH=src python bench/memory_prediction.py --grid mixed --batches 4 [--out FILE]

For each configuration of the grid, a real model with random weights is built from the
shipped configuration, one warm-up step creates the optimizer states, and the next step
(forward with labels, backward, gradient clipping, AdamW step, zero_grad) is measured.
`--grid fp32` (default): tiny and base x batch 1, 4 x gradient checkpointing off, on x full,
LoRA, in fp32. `--grid mixed`: the paths beyond fp32, built as `fitwhisper train` builds
them (saved, then loaded through train/method_loading.py's `load_kwargs` and
`prepare_for_training`): full fine-tuning under bf16 autocast, LoRA on a bf16 base, and
LoRA on an 8-bit and a 4-bit bitsandbytes base in fp32 and bf16. Measured:

- cpu: the PyTorch profiler's memory events (profile_memory=True): the running sum of every
  allocation and free during the step, its maximum added to the bytes already held (weights,
  buffers, optimizer states, summed from the real tensors). This is independent of the
  predictor, which traces fake tensors with its own dispatch mode.
- cuda: torch.cuda.max_memory_allocated() over the same step.

The prediction compared is the peak of live tensors (`peak_tensor_bytes`), which is what
both measures count; the CUDA context and allocator slack are not part of either.
"""

from __future__ import annotations

import argparse
import gc
import platform
import sys
import time
from pathlib import Path

import torch

from fitwhisper.memory.architectures import whisper_config
from fitwhisper.memory.predict import MemoryRequest, predict_memory
from fitwhisper.method import METHODS
from fitwhisper.models import checkpointing

MODELS = ("openai/whisper-tiny", "openai/whisper-base")
BATCHES = (1, 4)
LABEL_TOKENS = 128
TOLERANCE = 0.10
# The configurations of each grid, beyond model, batch and checkpointing.
GRIDS: dict[str, list[dict]] = {
    "fp32": [{}, {"training_method": "lora"}],
    "mixed": [
        {"precision": "bf16"},
        {"precision": "bf16", "training_method": "lora"},
        {"training_method": "8bit"},
        {"training_method": "4bit"},
        {"precision": "bf16", "training_method": "8bit"},
        {"precision": "bf16", "training_method": "4bit"},
    ],
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", default=None, help="Write the markdown table here too.")
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    ap.add_argument("--grid", choices=tuple(GRIDS), default="fp32")
    args = ap.parse_args(argv)

    rows = []
    for model in args.models:
        for batch in args.batches:
            for ckpt in (False, True):
                for fields in GRIDS[args.grid]:
                    req = MemoryRequest(
                        model=model,
                        per_device_train_batch_size=batch,
                        gradient_checkpointing=ckpt,
                        max_label_tokens=LABEL_TOKENS,
                        device=args.device,
                        **fields,
                    )
                    t0 = time.perf_counter()
                    pred = predict_memory(req)
                    t_pred = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    measured = measure_step(req)
                    t_meas = time.perf_counter() - t0
                    err = pred.peak_tensor_bytes / measured - 1
                    rows.append((req, pred, measured, err, t_pred, t_meas))
                    print(_row(req, pred, measured, err, t_pred, t_meas), flush=True)
    table = _table(rows, args.device)
    print("\n" + table)
    if args.out:
        Path(args.out).write_text(table + "\n")
    return 0 if all(abs(r[3]) <= TOLERANCE for r in rows) else 1


def measure_step(req: MemoryRequest) -> int:
    """Peak bytes of live tensors during one real training step of `req`."""
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(0)
    device = torch.device(req.device)
    config = whisper_config(req.model)
    config._attn_implementation = req.attn_implementation
    method = METHODS[req.training_method]
    mixed = req.precision != "fp32" or method.quantised
    if mixed:
        model = _as_train_builds_it(config, req)
    else:
        model = WhisperForConditionalGeneration(config).to(device)
    model.config.use_cache = False
    model.get_encoder().embed_positions.requires_grad_(False)
    if req.gradient_checkpointing:
        checkpointing.enable(model)
    if method.adapters and not mixed:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=req.lora_r,
                lora_alpha=2 * req.lora_r,
                lora_dropout=req.lora_dropout,
                target_modules=list(req.lora_target_modules),
            ),
        )
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)  # torch's default kernel choice per device

    def step() -> None:
        batch = {
            "input_features": torch.randn(
                req.per_device_train_batch_size, config.num_mel_bins, 3000, device=device
            ),
            "labels": torch.randint(
                0, 50000, (req.per_device_train_batch_size, req.max_label_tokens), device=device
            ),
        }
        with _autocast(req):
            loss = model(**batch).loss
        loss.backward()
        del loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        model.zero_grad(set_to_none=True)
        del batch

    step()  # warm-up: optimizer states exist from here on
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        held = _held_bytes(model, opt)
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
        ) as prof:
            step()
        peak = held + _peak_from_memory_events(prof)
    return peak


def _as_train_builds_it(config, req: MemoryRequest) -> torch.nn.Module:
    """The model as `fitwhisper train` loads and prepares it for `req` (CPU): saved with
    random weights, loaded with the method's from_pretrained arguments (a bf16 base, or a
    bitsandbytes quantisation), then frozen and given LoRA adapters."""
    import tempfile

    from transformers import WhisperForConditionalGeneration

    from fitwhisper.config import ModelConfig, TrainConfig
    from fitwhisper.train.method_loading import load_kwargs, prepare_for_training

    model_cfg = ModelConfig(
        model="bench", method=METHODS[req.training_method].option, lora_r=req.lora_r,
        lora_alpha=2 * req.lora_r, lora_dropout=req.lora_dropout,
        lora_target_modules=tuple(req.lora_target_modules),
    )  # fmt: skip
    kwargs = {"dtype": torch.float32, **load_kwargs(model_cfg, req.precision)}
    with tempfile.TemporaryDirectory() as folder:
        WhisperForConditionalGeneration(config).save_pretrained(folder)
        model = WhisperForConditionalGeneration.from_pretrained(folder, **kwargs)
    prepared = prepare_for_training(model, model_cfg, TrainConfig(learning_rate=1e-3))
    gc.collect()
    return prepared


def _autocast(req: MemoryRequest):
    import contextlib

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req.precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(req.device, dtype=dtype)


def _held_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    """Bytes of the distinct storages of weights, buffers and optimizer states."""
    storages: dict[int, int] = {}
    tensors = [*model.parameters(), *model.buffers()]
    for state in opt.state.values():
        tensors += [t for t in state.values() if isinstance(t, torch.Tensor)]
    for t in tensors:
        st = t.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
    return sum(storages.values())


def _peak_from_memory_events(prof) -> int:
    """The maximum of the running sum of the profiler's allocation (+) and free (-) events."""
    from torch._C._profiler import _EventType

    events: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            events.append((node.start_time_ns, node.typed[1].alloc_size))
        stack.extend(node.children)
    live = peak = 0
    for _, delta in sorted(events):
        live += delta
        peak = max(peak, live)
    return peak


def _row(req, pred, measured, err, t_pred, t_meas) -> str:
    from fitwhisper.method import method_of

    method = method_of(req).label
    if req.precision != "fp32":
        method += f", {req.precision}"
    ckpt = "on" if req.gradient_checkpointing else "off"
    return (
        f"| {req.model.split('/')[-1]} | {req.per_device_train_batch_size} | {ckpt} | {method} "
        f"| {pred.peak_tensor_bytes / 2**20:,.1f} | {measured / 2**20:,.1f} | {100 * err:+.1f}% "
        f"| {pred.peak_phase} | {t_pred:.1f} | {t_meas:.1f} |"
    )


def _table(rows, device: str) -> str:
    import transformers

    head = (
        f"device {device}; machine: {platform.machine()}, {platform.processor() or '?'}, "
        f"{torch.get_num_threads()} threads, Python {sys.version.split()[0]}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}; AdamW, "
        f"labels {LABEL_TOKENS} tokens, 30 s inputs (3000 frames), sdpa attention.\n\n"
        "| model | batch | checkpointing | method | predicted MiB | measured MiB | error "
        "| peak in | predict s | measure s |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    worst = max(abs(r[3]) for r in rows)
    return (
        head
        + "\n"
        + "\n".join(_row(*r) for r in rows)
        + f"\n\nworst error {100 * worst:.1f}% (tolerance {100 * TOLERANCE:.0f}%)"
    )


if __name__ == "__main__":
    sys.exit(main())
