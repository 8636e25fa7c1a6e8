"""What each option may be, declared on its dataclass field and checked in one place.

Every number and path option of every command says what values it takes in its field's
metadata, next to its help text; `problems(options)` checks an options object against them.
The command line checks every options object it builds (`fitwhisper.cli.flags.build_config`:
flags and `--config` files alike) and raises one ConfigError before anything loads;
`train`'s `validate` checks its three for callers of the Python API. It imports nothing of
fitwhisper, so every layer may declare with it. A test (tests/cli/test_every_option.py)
fails for any int or float field that declares nothing, so a new option cannot forget it.

Field metadata read here:
    min, max      inclusive bounds (`"min": 1`: at least 1)
    above, below  exclusive bounds (`"above": 0`: a positive number)
    also          values allowed outside the bounds, with what they mean
                  (`{-1: "to train by epochs"}`)
    none          what None means for an optional number, for the message (`"all"`)
    why           why the bounds are what they are, for the message
    unbounded     the reason any number is fine (still finite: no NaN or inf)
    items         for a list of numbers (bounds apply to each): how many it must hold
                  (2 for a LOW,HIGH range, which must not run backwards); absent: one or more
    path          what a path option names: "file" or "folder" (an input that must be one
                  when it exists), "new_file" or "new_folder" (an output: not the other
                  kind when it exists), "any" (a file or a folder), "model" (a folder,
                  Hub id or offline name: never a file). The empty text is never a path.
    files_among_others  for a new_folder: it receives files among others' (transcripts
                  beside recordings, a cache), so it may hold the command's inputs
                  (`fitwhisper.output_guard`'s `files_into`)

Floats must be finite whatever their bounds.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal

BOUNDS = ("min", "max", "above", "below")
# Declarations several options share: `metadata={**WHISPER_TOKENS, "help": ...}`.
WHISPER_TOKENS = {"min": 1, "max": 448, "why": "Whisper's decoder holds 448 tokens"}
SHARE = {"min": 0, "below": 1}  # a share of something that cannot be all of it
FRACTION = {"min": 0, "max": 1}
COUNT_OR_ALL = {"min": 1, "none": "all"}  # at most this many; none: all of them
# Past a machine's CPUs (and C libraries' 32-bit counts): a careless number, refused.
PROCESSES = {"min": 0, "max": 1024, "why": "a count of processes or threads"}
SEED = {"min": 0, "max": 2**32 - 1, "why": "the random generators take 32 bits"}

# Every metadata key that says which values a field takes.
VALUE_KEYS = (*BOUNDS, "also", "none", "why", "unbounded", "path", "items")
PATH_KINDS = ("file", "folder", "new_file", "new_folder", "any", "model")


def problems(options: Any, only: tuple[str, ...] | None = None) -> list[str]:
    """One sentence per field of dataclass `options` outside its declared values (`only`:
    just these fields)."""
    hints = typing.get_type_hints(type(options))
    found = []
    for f in dataclasses.fields(options):
        if only is not None and f.name not in only:
            continue
        why = field_problem(f, hints[f.name], getattr(options, f.name))
        if why:
            found.append(why)
    return found


def field_problem(f: dataclasses.Field, hint: Any, value: Any) -> str | None:
    """Why `value` is not allowed for field `f` (of type `hint`), or None."""
    meta = f.metadata
    if value is None:
        return None  # the type allows None or the field would not hold it
    if meta.get("path"):
        values = value if isinstance(value, list) else [value]
        return next((w for v in values if (w := path_problem(flag_name(f), meta["path"], v))), None)
    if isinstance(value, list) and any(k in meta for k in BOUNDS):
        return numbers_problem(flag_name(f), meta, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value in meta.get("also", {}):
        return None
    finite = not isinstance(value, float) or math.isfinite(value)
    if finite and in_bounds(meta, value):
        return None
    return f"{flag_name(f)} must be {describe(meta)}, got {value}" + (
        "" if finite else " (not a finite number)"
    )


def numbers_problem(flag: str, meta: typing.Mapping[str, Any], values: list) -> str | None:
    """Why `values` (numbers, or text from a flag) cannot be list option `flag`'s, or None."""
    count = meta.get("items")
    example = meta.get("metavar", "A,B")
    if not values or (count is not None and len(values) != count):
        wanted = f"{count} numbers" if count else "one or more numbers"
        return f"{flag} takes {wanted} separated by commas ({example}), got {len(values)}"
    numbers = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            return f"{flag} takes numbers separated by commas ({example}), got {v!r}"
        if not (math.isfinite(x) and in_bounds(meta, x)):
            return f"{flag} must hold numbers {describe(meta)}, got {v}"
        numbers.append(x)
    if count == 2 and numbers[0] > numbers[1]:
        return f"{flag} is a range LOW,HIGH; got {numbers[0]:g} above {numbers[1]:g}"
    return None


def in_bounds(meta: typing.Mapping[str, Any], value: float) -> bool:
    """Whether `value` lies within the bounds in `meta` (written so that NaN never does)."""
    lo, hi, above, below = (meta.get(k) for k in BOUNDS)
    return (
        (lo is None or value >= lo)
        and (hi is None or value <= hi)
        and (above is None or value > above)
        and (below is None or value < below)
        and value == value  # NaN
    )


def describe(meta: typing.Mapping[str, Any]) -> str:
    """The values the bounds in `meta` allow, in words: `at least 1`, `in [0, 1)`."""
    lo, hi, above, below = (meta.get(k) for k in BOUNDS)
    left = lo if lo is not None else above
    right = hi if hi is not None else below
    if left is not None and right is not None:
        text = f"in {'[' if lo is not None else '('}{left}, {right}{']' if hi is not None else ')'}"
    elif lo == 0:
        text = "0 or more"
    elif lo is not None:
        text = f"at least {lo}"
    elif above == 0:
        text = "a positive number"
    elif above is not None:
        text = f"above {above}"
    elif hi is not None:
        text = f"at most {hi}"
    elif below is not None:
        text = f"below {below}"
    else:
        text = "a finite number"
    for value, meaning in meta.get("also", {}).items():
        text += f", or {value} {meaning}"
    if meta.get("none"):
        text += f" (or none for {meta['none']})"
    if meta.get("why"):
        text += f" ({meta['why']})"
    return text


def path_problem(flag: str, kind: str, value: str) -> str | None:
    """Why text `value` cannot be the `kind` of path option `flag` is (see the module
    docstring), or None. Reads the file system, writes nothing; a missing input is left to
    the command, which knows what to say about it."""
    if not str(value).strip():
        return f"{flag} is empty; give a {_NOUNS[kind]}"
    p = Path(value).expanduser()
    if kind in ("file", "new_file") and p.is_dir():
        return f"{flag} {value} is a folder, not a file"
    if kind in ("folder", "new_folder") and p.exists() and not p.is_dir():
        return f"{flag} {value} is a file, not a folder"
    if kind == "model" and p.exists() and not p.is_dir():
        return f"{flag} {value} is a file; a model is a folder, a Hub id or an offline name"
    if kind in ("new_file", "new_folder"):
        parent = next((a for a in p.parents if a.exists()), None)
        if parent is not None and not parent.is_dir():  # the wording of fitwhisper.output_guard
            if kind == "new_file":
                return f"{flag} {value}: {parent} is not a folder"
            return f"{flag} {value} cannot be made: {parent} is a file, not a folder"
    return None


_NOUNS = {
    "file": "file",
    "folder": "folder",
    "new_file": "file",
    "new_folder": "folder",
    "any": "file or folder",
    "model": "model (a folder, Hub id or offline name)",
}


def flag_name(f: dataclasses.Field) -> str:
    """How the user names field `f`: `--name`, or the placeholder of a positional argument."""
    if f.metadata.get("positional"):
        return f.metadata.get("metavar", f.name.upper())
    return f"--{f.name}"


def declares_values(f: dataclasses.Field) -> bool:
    """Whether field `f` says which values it takes (bounds, `unbounded` or `path`)."""
    meta = f.metadata
    return any(k in meta for k in (*BOUNDS, "unbounded", "path"))


# --- values given as text or YAML, as the field's type -------------------------------------


def typed(value: Any, hint: Any) -> Any:
    """A config-file value as the field's type, the way its flag would parse it; ValueError
    naming the expected type otherwise (YAML reads `1e-5` as text, `no` as false)."""
    kind, choices, optional = unwrap(hint)
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null")):
        if optional:
            return None
        raise ValueError(expected(kind, choices))
    if choices is not None:
        if value not in choices:
            raise ValueError(expected(kind, choices))
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ValueError("true or false")
    if kind in (int, float) and not isinstance(value, bool):
        number = value
        if isinstance(value, str):
            try:
                number = float(value.strip()) if kind is float else int(value.strip())
            except ValueError:
                raise ValueError(expected(kind, None)) from None
        if isinstance(number, int) or (kind is float and isinstance(number, float)):
            return kind(number)
        if isinstance(number, float) and number.is_integer():  # `max_steps: 100.0`
            return int(number)
        raise ValueError(expected(kind, None))
    if kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if kind is list:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            return [str(v) for v in value]
    if kind in (int, float, str, list):
        raise ValueError(expected(kind, None))
    return value  # a type the flags do not parse either


def expected(kind: type, choices: list[Any] | None) -> str:
    if choices is not None:
        return "one of " + ", ".join(str(c) for c in choices)
    names = {
        int: "a whole number",
        float: "a number",
        str: "text",
        bool: "true or false",
        list: "a list (or a comma list)",
    }
    return names.get(kind, kind.__name__)


def unwrap(hint: Any) -> tuple[type, list[Any] | None, bool]:
    """(base type, choices, optional) of a field's type hint."""
    optional = False
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
        origin = typing.get_origin(hint)
    if origin is Literal:
        choices = list(typing.get_args(hint))
        return type(choices[0]), choices, optional
    if origin is list:
        return list, None, optional
    return hint, None, optional
