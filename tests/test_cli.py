"""The command line: help for every command, user errors without tracebacks, --debug."""

from __future__ import annotations

import pytest

from fitwhisper.cli import build_parser, main
from fitwhisper.errors import DataError

COMMANDS = (
    "check-data",
    "import-ct2",
    "models",
    "demo",
    "train",
    "evaluate",
    "transcribe",
    "export",
)


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_of_every_command_has_help(name: str) -> None:
    sub = build_parser()._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
    assert sub.description or sub.format_usage()
    for action in sub._actions:
        if action.dest != "help":
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
    assert (args.normalizer, args.opencc, args.bad_rows) == ("auto", "none", "error")
    # The old form `evaluate MANIFEST --model M` is gone: a usage error, not a wrong run.
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "test.jsonl", "--model", "runs/x/final"])
    assert e.value.code == 2
    assert "unrecognized arguments: --model" in capsys.readouterr().err
