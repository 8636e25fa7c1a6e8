"""One memory fit: `plan`, `train --auto_fit`, each `tune` trial and the presets table plan
through `memory.fit.plan_fit`, and nothing else calls the planner's search."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fitwhisper
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig

SRC = Path(fitwhisper.__file__).parent


class Reached(BaseException):
    """Raised by the spy: the entry point got to plan_fit (what it does next is tested
    elsewhere: tests/memory/test_plan_fit.py, test_plan_cli.py, tests/tune)."""


def test_plan_auto_fit_tune_and_presets_all_use_plan_fit(small_config_dir, monkeypatch):
    import fitwhisper.memory.fit as fit
    import fitwhisper.memory.search as search_module
    import fitwhisper.precision as precision
    from fitwhisper.cli import main
    from fitwhisper.memory.presets import preset_cell
    from fitwhisper.tune.trials import fitted

    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        raise Reached

    monkeypatch.setattr(fit, "plan_fit", spy)
    model = str(small_config_dir)
    with pytest.raises(Reached):
        main(["plan", "--model", model, "--gpu_memory", "8GB", "--max_label_tokens", "16"])
    assert len(calls) == 1, "fitwhisper plan"

    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(search_module, "detected_gpu_memory", lambda: 2**30)
    train_cfg = TrainConfig(auto_fit=True, per_device_train_batch_size=4,
                            gradient_accumulation_steps=2)  # fmt: skip
    with pytest.raises(Reached):
        fit.resolve_plan(ModelConfig(model=model), DataConfig(), train_cfg, {"model"})
    assert calls[-1]["effective_batch_size"] == 8, "train --auto_fit"

    with pytest.raises(Reached):
        fitted(ModelConfig(model=model, method="lora"), DataConfig(), TrainConfig(), 2**30)
    assert calls[-1]["methods"] == ("lora",), "a tune trial"

    with pytest.raises(Reached):
        preset_cell(model, "full", 8)
    assert len(calls) == 4, "the presets table"


def test_nothing_but_plan_fit_calls_the_search():
    """A search of src/ for `memory.search.search` imported or called outside plan_fit."""
    found = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "fitwhisper.memory.search":
                if any(a.name == "search" for a in node.names):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == ["memory/fit.py:" + str(_plan_fit_import_line())], found


def _plan_fit_import_line() -> int:
    import inspect

    from fitwhisper.memory import fit

    lines, start = inspect.getsourcelines(fit.plan_fit)
    offset = next(i for i, x in enumerate(lines) if "import search" in x)
    return start + offset
