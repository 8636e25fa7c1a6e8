"""Command-line flags and `--config run.yaml` files from the option dataclasses.

Every command's flags come from here: each field of an option dataclass becomes
`--field_name` (or a positional argument) with the field's help text, so the flags, the YAML
files and the saved run record cannot drift apart. Precedence: a flag given on the command
line beats the config file, which beats the dataclass default.

Field metadata understood here (all optional):
    help        the help text (required by tests for every field that becomes a flag)
    aliases     more flag spellings (`--model_name_or_path`, `--gpu-memory`)
    negative_aliases  more spellings of `--no-NAME` for a bool (`--no_condition_on_...`)
    const       the value of the bare flag (`--resume` means `latest`)
    positional  a positional argument instead of a flag; `nargs` as argparse's
    required    the flag must be given
    count       an int flag counted by repetition (`-v -v`)
    switch      a bool flag that takes no value (`--json`, not `--json true`): safe before
                positional arguments
    metavar     the placeholder shown in help
    min, max, above, below, also, none, why, unbounded, path
                the values the option takes, checked by `build_config`
                (see `fitwhisper.option_ranges`)
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from fitwhisper.errors import ConfigError
from fitwhisper.option_ranges import typed as _typed
from fitwhisper.option_ranges import unwrap as _unwrap

T = TypeVar("T")

# Keys of a run record (RUN/fitwhisper.yaml) that are not options: skipped when it is reused.
_RUN_RECORD_PARTS = ("versions", "resolved", "code_revision", "manifests")


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    title: str | None = None,
    *,
    only: tuple[str, ...] | None = None,
    description: str | None = None,
) -> None:
    """Add one flag (or positional argument) per field of dataclass `cls`, in a help group
    named `title` (the parser itself when None) described by `description` (default: the
    first line of the class docstring); `only` picks some fields."""
    target: Any = parser
    if title is not None:
        description = description or (cls.__doc__ or "").strip().splitlines()[0]
        target = parser.add_argument_group(title, description)
    hints = typing.get_type_hints(cls)
    for f in option_fields(cls, only):
        _add_field(target, f, hints[f.name])


def option_fields(cls: type, only: tuple[str, ...] | None = None) -> list[dataclasses.Field]:
    """The fields of `cls` that become flags: all, or those named in `only` (in that order)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return [fields[n] for n in only] if only is not None else list(fields.values())


def _add_field(group: Any, f: dataclasses.Field, hint: Any) -> None:
    kind, choices, optional = _unwrap(hint)
    default = _default_of(f)
    meta = f.metadata
    # argparse %-formats help text; a literal percent sign must not break it.
    help_text = meta.get("help", "").replace("%", "%%")
    if meta.get("positional"):
        group.add_argument(
            f.name,
            metavar=meta.get("metavar", f.name.upper()),
            nargs=meta.get("nargs"),
            type=None if kind in (list, str) else _parser_for(kind, optional),
            help=help_text,
            **({"default": default} if meta.get("nargs") in ("?", "*") else {}),
        )
        return
    # Aliases are the names the user's scripts and blog posts use (--model_name_or_path).
    flags = [f"--{f.name}", *meta.get("aliases", ())]
    flags.sort(key=lambda flag: flag.startswith("--"))  # -v before --verbose, as usual
    # SUPPRESS: absent flags stay absent, so a config file's value is not overwritten and
    # `build_config` fills in the dataclass default.
    common: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS}
    if meta.get("required"):
        common = {"dest": f.name, "required": True}
    if meta.get("count"):
        group.add_argument(*flags, action="count", help=help_text, **common)
        return
    if meta.get("switch"):  # a bare flag, never followed by a value: store_true
        group.add_argument(*flags, action="store_true", help=help_text, **common)
        return
    if kind is bool:
        shown = "auto" if default is None else "on" if default else "off"
        negated = [f"--no-{flag[2:]}" for flag in flags if flag.startswith("--")]
        negated += meta.get("negative_aliases", [])
        group.add_argument(
            *flags,
            action=_BoolAction,
            help=f"{help_text} (default: {shown}; {negated[0]} turns it off)",
            **common,
        )
        group.add_argument(*negated, action="store_false", help=argparse.SUPPRESS, **common)
        return
    _add_valued(group, f, flags, common, kind, choices, optional, default, help_text)


def _add_valued(group, f, flags, common, kind, choices, optional, default, help_text) -> None:
    meta = f.metadata
    if kind is list:  # list[str] (or numbers: see option_ranges): a comma list, or repeated
        shown = "none" if default is None else ",".join(str(d) for d in default)
        if any(k in meta for k in ("min", "max", "above", "below")):
            from fitwhisper.option_ranges import describe

            shown = f"{shown}; each {describe(meta)}"
        group.add_argument(
            *flags,
            action="extend",
            # A path given as the empty text is a mistake, not "none".
            type=_comma_paths if meta.get("path") else _comma_list,
            metavar=meta.get("metavar", "A,B"),
            help=f"{help_text} (default: {shown})",
            **common,
        )
        return
    # "shown_default": words for a default that depends on other options (recipes.py).
    shown = meta.get("shown_default", "none" if default is None else default)
    if kind in (int, float) and not choices:  # the values it takes, as build_config checks
        from fitwhisper.option_ranges import BOUNDS, describe

        if any(k in meta for k in BOUNDS):
            shown = f"{shown}; {describe(meta)}"
    if "const" in meta:  # a bare flag means this value (`--resume`)
        common.update(nargs="?", const=meta["const"])
    group.add_argument(
        *flags,
        type=_parser_for(kind, optional),
        choices=choices,
        metavar=meta.get("metavar") or (None if choices else kind.__name__.upper()),
        help=help_text if meta.get("required") else f"{help_text} (default: {shown})",
        **common,
    )


class _BoolAction(argparse.Action):
    """`--flag`, or `--flag true|false` (also `--flag=True`, as the user's scripts write it)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", metavar="BOOL", **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, True if values is None else _to_bool(parser, values))


def _to_bool(parser: argparse.ArgumentParser, text: str) -> bool:
    low = text.lower()
    if low in ("true", "yes", "1", "on"):
        return True
    if low in ("false", "no", "0", "off"):
        return False
    parser.error(f"expected true or false, got {text!r}")
    raise AssertionError("unreachable")  # parser.error exits


def build_config(
    cls: type[T], args: argparse.Namespace, file_values: dict[str, Any] | None = None
) -> T:
    """An instance of `cls` from defaults, then the config file's section, then the flags;
    ConfigError, before anything loads, for any value outside what its field declares
    (`fitwhisper.option_ranges`: bounds of numbers, kinds of paths)."""
    from fitwhisper.option_ranges import problems

    file_values = file_values or {}
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in file_values.items() if k in names}
    values.update({k: v for k, v in vars(args).items() if k in names})
    built = cls(**values)
    if found := problems(built):
        raise ConfigError(
            "; ".join(found),
            hint=f"fix the value{'s' if len(found) > 1 else ''}; `--help` says what each "
            "option takes",
        )
    return built


def build_configs(
    args: argparse.Namespace,
    classes: Sequence[type],
    file_values: Sequence[dict[str, Any]] | None = None,
    also: Callable[[list[Any]], list[str]] | None = None,
) -> list[Any]:
    """`build_config` for each of `classes` (with its config-file section from
    `file_values`), and every problem of all of them, with those `also(built)` finds (None
    in place of an options object that did not build), in one ConfigError: a command line
    with four mistakes hears of four at once."""
    built, problems = [], []
    for i, cls in enumerate(classes):
        try:
            built.append(build_config(cls, args, (file_values or [{}] * len(classes))[i]))
        except ConfigError as e:
            built.append(None)
            problems.append(e.message)
    if also is not None:
        problems += also(built)
    if problems:
        raise ConfigError(
            "; ".join(problems),
            hint=f"fix the value{'s' if len(problems) > 1 else ''}; `--help` says what each "
            "option takes",
        )
    return built


def load_config_file(path: str | Path, sections: dict[str, type]) -> dict[str, dict[str, Any]]:
    """Read a YAML config: either flat (`learning_rate: 1e-5`) or in sections named like the
    run record (`model:`, `data:`, `train:`). Unknown keys are an error, all listed at once."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}", "check the path") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {p} is not valid YAML: {e}", "fix the YAML syntax") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {p} must hold a mapping of option: value", None)

    field_section = {
        f.name: section for section, cls in sections.items() for f in dataclasses.fields(cls)
    }
    out: dict[str, dict[str, Any]] = {s: {} for s in sections}
    unknown: list[str] = []
    for key, value in raw.items():
        if key in sections and isinstance(value, dict):
            for k, v in value.items():
                (out[key].__setitem__(k, v) if field_section.get(k) == key else unknown.append(k))
        elif key in field_section:
            out[field_section[key]][key] = value
        elif key not in _RUN_RECORD_PARTS:
            unknown.append(str(key))
    if unknown:
        raise ConfigError(
            f"config file {p} has unknown options: {', '.join(sorted(unknown))}",
            "remove them or fix their spelling; `--help` lists every option",
        )
    wrong: list[str] = []
    for section, values in out.items():
        hints = typing.get_type_hints(sections[section])
        for key, value in values.items():
            try:
                values[key] = _typed(value, hints[key])
            except ValueError as e:
                wrong.append(f"{key}: expected {e}, got {value!r}")
    if wrong:
        raise ConfigError(
            f"config file {p} has values of the wrong type: {'; '.join(wrong)}",
            "fix them (quote text that YAML reads as another type, e.g. language: 'no'); "
            "`--help` shows each option's values",
        )
    return out


def _parser_for(kind: type, optional: bool):
    def parse(text: str):
        if optional and text.lower() in ("none", "null"):
            return None
        return kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its error messages
    return parse


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _comma_paths(text: str) -> list[str]:
    if not (items := _comma_list(text)):
        raise ValueError("an empty path")
    return items


_comma_paths.__name__ = "path"  # argparse: "invalid path value: ''"


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


@dataclasses.dataclass(frozen=True)
class Options:
    """One option dataclass of a command: its fields become flags in a help group `title`
    (the command's own list when None); `only` picks some of its fields."""

    cls: type
    title: str | None = None
    only: tuple[str, ...] | None = None
    description: str | None = None

    def fields(self) -> list[dataclasses.Field]:
        return option_fields(self.cls, self.only)


def add_command(
    sub: argparse._SubParsersAction,
    common: argparse.ArgumentParser,
    name: str,
    options: Sequence[Options],
    run: Callable[[argparse.Namespace], int],
    **parser_kwargs: Any,
) -> argparse.ArgumentParser:
    """A subcommand whose flags all come from `options`; `run(args)` runs it."""
    p = sub.add_parser(name, parents=[common], **parser_kwargs)
    for o in options:
        add_options(p, o.cls, o.title, only=o.only, description=o.description)
    p.set_defaults(func=run)
    return p
