"""Trace one training step of a Whisper model on fake tensors and find its memory peak.

Nothing real is allocated: parameters and inputs are `FakeTensor`s (shapes and dtypes only),
so the forward pass with labels, the loss, the backward pass, gradient clipping and the
optimizer step run the real transformers, peft and torch.optim code at the exact batch,
lengths, dtypes and checkpointing setting, on a CPU, in about a second. A dispatch mode
records every storage that comes to life and when it dies; the peak of live bytes is the
prediction.

Speed. Tracing all 64 layers of large-v3 takes about 10 s on a 2-core CPU, because fake
tensors cost about 0.3 ms per operation. Whisper's layers are identical within a stack, so
the step is traced with at most 3 layers per stack (first, one middle, last) and the middle
layer's events are replayed once per middle layer of the real model ("expansion"). Frees are
mapped to the right copy by their distance in layers from the allocation (a layer's output
is freed in the next layer's backward). `tests/memory/test_trace.py` checks the expansion
against full traces.

Device. Fake CUDA tensors cannot be indexed by a CPU-only torch build, so the step is
traced on fake CPU tensors and made to behave like CUDA where that changes memory: storage
sizes are rounded up to the CUDA caching allocator's 512-byte unit, the optimizer gets the
foreach (multi-tensor) implementation torch picks on CUDA, and autocast follows CUDA's
rules, which keep layer_norm, softmax and log_softmax in float32 where CPU autocast does not
(`_cuda_autocast_rules`).
"""

from __future__ import annotations

import contextlib
import math
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CUDA_ALLOC_UNIT_BYTES = 512  # the CUDA caching allocator rounds every block up to this
TRACE_LAYERS = 3  # layers per stack traced when expanding: first, one middle, last

# A segment label: (phase, stack, layer index, part); stack and index are None outside layers.
Label = tuple[str, str | None, int | None, str]


def round_cuda(nbytes: int) -> int:
    return math.ceil(nbytes / CUDA_ALLOC_UNIT_BYTES) * CUDA_ALLOC_UNIT_BYTES


@dataclass
class StepTrace:
    """What one traced training step allocated and freed, in order, by segment."""

    segments: list[Label] = field(default_factory=list)
    # (segment index, +1 alloc / -1 free, allocation id)
    events: list[tuple[int, int, int]] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)  # bytes per allocation id
    alloc_segment: list[int] = field(default_factory=list)  # segment of each allocation
    alloc_op: list[str] = field(default_factory=list)  # the operator that made it
    grad_allocs: set[int] = field(default_factory=set)  # allocations that became .grad
    trainable_bytes: int = 0  # of the traced (reduced) model


class _LiveStorages(TorchDispatchMode):
    """Records the storages every operator's outputs bring to life, and when they die."""

    def __init__(self, trace: StepTrace, cuda_rounding: bool) -> None:
        super().__init__()
        self.trace = trace
        self.cuda_rounding = cuda_rounding
        self._ids: dict[int, tuple[weakref.ref, int]] = {}
        self._segment = -1
        self.set_label(("fwd", None, None, "pre"))

    def set_label(self, label: Label) -> None:
        if self._segment >= 0 and self.trace.segments[self._segment] == label:
            return
        self.trace.segments.append(label)
        self._segment = len(self.trace.segments) - 1

    def alloc_id(self, t: torch.Tensor) -> int | None:
        entry = self._ids.get(id(t.untyped_storage()))
        if entry and entry[0]() is t.untyped_storage() and entry[1] >= 0:
            return entry[1]
        return None

    def hold(self, tensors: Iterator[torch.Tensor]) -> None:
        """Storages that exist before the trace (weights, optimizer states): they are
        counted by the caller, so an in-place update of one is not a new allocation."""
        for t in tensors:
            st = t.untyped_storage()
            self._ids[id(st)] = (weakref.ref(st), -1)

    def _track(self, t: torch.Tensor, op: str) -> None:
        st = t.untyped_storage()
        entry = self._ids.get(id(st))
        if entry is not None and entry[0]() is st:
            return
        tr = self.trace
        a = len(tr.sizes)
        nbytes = st.nbytes()
        tr.sizes.append(round_cuda(nbytes) if self.cuda_rounding else nbytes)
        tr.alloc_segment.append(self._segment)
        tr.alloc_op.append(op)
        tr.events.append((self._segment, 1, a))
        key = id(st)

        def freed(_ref: weakref.ref, a: int = a, key: int = key) -> None:
            tr.events.append((self._segment, -1, a))
            if self._ids.get(key, (None, -1))[1] == a:
                del self._ids[key]

        self._ids[key] = (weakref.ref(st, freed), a)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].dtype == torch.bool:
            # A fake tensor holds no value to test. Whisper's LayerDrop before transformers
            # 5.2x asks `torch.rand([]) < layerdrop` in training even at 0: keeping the
            # layer (False) is the peak. Other data-dependent questions still raise.
            return False
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._track(t, func.__name__)
        return out


def trace_step(
    model: torch.nn.Module,
    layers: dict[str, list[torch.nn.Module]],
    make_inputs: Callable[[], dict[str, torch.Tensor]],
    make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer | None],
    *,
    autocast_dtype: torch.dtype | None,
    cuda: bool,
    max_grad_norm: float | None = 1.0,
) -> StepTrace:
    """Trace forward (with labels), backward, clipping and optimizer step of `model`.

    `model` must hold fake parameters already (`fake_parameters`) and run inside the same
    FakeTensorMode. Optimizer states are created before tracing, as after a first step.

    Args:
        layers: the repeated blocks per stack ("enc", "dec"); their hooks label segments.
        make_inputs: builds the batch (fake tensors) inside the trace.
        make_optimizer: the optimizer over the trainable parameters, or None to skip it.
        autocast_dtype: float16/bfloat16 for mixed precision, None for float32.
        cuda: behave like CUDA (512-byte rounding, CUDA autocast rules).
    """
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params)
    if optimizer is not None:
        _create_optimizer_states(optimizer, params)
    trace = StepTrace(trainable_bytes=sum(_nbytes(p, cuda) for p in params))
    tracker = _LiveStorages(trace, cuda_rounding=cuda)
    tracker.hold(_held_tensors(model, optimizer))
    phase = {"name": "fwd"}
    handles = _label_layers(layers, tracker, phase)
    try:
        with tracker:
            # 1. forward with labels, as Trainer.compute_loss: outputs dropped, loss kept
            batch = make_inputs()
            with _autocast(autocast_dtype, cuda):
                loss = model(**batch).loss
            # 2. backward
            phase["name"] = "bwd"
            tracker.set_label(("bwd", None, None, "head"))
            loss.backward()
            del loss
            trace.grad_allocs = {a for p in params if (a := _grad_alloc(tracker, p)) is not None}
            # 3. clip and step, then free the gradients as Trainer does (zero_grad set_to_none)
            phase["name"] = "opt"
            tracker.set_label(("opt", None, None, "step"))
            if max_grad_norm is not None and params:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=cuda or None)
            if optimizer is not None:
                optimizer.step()
            tracker.set_label(("opt", None, None, "zero_grad"))
            model.zero_grad(set_to_none=True)
            del batch
    finally:
        for h in handles:
            h.remove()
    return trace


@dataclass(frozen=True)
class Peaks:
    """Peaks of a step in bytes, for the full model (after expansion)."""

    peak_bytes: int  # most bytes live at once, persistent bytes included
    peak_phase: str  # "forward", "backward" or "optimizer step"
    activation_bytes: int  # most bytes live in forward+backward beyond persistent + grads
    optimizer_step_bytes: int  # most bytes the clip + optimizer step adds above the grads


def expand_peaks(
    trace: StepTrace,
    *,
    persistent_bytes: int,
    layer_counts: dict[str, int],
    traced_counts: dict[str, int],
    trainable_bytes: int,
    foreach_optimizer: bool,
) -> Peaks:
    """Peaks of the full model from a trace of a model with fewer layers per stack.

    Args:
        persistent_bytes: weights, buffers and optimizer states of the full model.
        layer_counts: layers per stack of the full model; traced_counts: of the trace.
        trainable_bytes: trainable parameter bytes of the full model.
        foreach_optimizer: the optimizer's temporaries scale with all trainable bytes
            (foreach); otherwise they depend on the largest tensor only.
    """
    expanded = {s: layer_counts[s] > traced_counts[s] for s in layer_counts}
    for s, on in expanded.items():
        if on and traced_counts[s] != TRACE_LAYERS:
            raise ValueError(f"expanding stack {s} needs {TRACE_LAYERS} traced layers")
    by_segment: dict[int, list[tuple[int, int]]] = {}
    for seg, sign, a in trace.events:
        by_segment.setdefault(seg, []).append((sign, a))
    matcher = _Matcher(trace)

    def full_index(stack: str, idx: int, copy: int | None) -> int:
        if not expanded[stack]:
            return idx
        if idx == 0:
            return 0
        if idx == TRACE_LAYERS - 1:
            return layer_counts[stack] - 1
        assert copy is not None
        return copy

    def reduced_index(stack: str, full: int) -> int:
        if not expanded[stack] or full == 0:
            return full
        return TRACE_LAYERS - 1 if full == layer_counts[stack] - 1 else 1

    # The full model's segments in time order: (trace segment, full layer index or None).
    order = _full_model_order(trace.segments, expanded, layer_counts, full_index)
    segs = trace.segments

    live_keys: dict[tuple[int, int | None], int] = {}
    live = persistent_bytes
    grads = 0
    peak, peak_phase, act_peak = live, "forward", 0
    opt_start = None
    opt_rel_peak = 0
    red_live = 0  # live bytes of the trace itself, for the optimizer segment
    for seg, full in order:
        label = segs[seg]
        phase = label[0]
        if phase == "opt":
            # The optimizer step's temporaries are measured on the trace and scaled.
            if opt_start is None:
                opt_start = live
                red_start = red_live
            for sign, a in by_segment.get(seg, []):
                red_live += sign * trace.sizes[a]
                if label[3] == "step":
                    opt_rel_peak = max(opt_rel_peak, red_live - red_start)
            continue
        for sign, a in by_segment.get(seg, []):
            for key in _keys(
                sign,
                a,
                label,
                full,
                trace,
                matcher,
                expanded,
                layer_counts,
                full_index,
                reduced_index,
                live_keys,
            ):
                size = trace.sizes[key[0]] if sign > 0 else live_keys.pop(key)
                if sign > 0:
                    live_keys[key] = size
                live += sign * size
                if key[0] in trace.grad_allocs:
                    grads += sign * size
            red_live += sign * trace.sizes[a]
            if live > peak:
                peak, peak_phase = live, "forward" if phase == "fwd" else "backward"
            act_peak = max(act_peak, live - persistent_bytes - grads)
    scale = (
        trainable_bytes / trace.trainable_bytes
        if foreach_optimizer and trace.trainable_bytes
        else 1
    )
    opt_extra = int(opt_rel_peak * scale)
    if opt_start is not None and opt_start + opt_extra > peak:
        peak, peak_phase = opt_start + opt_extra, "optimizer step"
    return Peaks(peak, peak_phase, act_peak, opt_extra)


def _full_model_order(
    segs, expanded: dict[str, bool], layer_counts: dict[str, int], full_index
) -> list[tuple[int, int | None]]:
    """The full model's segments in time order, as (trace segment, full layer index or
    None): each traced middle layer stands for every middle layer of its stack, forward in
    order and backward in reverse."""

    def is_middle(label: Label) -> bool:
        _, stack, idx, _ = label
        return stack is not None and expanded[stack] and idx == 1

    order: list[tuple[int, int | None]] = []
    i = 0
    while i < len(segs):
        phase, stack, idx, _ = segs[i]
        if is_middle(segs[i]):
            j = i
            while j < len(segs) and is_middle(segs[j]) and segs[j][:2] == (phase, stack):
                j += 1
            n = layer_counts[stack]
            copies = range(1, n - 1) if phase == "fwd" else range(n - 2, 0, -1)
            order.extend((k, c) for c in copies for k in range(i, j))
            i = j
            continue
        order.append((i, None if stack is None else full_index(stack, idx, None)))
        i += 1
    return order


def _keys(
    sign,
    a,
    label,
    full,
    trace,
    matcher,
    expanded,
    layer_counts,
    full_index,
    reduced_index,
    live_keys,
) -> Iterator[tuple[int, int | None]]:
    """The allocations of the full model an event of the trace stands for."""
    if sign > 0:
        yield (a, full)
        return
    a_label = trace.segments[trace.alloc_segment[a]]
    _, a_stack, a_idx, _ = a_label
    if a_stack is None:
        if (a, None) in live_keys:  # a free replayed in every middle copy happens once
            yield (a, None)
        return
    _, f_stack, f_idx, _ = label
    if f_stack == a_stack and f_idx is not None and full is not None:
        # Freed in a layer of the same stack: the copy `distance` layers away.
        source = full - (f_idx - a_idx)
        if not 0 <= source < layer_counts[a_stack]:
            return
        red = reduced_index(a_stack, source)
        if red != a_idx:  # the matching allocation of an identical layer
            a = matcher.match(a, (a_label[0], a_stack, red, a_label[3]))
        if (a, source) in live_keys:
            yield (a, source)
        return
    # Freed outside the stack (autocast cache, zero_grad): every copy goes at once.
    if expanded[a_stack] and a_idx == 1:
        for c in range(1, layer_counts[a_stack] - 1):
            if (a, c) in live_keys:
                yield (a, c)
    else:
        key = (a, full_index(a_stack, a_idx, None))
        if key in live_keys:
            yield key


class _Matcher:
    """Pairs each allocation of one layer's segment with its counterpart in another layer's.

    Identical layers allocate alike, but not always in the same number: the first decoder
    layer reached in backward starts the encoder-output gradient that later ones add to. So
    the (operator, size) sequences are aligned (difflib) rather than paired by position.
    """

    def __init__(self, trace: StepTrace) -> None:
        self.trace = trace
        self.by_label: dict[Label, list[int]] = {}
        for a, seg in enumerate(trace.alloc_segment):
            self.by_label.setdefault(trace.segments[seg], []).append(a)
        self._maps: dict[tuple[Label, Label], dict[int, int]] = {}

    def match(self, a: int, other: Label) -> int:
        label = self.trace.segments[self.trace.alloc_segment[a]]
        pair = (label, other)
        if pair not in self._maps:
            self._maps[pair] = self._align(
                self.by_label.get(label, []), self.by_label.get(other, [])
            )
        return self._maps[pair].get(a, a)

    def _align(self, xs: list[int], ys: list[int]) -> dict[int, int]:
        import difflib

        tr = self.trace
        kx = [(tr.alloc_op[a], tr.sizes[a]) for a in xs]
        ky = [(tr.alloc_op[a], tr.sizes[a]) for a in ys]
        out: dict[int, int] = {}
        for block in difflib.SequenceMatcher(None, kx, ky, autojunk=False).get_matching_blocks():
            for k in range(block.size):
                out[xs[block.a + k]] = ys[block.b + k]
        return out


# --- building blocks ------------------------------------------------------------------------


def fake_parameters(model: torch.nn.Module, dtypes: dict[str, torch.dtype] | None = None) -> None:
    """Replace a meta model's parameters and buffers by fake CPU tensors (in the active
    FakeTensorMode), keeping ties, requires_grad and, unless `dtypes` names one, dtypes."""
    dtypes = dtypes or {}
    memo: dict[int, torch.Tensor] = {}
    names = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    for mod in model.modules():
        for n, p in list(mod._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                dtype = dtypes.get(names.get(id(p), ""), p.dtype)
                memo[id(p)] = torch.nn.Parameter(
                    torch.empty(p.shape, dtype=dtype), requires_grad=p.requires_grad
                )
            mod._parameters[n] = memo[id(p)]
        for n, b in list(mod._buffers.items()):
            if b is not None:
                if id(b) not in memo:
                    memo[id(b)] = torch.empty(b.shape, dtype=b.dtype)
                mod._buffers[n] = memo[id(b)]


def _nbytes(t: torch.Tensor, cuda: bool) -> int:
    n = t.numel() * t.element_size()
    return round_cuda(n) if cuda else n


def _held_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None):
    yield from model.parameters()
    yield from model.buffers()
    if optimizer is not None:
        for state in optimizer.state.values():
            yield from (v for v in state.values() if isinstance(v, torch.Tensor))


def _grad_alloc(tracker: _LiveStorages, p: torch.nn.Parameter) -> int | None:
    return None if p.grad is None else tracker.alloc_id(p.grad)


def _create_optimizer_states(optimizer: torch.optim.Optimizer, params: list) -> None:
    """Create the states as they exist from the second step on, untraced.

    AdamW's states are made directly (what its `_init_group` makes, without a step over
    fake tensors); other optimizers take one step on zero gradients.
    """
    if type(optimizer) is torch.optim.AdamW:
        fused = any(g.get("fused") for g in optimizer.param_groups)
        for p in params:
            optimizer.state[p] = {
                "step": torch.zeros((), dtype=torch.float32)
                if fused
                else torch.tensor(0.0, dtype=torch.float32, device="cpu"),
                "exp_avg": torch.zeros(p.shape, dtype=p.dtype),
                "exp_avg_sq": torch.zeros(p.shape, dtype=p.dtype),
            }
        return
    for p in params:
        p.grad = torch.zeros(p.shape, dtype=p.dtype)
    optimizer.step()
    for p in params:
        p.grad = None


def _label_layers(
    layers: dict[str, list[torch.nn.Module]], tracker: _LiveStorages, phase: dict[str, str]
) -> list[Any]:
    """Hooks that name the segment each event belongs to: (phase, stack, layer, part)."""
    handles = []
    for stack, mods in layers.items():
        for i, mod in enumerate(mods):
            is_last = i == len(mods) - 1

            def pre(_m, _args, stack=stack, i=i):
                if phase["name"] == "fwd":
                    tracker.set_label(("fwd", stack, i, ""))

            def post(_m, _args, out, stack=stack, i=i, last=is_last):
                if phase["name"] != "fwd":
                    return  # a checkpointed layer recomputing in backward
                # After the last layer comes the rest of the model (final layer norm, the
                # other stack, the loss, autocast's cache release): not a layer's segment.
                tracker.set_label(
                    ("fwd", None, None, f"{stack} end") if last else ("fwd", stack, i, "post")
                )
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor) and t.requires_grad:
                        t.register_hook(lambda g, stack=stack, i=i: _enter_bwd(tracker, stack, i))
                        break

            handles.append(mod.register_forward_pre_hook(pre))
            handles.append(mod.register_forward_hook(post))
    return handles


def _enter_bwd(tracker: _LiveStorages, stack: str, i: int) -> None:
    tracker.set_label(("bwd", stack, i, ""))


@contextlib.contextmanager
def _autocast(dtype: torch.dtype | None, cuda: bool) -> Iterator[None]:
    if dtype is None:
        yield
        return
    with contextlib.ExitStack() as stack:
        if cuda:
            stack.enter_context(_cuda_autocast_rules())
        stack.enter_context(torch.autocast("cpu", dtype=dtype))
        yield


_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


@contextlib.contextmanager
def _cuda_autocast_rules() -> Iterator[None]:
    """Make CPU autocast follow CUDA's float32 rules for the ops Whisper uses.

    CUDA autocast runs layer_norm in float32 and softmax/log_softmax with a float32 result
    (https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32); CPU
    autocast leaves them in float16. The kernels are registered for this block only.
    """
    lib = torch.library.Library("aten", "IMPL")

    def to_fp32(op):
        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
                args = tuple(_fp32(a) for a in args)
                return op(*args, **kwargs)

        return kernel

    def with_fp32_dtype(op):
        def kernel(x, dim, dtype=None):
            with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU):
                if dtype is None and x.dtype in (torch.float16, torch.bfloat16):
                    dtype = torch.float32
                return op(x, dim, dtype)

        return kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib.impl("layer_norm", to_fp32(torch.ops.aten.layer_norm.default), "AutocastCPU")
        lib.impl("softmax.int", with_fp32_dtype(torch.ops.aten.softmax.int), "AutocastCPU")
        lib.impl("log_softmax.int", with_fp32_dtype(torch.ops.aten.log_softmax.int), "AutocastCPU")
    try:
        yield
    finally:
        lib._destroy()


def _fp32(a: Any) -> Any:
    if isinstance(a, torch.Tensor) and a.dtype in (torch.float16, torch.bfloat16):
        return a.float()
    return a
