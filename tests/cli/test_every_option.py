"""Every number and path option of every command takes only what its field declares
(fitwhisper.option_ranges), and says so before any work.

The walk goes over the options of each command as `--help` lists them and gives each the
values careless users type: 0, -1, a huge number, the empty text, NaN and inf; for a path,
the empty text, a folder where a file goes, a file where a folder goes, and the command's
own input as its output. A value inside the declared range is taken (the command goes on
to load its model, which the walk stops); any other exits non-zero naming the option in one
paragraph, with no traceback, before any model loads. Every input file is hashed before and
after each case, and the current folder must stay empty.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import re
import typing
import wave
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fitwhisper.cli import COMMANDS as COMMAND_MODULES
from fitwhisper.cli import CommonOptions, build_parser, main
from fitwhisper.cli.flags import Options, _comma_list, _unwrap, build_config
from fitwhisper.errors import ConfigError
from fitwhisper.option_ranges import PATH_KINDS, declares_values, field_problem, flag_name


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    return build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]


COMMANDS = dict(zip(_subparsers(), COMMAND_MODULES, strict=True))
# Each command's positional arguments, in order.
POSITIONAL = {name: [a.dest for a in p._actions if not a.option_strings]
              for name, p in _subparsers().items()}  # fmt: skip


def _option_classes() -> list[type]:
    """Every option dataclass a command builds, once each."""
    found = [CommonOptions]
    for module in COMMANDS.values():
        found += [o.cls for o in module.OPTIONS if o.cls not in found]
    return found


def _fields(name: str) -> list[tuple[dataclasses.Field, typing.Any]]:
    """(field, type hint) of each flag of command `name`."""
    out = []
    for o in [*COMMANDS[name].OPTIONS, Options(CommonOptions)]:
        hints = typing.get_type_hints(o.cls)
        out += [(f, hints[f.name]) for f in o.fields()]
    return out


def _number_kind(hint: typing.Any) -> type | None:
    kind, choices, _ = _unwrap(hint)
    return kind if choices is None and kind in (int, float) else None


def _number_list_kind(hint: typing.Any) -> type | None:
    """int or float for a list of numbers (`--speed_perturb 0.9,1.0,1.1`), else None."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if typing.get_origin(args[0]) is not list:
        return None
    item = (typing.get_args(args[0]) or (str,))[0]
    return item if item in (int, float) else None


def test_every_number_option_declares_its_range() -> None:
    """A new int or float option without min/max/above/below (or `unbounded` with its
    reason) fails here, whichever command takes it."""
    undeclared = []
    for cls in _option_classes():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            numbers = _number_kind(hints[f.name]) or _number_list_kind(hints[f.name])
            if numbers and not declares_values(f):
                undeclared.append(f"{cls.__name__}.{f.name}")
            if "unbounded" in f.metadata:
                assert f.metadata["unbounded"], f"{cls.__name__}.{f.name}: say why"
            if "path" in f.metadata:
                assert f.metadata["path"] in PATH_KINDS, f"{cls.__name__}.{f.name}"
    assert not undeclared, f"number options without a declared range: {undeclared}"


PATHLIKE = re.compile(
    r"(^|_)(dir|file|manifest|output|readme|out|src|adapter|model|config|"
    r"tokenizer|audio|audio_list|report|plan|resume|compare|part)$"
)


def test_every_path_option_declares_its_kind() -> None:
    """Options named like a path, or shown as FILE or DIR, say which kind of path they take
    (deepspeed, a stage name or a JSON file, is checked by train's DeepSpeed checks)."""
    missing = []
    for cls in _option_classes():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind, choices, _ = _unwrap(hints[f.name])
            if kind not in (str, list) or choices is not None or "path" in f.metadata:
                continue
            if PATHLIKE.search(f.name) or f.metadata.get("metavar") in ("FILE", "DIR"):
                missing.append(f"{cls.__name__}.{f.name}")
    assert not missing, f"path options without a kind: {missing}"


# --- the walk -------------------------------------------------------------------------------


class _Work(Exception):
    """Raised where a command would start its work: load a model, trace one, train."""


def _stop(*args, **kwargs):
    raise _Work


# Where each command's work begins: the model loaders every command goes through, and the
# work of the commands that load none (plan predicts from a config, demo makes its data).
WORK = [
    ("fitwhisper.models.resolve", "resolve_model"),
    ("fitwhisper.models.resolve", "load_model"),
    ("fitwhisper.models.resolve", "load_processor"),
    ("fitwhisper.models.ct2_import", "import_ct2"),
    # search binds predict_memory at its import: patched (and so restored) there too, and
    # before predict's, or a first import here would keep the stand-in for later tests.
    ("fitwhisper.memory.search", "predict_memory"),
    ("fitwhisper.memory.predict", "predict_memory"),
    ("fitwhisper.memory.presets", "presets_markdown"),
    ("fitwhisper.demo.run", "run_demo"),
    ("fitwhisper.report", "write_report"),
    ("fitwhisper.data.sources.write", "write_shards"),
]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "in"
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text('{"model_type": "whisper"}')
    (root / "adapter").mkdir()
    (root / "adapter" / "adapter_config.json").write_text('{"base_model_name_or_path": "x"}')
    (root / "ct2").mkdir()
    (root / "ct2" / "model.bin").write_bytes(b"\0" * 16)
    with wave.open(str(root / "clip.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 16000)
    (root / "train.jsonl").write_text('{"audio": "clip.wav", "text": "hello"}\n')
    # A data folder (audiofolder): a source that is a folder, for `shard`.
    (root / "corpus").mkdir()
    (root / "corpus" / "metadata.jsonl").write_text('{"file_name": "../clip.wav", "text": "hi"}\n')
    (root / "list.txt").write_text(f"{root / 'clip.wav'}\n")
    (root / "plan.json").write_text("{}")
    (root / "README.md").write_text("# readme\n")
    (root / "run.yaml").write_text("learning_rate: 1.0e-5\n")
    return {p.name: p for p in root.iterdir()} | {"root": root, "out": tmp_path / "out"}


def _base(name: str, i: dict[str, Path]) -> dict[str, str | list[str]]:
    """The arguments that take each command past its checks to its work."""
    model, manifest, out = str(i["model"]), str(i["train.jsonl"]), i["out"]
    return {
        "check-data": {"manifest": manifest},
        "shard": {"source": str(i["corpus"]), "out": str(out / "shards")},
        "import-ct2": {"src": str(i["ct2"]), "out": str(out / "ct2")},
        "models": {},
        "demo": {"output_dir": str(out / "demo")},
        "train": {"model": model, "train_manifest": manifest, "output_dir": str(out / "run")},
        "tune": {
            "model": model,
            "train_manifest": manifest,
            "eval_manifest": manifest,
            "output_dir": str(out / "study"),
        },
        "evaluate": {"model": model, "manifest": manifest},
        "transcribe": {"model": model, "audio": [str(i["clip.wav"])]},
        "merge": {"adapter": str(i["adapter"]), "out": str(out / "merged")},
        "export": {"model": model, "out": str(out / "export")},
        "plan": {"model": model},
        "doctor": {},
        "report": {"folder": str(i["root"])},
    }[name]


def _argv(name: str, values: dict) -> list[str]:
    positional = POSITIONAL[name]
    argv = [name]
    for dest in positional:
        if dest in values:
            v = values[dest]
            argv += v if isinstance(v, list) else [v]
    for k, v in values.items():
        if k not in positional:
            argv.append(f"--{k}={v}")  # `=`: a value of -1 or the empty text stays a value
    return argv


def _hashes(root: Path) -> dict[str, str]:
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(root.rglob("*")) if f.is_file()}  # fmt: skip


def _run(argv: list[str], capsys) -> tuple[int | str, str]:
    try:
        code: int | str = main(argv)
    except SystemExit as e:  # argparse: a value that is not a number
        code = e.code if isinstance(e.code, int) else 2
    except _Work:
        code = "work"
    return code, capsys.readouterr().err


def _number_cases(name: str, i) -> list[tuple[str, dict, str | None]]:
    """(option, arguments, None when the value is in range else the name to see)."""
    cases = []
    for f, hint in _fields(name):
        kind = _number_kind(hint)
        if kind is None or f.metadata.get("count") or f.metadata.get("positional"):
            continue
        texts = ["0", "-1", str(10**12), ""] + (["nan", "inf", "-inf"] if kind is float else [])
        for text in texts:
            try:
                value = kind(text)
            except ValueError:
                bad = True  # argparse refuses it, naming the flag
            else:
                bad = field_problem(f, hint, value) is not None
            cases.append((f.name, {f.name: text}, flag_name(f) if bad else None))
    for f, hint in _fields(name):
        if _number_list_kind(hint) is None:
            continue
        # As many items as the option takes (a LOW,HIGH range: two), each the careless value.
        for text in ("0", "-1", str(10**12), "", "nan", "inf", "-inf", "x"):
            value = ",".join([text] * f.metadata.get("items", 1))
            bad = field_problem(f, hint, _comma_list(value)) is not None
            cases.append((f.name, {f.name: value}, flag_name(f) if bad else None))
    return cases


def _path_cases(name: str, i) -> list[tuple[str, dict, str | None]]:
    a_folder, a_file = str(i["root"] / "ct2"), str(i["README.md"])
    wrong = {"file": a_folder, "new_file": a_folder, "folder": a_file, "new_folder": a_file,
             "model": a_file, "any": None}  # fmt: skip
    cases = []
    for f, _ in _fields(name):
        kind = f.metadata.get("path")
        if not kind:
            continue
        for value in ("", wrong[kind]):
            if value is not None:
                v = [value] if f.metadata.get("nargs") else value
                cases.append((f.name, {f.name: v}, flag_name(f)))
    return cases


def _own_input_cases(i) -> list[tuple[str, str, dict, str]]:
    """(command, option, arguments, name to see): the command's input as its output."""
    model, manifest, wav = str(i["model"]), str(i["train.jsonl"]), str(i["clip.wav"])
    return [
        ("export", "out", {"out": model}, "OUT"),
        ("export", "out", {"out": str(i["root"])}, "OUT"),  # the folder around the model
        ("transcribe", "output_file", {"output_file": wav}, "--output_file"),
        (
            "transcribe",
            "output_file",
            {"output_file": str(i["list.txt"]), "audio_list": str(i["list.txt"])},
            "--output_file",
        ),
        ("evaluate", "output_dir", {"output_dir": model}, "--output_dir"),
        ("train", "output_dir", {"output_dir": model}, "--output_dir"),
        ("train", "output_dir", {"output_dir": str(i["root"])}, "--output_dir"),
        ("merge", "out", {"out": str(i["adapter"])}, "OUT"),
        ("import-ct2", "out", {"out": str(i["ct2"])}, "OUT"),
        ("check-data", "report", {"report": manifest}, "--report"),
        ("plan", "output", {"output": str(i["model"] / "plan.json")}, "--output"),
        ("report", "output", {"output": str(i["train.jsonl"])}, "--output"),
    ]


def test_every_option_of_every_command_with_careless_values(
    inputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import functools
    import importlib

    import fitwhisper.cli as cli

    for module, name in WORK:
        monkeypatch.setattr(importlib.import_module(module), name, _stop)
    # One parser for all cases: building it is most of a case's time, and parsing leaves it
    # as it was.
    monkeypatch.setattr(cli, "build_parser", functools.cache(build_parser))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = _hashes(inputs["root"])

    cases = [(c, *case) for c in COMMANDS for case in _number_cases(c, inputs)]
    cases += [(c, *case) for c in COMMANDS for case in _path_cases(c, inputs)]
    cases += _own_input_cases(inputs)
    failures, refused, pairs = [], 0, set()
    for command, option, values, expect in cases:
        argv = _argv(command, {**_base(command, inputs), **values})
        code, err = _run(argv, capsys)
        pairs.add((command, option))
        what = f"{' '.join(argv)} -> {code}: {err.strip()[:300]!r}"
        if "Traceback" in err:
            failures.append(f"traceback: {what}")
        elif expect is not None:
            refused += 1
            message = err.split("\n\nhint:")[0]
            if code in (0, "work") or expect not in message or "\n\n" in message:
                failures.append(f"not refused with {expect} named: {what}")
        if _hashes(inputs["root"]) != before:
            failures.append(f"an input changed: {what}")
            before = _hashes(inputs["root"])
        if any(cwd.iterdir()):
            failures.append(f"wrote into the current folder: {what}")
    options = {
        (c, f.name)
        for c in COMMANDS
        for f, h in _fields(c)
        if (_number_kind(h) and not f.metadata.get("count"))
        or _number_list_kind(h)
        or f.metadata.get("path")
    }
    print(f"walked {len(cases)} cases over {len(pairs)} (command, option) pairs; "
          f"{refused} refused")  # fmt: skip
    assert not failures, "\n".join(failures)
    assert pairs >= options and len(pairs) >= 90, (len(pairs), sorted(options - pairs))


def test_a_config_file_value_out_of_range_is_refused_before_work(
    inputs, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import fitwhisper.models.resolve as resolve

    monkeypatch.setattr(resolve, "resolve_model", _stop)
    config = inputs["root"].parent / "bad.yaml"
    config.write_text("train:\n  per_device_train_batch_size: 0\ndata:\n  max_audio_len: 45\n")
    argv = _argv("train", {**_base("train", inputs), "config": str(config)})
    code, err = _run(argv, capsys)
    assert code == 1 and "Traceback" not in err
    assert "error: --per_device_train_batch_size must be at least 1, got 0" in err or (
        "error: --max_audio_len must be in (0, 30]" in err
    )


# --- the same rule for any number, drawn by Hypothesis ----------------------------------------

NUMBER_FIELDS = [
    (cls, f, hint)
    for cls in _option_classes()
    for f in dataclasses.fields(cls)
    if (hint := typing.get_type_hints(cls)[f.name]) and _number_kind(hint)
]


# The same examples each run (a failure is one anyone can rerun), no example database.
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.sampled_from(NUMBER_FIELDS),
    st.one_of(st.integers(-(10**15), 10**15), st.floats(allow_nan=True, allow_infinity=True)),
)
def test_any_number_is_kept_or_refused_naming_its_option(case, number) -> None:
    """build_config keeps a number inside its field's bounds as given, and refuses any
    other with a ConfigError naming the option: never another exception."""
    cls, f, hint = case
    kind = _number_kind(hint)
    if kind is int and isinstance(number, float):
        if not math.isfinite(number):
            return  # not an int flag's value: argparse refuses it
        number = int(number)
    # Paths (MODEL, MANIFEST ... have no usable default): one that passes.
    args = argparse.Namespace(
        **{g.name: "x" for g in dataclasses.fields(cls) if "path" in g.metadata}
    )
    setattr(args, f.name, kind(number))
    bad = field_problem(f, hint, kind(number))
    if bad is None:
        assert getattr(build_config(cls, args), f.name) == kind(number)
    else:
        with pytest.raises(ConfigError) as e:
            build_config(cls, args)
        assert e.value.message.startswith(f"{flag_name(f)} must be ")


# --- the same walk through `tune --search` and a YAML config ---------------------------------

CARELESS = ["0", "-1", str(10**12), "", "nan", "inf", "-inf", "x"]


def _walk_refusals(cases, capsys) -> tuple[list[str], int]:
    """Run each (argv, name to see or None, must refuse); the failures, and how many were
    refused."""
    failures, refused = [], 0
    for argv, named, must_refuse in cases:
        code, err = _run(argv, capsys)
        message = err.split("\n\nhint:")[0]
        what = f"{' '.join(map(str, argv))[-160:]} -> {code}: {err.strip()[:300]!r}"
        if "Traceback" in err or code not in (1, "work"):
            failures.append(f"not one paragraph and exit 1 or work: {what}")
        elif code == 1:
            refused += 1
            if named not in message or "\n\n" in message:
                failures.append(f"refused without {named} named in one paragraph: {what}")
        elif must_refuse:
            failures.append(f"not refused: {what}")
    return failures, refused


def test_every_search_name_and_every_config_file_number_with_careless_values(
    inputs, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`tune --search NAME=VALUE` for every searchable option, and every number option of
    `train` set in a YAML config instead of on the command line, with the values
    careless users type: taken, or refused before any model loads in one paragraph naming
    the spec or the option; a value the option itself refuses is refused here too."""
    import functools
    import importlib

    import yaml

    import fitwhisper.cli as cli
    from fitwhisper.cli import train as train_cli
    from fitwhisper.tune.space import SEARCHABLE

    for module, name in WORK:
        monkeypatch.setattr(importlib.import_module(module), name, _stop)
    monkeypatch.setattr(cli, "build_parser", functools.cache(build_parser))
    fields = {
        f.name: (f, typing.get_type_hints(cls)[f.name])
        for cls in train_cli.SECTIONS.values()
        for f in dataclasses.fields(cls)
    }
    cases = []
    for name in SEARCHABLE:
        f, hint = fields[name]
        for text in CARELESS:
            kind = _number_kind(hint)
            try:
                bad = kind is not None and field_problem(f, hint, kind(text)) is not None
            except ValueError:
                bad = True
            argv = _argv("tune", {**_base("tune", inputs), "search": f"{name}={text}"})
            cases.append((argv, f"--search {name}={text}", bad))

    config = inputs["root"].parent / "careless.yaml"
    # What YAML reads into another type than the command line does; the ranges themselves
    # are the command-line walk's.
    yaml_values = [-1, 10**12, "", float("nan"), "x"]
    # train's: tune reads its config file by the same code (cli/flags.py load_config_file).
    for command in ("train",):
        for section, cls in train_cli.SECTIONS.items():
            for f in dataclasses.fields(cls):
                hint = typing.get_type_hints(cls)[f.name]
                kind = _number_kind(hint)
                if kind is None or f.metadata.get("count"):
                    continue
                for value in yaml_values:
                    path = config.with_name(f"{command}-{section}-{f.name}-{len(cases)}.yaml")
                    path.write_text(yaml.safe_dump({section: {f.name: value}}))
                    if isinstance(value, str) or (kind is int and isinstance(value, float)):
                        bad = True
                    else:
                        bad = field_problem(f, hint, kind(value)) is not None
                    argv = _argv(command, {**_base(command, inputs), "config": str(path)})
                    # Named as the file has it (a wrong type) or as its flag (out of range).
                    cases.append((argv, f.name, bad))
    failures, refused = _walk_refusals(cases, capsys)
    print(f"walked {len(cases)} --search and config-file cases; {refused} refused")
    assert not failures, "\n".join(failures[:20]) + f"\n({len(failures)} in all)"
