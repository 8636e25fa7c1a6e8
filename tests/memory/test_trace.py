"""The tracer's building blocks: CUDA autocast rules on a CPU build, live-byte accounting."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from fitwhisper.memory.trace import StepTrace, _autocast, _LiveStorages


def _dtypes():
    x = torch.empty(2, 5, 8)
    w = torch.nn.Parameter(torch.empty(8, 8))
    ln = torch.nn.LayerNorm(8)
    y = F.linear(x, w)
    return y.dtype, ln(y).dtype, F.log_softmax(y, -1).dtype, torch.softmax(y, -1).dtype


def test_cuda_autocast_rules_apply_inside_the_trace_only():
    with FakeTensorMode():
        with _autocast(torch.float16, cuda=True):
            assert _dtypes() == (torch.float16, torch.float32, torch.float32, torch.float32)
        with _autocast(torch.float16, cuda=False):  # CPU autocast keeps them in float16
            assert _dtypes() == (torch.float16,) * 4


def test_live_bytes_follow_allocations_frees_and_in_place_updates():
    trace = StepTrace()
    with FakeTensorMode():
        held = torch.empty(1000)  # exists before the trace: not an allocation
        tracker = _LiveStorages(trace, cuda_rounding=True)
        tracker.hold(iter([held]))
        with tracker:
            a = torch.empty(100)  # 400 B, rounded to 512
            b = a.view(10, 10)  # a view: no new storage
            held.mul_(2)  # in place on a held tensor: nothing new
            c = torch.empty(1000)  # 4000 B -> 4096
            del a, b
            del c
    sizes = [(sign, trace.sizes[i]) for _, sign, i in trace.events]
    assert sizes == [(1, 512), (1, 4096), (-1, 512), (-1, 4096)]


def test_a_layerdrop_test_on_a_fake_tensor_keeps_the_layer():
    """Whisper's LayerDrop before transformers 5.2x compares a random number in training even
    at layerdrop 0; a fake tensor has no value, so the trace keeps the layer (its peak)."""
    trace = StepTrace()
    with FakeTensorMode():
        x = torch.empty(4)
        with _LiveStorages(trace, cuda_rounding=False):
            dropped = bool(torch.rand([]) < 0.0)
            y = x * 2  # the layer's work still traced
        assert not dropped
        assert y.shape == (4,)
    assert trace.sizes == [4, 1, 16]  # the random number, the comparison, the layer
