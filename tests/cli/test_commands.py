"""The command line: every flag from a dataclass field, help for every option, --help
before torch loads, user errors without tracebacks, --debug."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from fitwhisper.cli import COMMANDS as COMMAND_MODULES
from fitwhisper.cli import CommonOptions, build_parser, main
from fitwhisper.cli.flags import Options, build_config
from fitwhisper.errors import DataError


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    return build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]


COMMANDS = tuple(_subparsers())
# Each subcommand's name, taken from the parser itself, with its module.
MODULES = {name: m for name, m in zip(COMMANDS, COMMAND_MODULES, strict=True)}


def test_every_command_module_is_a_subcommand() -> None:
    from pathlib import Path

    import fitwhisper.cli

    # Every module of cli/ but the shared ones is a command, in COMMANDS.
    files = {p.stem for p in Path(fitwhisper.cli.__file__).parent.glob("*.py")}
    commands = files - {"__init__", "flags", "common_options"}
    assert len(COMMANDS) == len(COMMAND_MODULES) == len(commands)
    for name, module in MODULES.items():
        assert module.__name__.rsplit(".", 1)[1] == name.replace("-", "_")


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_comes_from_a_dataclass_field_with_help_and_its_default(name: str) -> None:
    """Each option of each subcommand is a field of the command's option dataclasses (or
    the common ones), has help, and is that field's default when the flag is absent."""
    options = [*MODULES[name].OPTIONS, Options(CommonOptions)]
    fields = {f.name: (o.cls, f) for o in options for f in o.fields()}
    sub = _subparsers()[name]
    positionals = []
    for action in sub._actions:
        if action.dest == "help" or action.help == argparse.SUPPRESS:
            continue  # --no-X of a bool field is the same field's action
        assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        assert action.dest in fields, f"{name} {action.dest} is not a dataclass field"
        cls, f = fields[action.dest]
        if not action.option_strings:
            positionals.append(action)
            continue
        if action.required:
            continue
        shown = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if isinstance(shown, bool) or shown is None:
            continue  # shown as on/off/auto/none
        text = ",".join(shown) if isinstance(shown, list) else str(shown)
        # A default that depends on other options is said in words (recipes.py).
        text = f.metadata.get("shown_default", text)
        if not f.metadata.get("count") and not f.metadata.get("switch"):
            assert f"default: {text}" in " ".join(action.help.split()), (name, f.name)
    # Parsed with only the required arguments, every field holds its dataclass default.
    argv = [name, *("x" for a in positionals if a.nargs not in ("?", "*"))]
    argv += [a for act in sub._actions if act.required and act.option_strings
             for a in (act.option_strings[0], "x")]  # fmt: skip
    args = build_parser().parse_args(argv)
    for o in options:
        built = build_config(o.cls, args)
        for f in o.fields():
            if f.name in vars(args) and not f.metadata.get("count"):
                continue  # given above (positional or required), or set by argparse itself
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert getattr(built, f.name) == default, (name, f.name)


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["train", "--help"], ["evaluate", "--help"], ["train", "--bogus"]],
)
def test_help_and_bad_flags_answer_before_torch_loads(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from fitwhisper.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'bitsandbytes') if m in sys.modules]\n"
        "print('CODE', code, 'HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    last = out.stdout.strip().splitlines()[-1]
    expected = 2 if "--bogus" in argv else 0
    assert last == f"CODE {expected} HEAVY []"


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_every_command_has_help(name: str) -> None:
    sub = _subparsers()[name]
    assert sub.description or sub.format_usage()
    for action in sub._actions:
        if action.dest != "help" and action.help != argparse.SUPPRESS:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"


def _failing(args) -> int:
    raise DataError("manifest rows.jsonl line 3: no such audio file a.wav", "fix the path")


def test_user_error_prints_message_and_hint_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fitwhisper.cli.models as models_command

    monkeypatch.setattr(models_command, "run", _failing)
    assert main(["models"]) == 1
    err = capsys.readouterr().err
    assert "error: manifest rows.jsonl line 3: no such audio file a.wav" in err
    assert "hint: fix the path" in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    import fitwhisper.cli.models as models_command

    monkeypatch.setattr(models_command, "run", _failing)
    with pytest.raises(DataError):
        main(["models", "--debug"])


def test_unknown_option_exits_nonzero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--no-such-flag"])
    assert e.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_cuda_out_of_memory_becomes_an_error_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    import fitwhisper.cli.models as models_command

    def oom(args) -> int:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")

    monkeypatch.setattr(models_command, "run", oom)
    assert main(["models"]) == 1
    err = capsys.readouterr().err
    assert "ran out of memory" in err and "--gradient_accumulation_steps" in err
    assert "Traceback" not in err


def test_evaluate_takes_the_model_then_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        ["evaluate", "runs/x/final", "test.jsonl", "--compare", "offline/tiny.en"]
    )
    assert (args.model, args.manifest, args.compare) == (
        "runs/x/final",
        "test.jsonl",
        "offline/tiny.en",
    )
    from fitwhisper.config import DataConfig, EvalConfig

    scoring, data = build_config(EvalConfig, args), build_config(DataConfig, args)
    assert (scoring.normalizer, scoring.opencc, data.bad_rows) == ("auto", None, "error")
    # The old form `evaluate MANIFEST --model M` is gone: a usage error, not a wrong run.
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "test.jsonl", "--model", "runs/x/final"])
    assert e.value.code == 2
    assert "unrecognized arguments: --model" in capsys.readouterr().err
