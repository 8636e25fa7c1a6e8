"""The training methods as objects looked up by name (fitwhisper/method.py): the flags select
one, each one's own fields select it back, and what it loads, trains and refuses follows."""

from types import SimpleNamespace

import pytest

from fitwhisper.method import METHODS, method_of


def _flags(**on: bool) -> SimpleNamespace:
    return SimpleNamespace(**{"use_lora": False, "use_8bit": False, "use_4bit": False, **on})


@pytest.mark.parametrize(
    ("on", "name"),
    [
        ({}, "full"),
        ({"use_lora": True}, "lora"),
        ({"use_8bit": True}, "8bit"),  # a quantised base trains LoRA even without --use_lora
        ({"use_4bit": True, "use_lora": True}, "4bit"),
        ({"use_8bit": True, "use_4bit": True}, "4bit"),  # validation refuses both; 4-bit reads
    ],
)
def test_the_flags_select_one_method(on: dict, name: str) -> None:
    assert method_of(_flags(**on)) is METHODS[name]


@pytest.mark.parametrize("name", list(METHODS))
def test_each_method_is_selected_by_its_own_options_and_says_what_it_is(name: str) -> None:
    m = METHODS[name]
    assert method_of(_flags(**m.options())) is m
    assert m.flags == {k: v for k, v in m.options().items() if v}
    # Every method but full trains adapters on a frozen base; a quantised one always does.
    assert m.adapters == (name != "full") and (not m.quantised or m.adapters)
    assert m.flag == (None if name == "full" else f"--use_{name}")
    refusal = m.weight_sharding_refusal("fsdp", "--fsdp full_shard")
    assert (refusal is None) == (m.base_bits is None)
    if refusal:
        why, hint = refusal
        assert why.startswith(f"{m.flag} with --fsdp full_shard: FSDP splits")
        assert "--deepspeed zero2" in hint


def test_heaviest_first_with_distinct_names_and_labels() -> None:
    assert list(METHODS) == ["full", "lora", "8bit", "4bit"]
    assert [m.base_bits for m in METHODS.values()] == [None, None, 8, 4]
    for field in ("title", "label"):
        assert len({getattr(m, field) for m in METHODS.values()}) == len(METHODS)
