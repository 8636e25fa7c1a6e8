"""The lowest versions pyproject admits are ones the code runs on."""

from __future__ import annotations

import re
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _floor(package: str) -> tuple[int, ...]:
    # tomllib is 3.11+ and the project supports 3.10: the dependency line is plain enough.
    text = PYPROJECT.read_text()
    m = re.search(rf'"{package}>=([0-9.]+)', text)
    assert m, f"{package} has no >= floor in pyproject.toml"
    return tuple(int(x) for x in m.group(1).split("."))


def test_torch_floor_has_what_the_code_uses() -> None:
    """torch.OutOfMemoryError (the OOM back-off) arrived in 2.5; transformers 5 needs 2.6."""
    import torch

    assert _floor("torch") >= (2, 6)
    assert hasattr(torch, "OutOfMemoryError")
    assert hasattr(torch.nn.utils, "get_total_norm")  # 2.6+: the divergence guard's check


def test_torch_floor_is_what_transformers_asks_for() -> None:
    from transformers.dependency_versions_table import deps

    m = re.fullmatch(r"torch>=([0-9.]+)", deps["torch"])
    assert m, deps["torch"]
    assert _floor("torch") >= tuple(int(x) for x in m.group(1).split("."))
