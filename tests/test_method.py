"""The training methods as objects looked up by name (fitwhisper/method.py): `--method` or
its aliases (the earlier flags) select one, each one's own fields select it back, what it
loads, trains and refuses follows, and no code outside the registry reads the flags."""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from fitwhisper.method import FALLBACKS, METHODS, method_of, method_problems, with_method

SRC = Path(__file__).resolve().parents[1] / "src" / "fitwhisper"


def _options(**on) -> SimpleNamespace:
    return SimpleNamespace(
        **{"method": "full", "use_lora": False, "use_8bit": False, "use_4bit": False, **on}
    )


@pytest.mark.parametrize(
    ("on", "name"),
    [
        ({}, "full"),
        ({"use_lora": True}, "lora"),
        ({"use_8bit": True}, "8bit"),  # a quantised base trains LoRA even without --use_lora
        ({"use_4bit": True, "use_lora": True}, "4bit"),
        ({"method": "dora"}, "dora"),
        ({"method": "dora", "use_lora": True}, "dora"),  # --use_lora adds nothing to DoRA
        ({"method": "8bit-lora"}, "8bit"),
        ({"method": "4bit-lora", "use_4bit": True}, "4bit"),
    ],
)
def test_the_method_or_its_aliases_select_one_method(on: dict, name: str) -> None:
    assert method_of(_options(**on)) is METHODS[name]
    assert method_problems(_options(**on)) == []


@pytest.mark.parametrize(
    ("on", "problem"),
    [
        ({"use_8bit": True, "use_4bit": True}, "--use_8bit and --use_4bit are both set"),
        ({"method": "dora", "use_8bit": True}, "--method dora and --use_8bit"),
        ({"method": "lora", "use_4bit": True}, "--method lora and --use_4bit"),
        ({"method": "8bit-lora", "use_4bit": True}, "--method 8bit-lora and --use_4bit"),
        ({"method": "qlora"}, "--method 'qlora' is none of full, lora, dora"),  # the API's
    ],
)
def test_methods_that_contradict_each_other_are_named(on: dict, problem: str) -> None:
    (said,) = method_problems(_options(**on))
    assert said.startswith(problem)


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_is_selected_by_its_own_options_and_says_what_it_is(name: str) -> None:
    m = METHODS[name]
    assert method_of(_options(**m.options())) is m
    assert method_of(SimpleNamespace(training_method=name)) is m  # a MemoryRequest
    assert with_method(_options(use_8bit=True), m) == m.options()
    # Every method but full trains adapters on a frozen base; a quantised one always does.
    assert m.adapters == (name != "full") and (not m.quantised or m.adapters)
    aliases = {"lora": "--use_lora", "8bit": "--use_8bit", "4bit": "--use_4bit"}
    assert m.flag == {"full": None, "dora": "--method dora", **aliases}[name]
    refusal = m.weight_sharding_refusal("fsdp", "--fsdp full_shard")
    assert (refusal is None) == (m.base_bits is None)
    if refusal:
        why, hint = refusal
        assert why.startswith(f"{m.flag} with --fsdp full_shard: FSDP splits")
        assert "--deepspeed zero2" in hint


def test_heaviest_first_with_distinct_names_and_labels() -> None:
    assert list(METHODS) == ["full", "lora", "dora", "8bit", "4bit"]
    assert FALLBACKS == ("full", "lora", "8bit", "4bit")  # DoRA only when named
    assert [m.base_bits for m in METHODS.values()] == [None, None, None, 8, 4]
    assert dict(METHODS["dora"].peft_options) == {"use_dora": True}
    for field in ("title", "label", "option"):
        assert len({getattr(m, field) for m in METHODS.values()}) == len(METHODS)


def test_no_code_outside_the_registry_reads_the_method_flags() -> None:
    """The earlier flags are declared as options (config.py, plan's options) and read by
    `method_of` alone; anything else asks the method object."""
    read = re.compile(r"\.(use_lora|use_8bit|use_4bit)\b|\[\"(use_lora|use_8bit|use_4bit)\"\]")
    found = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in SRC.rglob("*.py")
        if path.name != "method.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if read.search(line)
    ]
    assert found == []


def test_recipe_and_search_space_are_the_method_objects(monkeypatch) -> None:
    """`train`'s recipe and `tune`'s space read the method object: an entry with its own
    learning rate and range gets them, with nothing else changed."""
    import dataclasses

    from fitwhisper.config import ModelConfig, TrainConfig
    from fitwhisper.recipes import with_recipe
    from fitwhisper.tune.space import Range, default_space

    own = dataclasses.replace(
        METHODS["dora"],
        learning_rate=2e-4,
        learning_rate_reason="its own",
        learning_rate_range=(1e-4, 1e-3),
    )
    monkeypatch.setitem(METHODS, "dora", own)
    train_cfg, why = with_recipe(ModelConfig(method="dora"), TrainConfig(), explicit=set())
    assert train_cfg.learning_rate == 2e-4 and why == {"learning_rate": "its own"}
    space = default_space("dora", by_epochs=False)
    assert space["learning_rate"] == Range(1e-4, 1e-3, log=True) and "lora_r" in space
    full = default_space("full", by_epochs=False)
    assert "lora_r" not in full and full["learning_rate"] == Range(3e-6, 1e-4, log=True)
    assert with_recipe(ModelConfig(), TrainConfig(), explicit=set())[0].learning_rate == 1e-5
