"""Precision follows the GPU unless the user says; impossible choices are named."""

from __future__ import annotations

import pytest

from fitwhisper.precision import choose_precision, precision_problems

AMPERE = {"cuda": True, "bf16_supported": True}
TURING = {"cuda": True, "bf16_supported": False}
CPU = {"cuda": False, "bf16_supported": False}


@pytest.mark.parametrize(
    ("fp16", "bf16", "machine", "expected"),
    [
        (None, None, AMPERE, "bf16"),  # auto prefers bf16: no loss scaling, no overflow
        (None, None, TURING, "fp16"),
        (None, None, CPU, "fp32"),
        (True, None, AMPERE, "fp16"),  # an explicit choice wins
        (None, False, AMPERE, "fp16"),  # bf16 declined: the GPU still gets mixed precision
        (False, False, AMPERE, "fp32"),
        (False, None, TURING, "fp32"),
    ],
)
def test_choose_precision(fp16, bf16, machine, expected) -> None:
    assert choose_precision(fp16, bf16, **machine) == expected


def test_precision_problems() -> None:
    assert precision_problems(None, None, **CPU) == []
    assert precision_problems(True, True, **AMPERE) == ["--fp16 and --bf16 are both set; pick one"]
    # fp16 mixed precision is CUDA-only (no gradient scaler on CPU); bf16 autocasts on CPU.
    assert precision_problems(True, None, **CPU) == [
        "--fp16 needs a CUDA GPU and none is visible (fp16 mixed precision is CUDA-only); "
        "use --bf16 or leave both unset to train in fp32 on CPU"
    ]
    assert precision_problems(None, True, **CPU) == []
    assert choose_precision(None, True, **CPU) == "bf16"
    assert "Ampere or newer" in precision_problems(None, True, **TURING)[0]


@pytest.mark.parametrize(
    ("capability", "native"), [((7, 5), False), ((8, 0), True), ((9, 0), True), ((6, 1), False)]
)
def test_bf16_is_judged_by_the_training_gpus_compute_capability(
    monkeypatch, capability, native
) -> None:
    """A Turing card emulates bf16 (torch.cuda.is_bf16_supported() says yes); auto picks
    fp16 there. Under torchrun the GPU asked about is LOCAL_RANK's, not the current one."""
    import torch

    from fitwhisper import precision

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_capability", lambda i=None: asked.append(i) or capability
    )
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert precision.hardware() == {"cuda": True, "bf16_supported": native}
    assert asked == [3]
    assert precision.run_precision(None, None) == ("bf16" if native else "fp16")
