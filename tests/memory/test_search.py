"""The fit search: budgets, the kept effective batch, fallbacks and the precision rule."""

from __future__ import annotations

import pytest

from fitwhisper.errors import ConfigError
from fitwhisper.memory.predict import GIB, MemoryRequest, predict_memory
from fitwhisper.memory.search import (
    gpu_precision,
    parse_memory,
    relative_time,
    search,
)


@pytest.mark.parametrize(
    "text, gib",
    [("8GB", 8), ("12GiB", 12), ("24 gb", 24), ("8192MiB", 8), ("40", 40), ("0.5GB", 0.5)],
)
def test_parse_memory_counts_gb_as_gib(text, gib):
    assert parse_memory(text) == int(gib * GIB)


@pytest.mark.parametrize("text", ["eight", "8 GX", "-8GB", "0GB", ""])
def test_parse_memory_rejects_non_sizes(text):
    with pytest.raises(ConfigError, match="--gpu_memory .* (is not a memory size|positive)"):
        parse_memory(text)


def test_precision_follows_trains_rule_for_the_gpu_named():
    assert gpu_precision("NVIDIA A100-SXM4-40GB") == "bf16"
    assert gpu_precision("Tesla T4") == "fp16"
    assert gpu_precision("V100") == "fp16"
    assert gpu_precision("fp16-only") == "fp16"
    assert gpu_precision("T4", bf16=True) == "bf16"  # an explicit choice wins, as in train
    assert gpu_precision("A100", fp16=True) == "fp16"


def _base(model_dir, **kw) -> MemoryRequest:
    return MemoryRequest(model=str(model_dir), precision="bf16", max_label_tokens=16, **kw)


def test_search_picks_a_fitting_plan_and_keeps_the_effective_batch(small_config_dir):
    base = _base(small_config_dir)
    # A budget in which batch 2 without checkpointing just fits (after the 10% margin).
    b2 = predict_memory(base, per_device_train_batch_size=2).total_bytes
    budget = int(b2 / 0.9) + 1
    plan = search(base, budget, effective_batch_size=16)
    r = plan.recommended
    assert r.per_device_train_batch_size * r.gradient_accumulation_steps == 16
    assert r.fits and r.predicted_bytes <= plan.usable_bytes < budget
    assert r.method == "full" and r.optim == "adamw_torch"
    # Nothing that fits is faster, and everything rejected as too big is too big.
    assert r.relative_time <= relative_time("full", 2, False)
    for c in plan.rejected:
        assert c.fits == (c.predicted_bytes <= plan.usable_bytes)
        assert c.reason.startswith("does not fit" if not c.fits else "fits")
        if c.fits:
            assert c.relative_time >= r.relative_time
    assert plan.settings()["gradient_accumulation_steps"] == r.gradient_accumulation_steps
    assert "effective batch = " in plan.format() and "runners-up:" in plan.format()


def test_a_tight_budget_falls_back_to_lora(small_config_dir):
    base = _base(small_config_dir)
    full = predict_memory(base, per_device_train_batch_size=1, gradient_checkpointing=True)
    lora = predict_memory(
        base, per_device_train_batch_size=1, gradient_checkpointing=True, training_method="lora"
    )
    assert lora.total_bytes < full.total_bytes
    budget = int((lora.total_bytes + full.total_bytes) / 2 / 0.9)
    with pytest.raises(ConfigError, match="nothing fits"):  # full only, AdamW only
        search(base, budget, optimizers=("adamw_torch",))
    plan = search(base, budget, methods=("full", "lora"), optimizers=("adamw_torch",))
    assert plan.recommended.method == "lora"
    assert plan.settings()["use_lora"] and not plan.settings()["use_8bit"]
    assert any(c.method == "full" and not c.fits for c in plan.rejected)


def test_nothing_fits_names_the_smallest_plan(small_config_dir):
    with pytest.raises(ConfigError) as e:
        search(_base(small_config_dir), GIB // 4, methods=("full", "lora", "8bit", "4bit"))
    msg = e.value.message
    assert msg.startswith("nothing fits 0.25 GiB (0.22 GiB after the 10% margin)")
    assert "the smallest plan tried, " in msg and "batch 1 x 16 accumulation" in msg
    assert "needs " in msg and "--allow_methods" in e.value.hint
