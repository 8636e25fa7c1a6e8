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
