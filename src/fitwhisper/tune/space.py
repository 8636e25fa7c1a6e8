"""The search space of `fitwhisper tune`: defaults per training method, changed one option
at a time by `--search NAME=SPEC`.

Every name is a `train` option, so a trial is the user's options with a few replaced and
the best trial's options are a config `train --config` takes. The default ranges follow
what fine-tuning Whisper needs per method: full fine-tuning moves every weight and wants a
small learning rate (3e-6 to 1e-4 around the usual 1e-5); LoRA trains a few new weights
from zero and wants a larger one (1e-5 to 3e-3 around the usual 1e-3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fitwhisper.errors import ConfigError
from fitwhisper.method import METHODS, Method


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    log: bool = False
    integer: bool = False

    def contains(self, value: Any) -> bool:
        inside = self.low <= value <= self.high
        return inside and (not self.integer or float(value).is_integer())

    def suggest(self, trial, name: str):
        if self.integer:
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(name, self.low, self.high, log=self.log)

    def distribution(self):
        from optuna.distributions import FloatDistribution, IntDistribution

        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(self.low, self.high, log=self.log)

    def __str__(self) -> str:
        return f"{self.low:g}..{self.high:g}" + (":log" if self.log else "")


@dataclass(frozen=True)
class Choice:
    values: tuple

    def contains(self, value: Any) -> bool:
        return value in self.values

    def suggest(self, trial, name: str):
        return trial.suggest_categorical(name, list(self.values))

    def distribution(self):
        from optuna.distributions import CategoricalDistribution

        return CategoricalDistribution(list(self.values))

    def __str__(self) -> str:
        return "|".join(str(v) for v in self.values)


Dimension = Range | Choice

# Options a search may change: those that shape what the model learns, not what the run
# produces (paths, logging) or how memory is spent (the plan chooses batch and accumulation).
SEARCHABLE = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "warmup_ratio",
    "weight_decay",
    "lr_scheduler_type",
    "augment",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "freeze_encoder",
    "full_window_share",
    "seed",
)

_COMMON: dict[str, Dimension] = {
    "warmup_ratio": Range(0.0, 0.2),
    "weight_decay": Range(0.0, 0.1),
}
# Searched beside the learning rate for every method that trains adapters.
_ADAPTERS: dict[str, Dimension] = {
    "lora_r": Choice((8, 16, 32, 64)),
    "lora_alpha": Choice((16, 32, 64)),
    "lora_dropout": Range(0.0, 0.1),
}


def default_space(method: Method, *, by_epochs: bool) -> dict[str, Dimension]:
    """The default dimensions for `method`; the number of epochs too when the run trains by
    epochs (with --max_steps the user fixed the length)."""
    trains = METHODS[method]
    space: dict[str, Dimension] = {"learning_rate": Range(*trains.learning_rate_range, log=True)}
    space |= (_ADAPTERS if trains.adapters else {}) | _COMMON
    if by_epochs:
        space["num_train_epochs"] = Range(1, 5, integer=True)
    return space


def apply_overrides(
    space: dict[str, Dimension], specs: list[str]
) -> tuple[dict[str, Dimension], dict[str, Any]]:
    """`space` changed by each `--search NAME=SPEC`; returns it and the options fixed by
    NAME=VALUE.

    Raises:
        ConfigError: every spec that cannot be read, all listed at once.
    """
    space, fixed = dict(space), {}
    parsed_specs, problems = read_specs(specs)
    if problems:
        raise ConfigError(
            "the search space cannot be read: " + "; ".join(problems),
            hint=SPEC_HINT,
        )
    for name, parsed in parsed_specs:
        space.pop(name, None)
        if parsed is None:  # off
            continue
        if isinstance(parsed, (Range, Choice)):
            space[name] = parsed
        else:
            fixed[name] = parsed
    return space, fixed


SPEC_HINT = (
    "NAME=LOW..HIGH[:log], NAME=A|B|C, NAME=VALUE or NAME=off, each value one the option "
    "itself takes; `fitwhisper tune --show_space` prints the defaults"
)


def read_specs(specs: list[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """Each `--search NAME=SPEC` read, and every value it names checked as the option itself
    checks it (its type, choices and range: `fitwhisper.option_ranges`), before anything
    loads; returns (name, Range | Choice | value | None) per spec, and one sentence per
    problem, all of them."""
    parsed_specs, problems = [], []
    for spec in specs:
        name, sep, text = spec.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not text:
            problems.append(f"--search {spec}: write NAME=SPEC, e.g. learning_rate=1e-5..1e-3:log")
            continue
        if name not in SEARCHABLE:
            problems.append(
                f"--search {spec}: {name} is not searchable; one of " + ", ".join(SEARCHABLE)
            )
            continue
        try:
            parsed = parse_spec(text)
        except ValueError as e:
            problems.append(f"--search {spec}: {e}")
            continue
        if found := _value_problems(name, parsed):
            problems += [f"--search {spec}: {why}" for why in found]
            continue
        parsed_specs.append((name, parsed))
    return parsed_specs, problems


def _value_problems(name: str, parsed: Dimension | Any | None) -> list[str]:
    """Why the values of a spec for option `name` are not ones the option takes, in the
    words its flag and config files use."""
    import dataclasses
    import typing

    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.option_ranges import expected, field_problem, typed, unwrap

    if parsed is None:
        return []
    cls = next(c for c in (ModelConfig, TrainConfig, DataConfig) if name in c.__dataclass_fields__)
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    hint = typing.get_type_hints(cls)[name]
    kind, choices, _ = unwrap(hint)
    if isinstance(parsed, Range) and (choices is not None or kind not in (int, float)):
        return [f"{name} takes {expected(kind, choices)}, not a range"]
    values = (
        parsed.values
        if isinstance(parsed, Choice)
        else (parsed.low, parsed.high)
        if isinstance(parsed, Range)
        else (parsed,)
    )
    problems = []
    for value in values:
        try:
            value = typed(value, hint)
        except ValueError as e:
            problems.append(f"{name} takes {e}, got {value!r}")
            continue
        if why := field_problem(f, hint, value):
            problems.append(why)
    return problems


def parse_spec(text: str) -> Dimension | Any | None:
    """LOW..HIGH[:log] -> Range (integers when both ends are), A|B -> Choice, off -> None,
    anything else -> a fixed value."""
    if text == "off":
        return None
    if ".." in text:
        body, _, scale = text.partition(":")
        if scale not in ("", "log"):
            raise ValueError(f"unknown scale :{scale} (only :log)")
        low_text, high_text = body.split("..", 1)
        low, high = _number(low_text), _number(high_text)
        if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):
            raise ValueError("a range needs two numbers")
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ValueError(f"{low_text}..{high_text} is not a range from low to high")
        if scale == "log" and low <= 0:
            raise ValueError("a log scale needs a positive low end")
        return Range(
            low, high, log=scale == "log", integer=all(isinstance(v, int) for v in (low, high))
        )
    if "|" in text:
        return Choice(tuple(_number(v) for v in text.split("|")))
    return _number(text)


def _number(text: str):
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def describe(space: dict[str, Dimension], fixed: dict[str, Any]) -> str:
    lines = [f"  {name:<20} {dim}" for name, dim in space.items()]
    lines += [f"  {name:<20} {value} (fixed)" for name, value in fixed.items()]
    return "\n".join(lines)


def own_values(model_cfg, train_cfg, space: dict[str, Dimension]) -> dict[str, Any]:
    """The user's own value of each searched option (the study's first trial runs them,
    inside the space or not)."""
    values = {}
    for name, dim in space.items():
        value = getattr(model_cfg if hasattr(model_cfg, name) else train_cfg, name)
        integer = isinstance(dim, Range) and dim.integer and dim.contains(value)
        values[name] = int(value) if integer else value
    return values
