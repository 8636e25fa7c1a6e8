"""Every command that writes goes through one output guard (fitwhisper.output_guard).

The commands come from the parser itself: a command is a writing command when one of its
options is an output (a field whose `path` is `new_file` or `new_folder`). A new command
(or a new output option) that does not pass its outputs to the guard fails here.
"""

from __future__ import annotations

import functools
import importlib
import json
import shutil
from pathlib import Path

import pytest
from tests.cli.test_every_option import (
    COMMANDS,
    WORK,
    _argv,
    _base,
    _fields,
    _hashes,
    _run,
    _stop,
    _Work,
)
from tests.cli.test_every_option import inputs as inputs  # noqa: F401 (a fixture)

import fitwhisper.output_guard as guard
from fitwhisper.cli import build_parser
from fitwhisper.option_ranges import flag_name

INPUT_KINDS = ("file", "folder", "any", "model")
OUTPUT_KINDS = ("new_file", "new_folder")
# The options by which the user asks to replace an output folder.
REPLACE_FLAGS = ("force", "overwrite_output_dir")


def _outputs(command: str) -> list:
    return [f for f, _ in _fields(command) if f.metadata.get("path") in OUTPUT_KINDS]


WRITING = [c for c in COMMANDS if _outputs(c)]


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Commands stop where their work would begin; one parser for all cases."""
    import fitwhisper.cli as cli

    for module, name in WORK:
        monkeypatch.setattr(importlib.import_module(module), name, _stop)
    monkeypatch.setattr(cli, "build_parser", functools.cache(build_parser))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)


def test_the_parser_has_writing_commands_and_the_list_is_whole() -> None:
    """The enumeration itself: every command that writes a file declares it as an output."""
    assert set(WRITING) >= {
        "train", "tune", "merge", "export", "transcribe", "evaluate", "report", "check-data",
        "import-ct2", "plan", "demo", "shard",
    }  # fmt: skip


@pytest.mark.parametrize("command", WRITING)
def test_every_writing_command_passes_each_output_to_the_guard_before_work(
    command: str, inputs, stopped, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    seen: list[str] = []
    problems: list[str] = []
    real = guard.output_problems
    expected = {flag_name(f) for f in _outputs(command)}

    def spy(outputs, ins):
        outputs = list(outputs)
        seen.extend(o.name for o in outputs)
        problems.extend(found := real(outputs, ins))
        if not found and expected <= set(seen):
            raise _Work  # every output checked: the rest of the command is not this test's
        return found

    monkeypatch.setattr(guard, "output_problems", spy)
    out = inputs["out"]
    out.mkdir()
    values = {
        f.name: str(out / f"{f.name}.{'html' if command == 'report' else 'jsonl'}")
        if f.metadata["path"] == "new_file"
        else str(out / f.name)
        for f in _outputs(command)
    }
    code, err = _run(_argv(command, {**_base(command, inputs), **values}), capsys)
    assert not problems and "Traceback" not in err, err  # new paths: may be written
    missing = expected - set(seen)
    assert not missing, f"{command} writes {missing} without the output guard"


def _own_input_cases(inputs) -> list[tuple[str, str, dict, str]]:
    """(command, output option, arguments, the input) for every output of every writing
    command set to every input path the command was given, and to the folder that holds
    it for a folder output."""
    cases = []
    for command in WRITING:
        base = _base(command, inputs)
        given = {
            f.name: base[f.name]
            for f, _ in _fields(command)
            if f.metadata.get("path") in INPUT_KINDS and f.name in base
        }
        for out in _outputs(command):
            for name, value in given.items():
                for path in [value] if isinstance(value, str) else value:
                    p = Path(path)
                    folder_out = out.metadata["path"] == "new_folder"
                    if p.is_dir() != folder_out:
                        # The wrong kind is refused by the option's own check; a file
                        # inside an input folder is this rule's (the page goes inside the
                        # folder it reports on: its case is below).
                        if p.is_dir() and command != "report":
                            cases.append(
                                (command, out.name, {**base, out.name: str(p / "x")}, name)
                            )
                        continue
                    v = [path] if out.metadata.get("nargs") else path
                    cases.append((command, out.name, {**base, out.name: v}, name))
                    if folder_out and not out.metadata.get("files_among_others"):
                        cases.append((command, out.name, {**base, out.name: str(p.parent)}, name))
    # report reads the files of the folder it reports on: a page over one of them.
    read = str(inputs["train.jsonl"])
    cases.append(("report", "output", {**_base("report", inputs), "output": read}, "RUN_DIR"))
    return cases


def test_every_writing_command_refuses_each_of_its_inputs_as_its_output(
    inputs, stopped, capsys
) -> None:
    before = _hashes(inputs["root"])
    cases = _own_input_cases(inputs)
    failures = []
    for command, _, values, _ in cases:
        argv = _argv(command, values)
        code, err = _run(argv, capsys)
        message = err.split("\n\nhint:")[0]
        if code != 1 or "the input" not in message or "Traceback" in err:
            failures.append(f"{' '.join(argv)} -> {code}: {err.strip()[:300]!r}")
        assert _hashes(inputs["root"]) == before, argv
    assert {c for c, *_ in cases} >= set(WRITING) - {"demo"}  # demo reads nothing
    assert not failures, "\n".join(failures)


def _replacing(command: str) -> list[str]:
    return [f.name for f, _ in _fields(command) if f.name in REPLACE_FLAGS]


@pytest.mark.parametrize("command", [c for c in WRITING if _replacing(c)])
def test_replacing_never_removes_a_folder_fitwhisper_did_not_make(
    command: str, inputs, stopped, capsys
) -> None:
    (out_field,) = [f for f in _outputs(command) if f.name in ("out", "output_dir")]
    mine = inputs["out"] / "mine"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("the user's own file")
    (mine / "checkpoint-1").mkdir()  # what train's --overwrite_output_dir would delete
    (mine / "checkpoint-1" / "x.bin").write_bytes(b"\1")
    before = _hashes(mine)
    values = {**_base(command, inputs), out_field.name: str(mine)}
    for flag in _replacing(command):
        code, err = _run([*_argv(command, values), f"--{flag}"], capsys)
        assert code == 1, err
        assert "did not write" in err and f"--{flag} replaces only a folder fitwhisper made" in err
        assert "Traceback" not in err and _hashes(mine) == before


def test_merge_onto_the_adapters_own_base_model_is_refused_before_anything_is_deleted(
    tiny_whisper_dir: Path, tmp_path: Path, capsys
) -> None:
    from fitwhisper.cli import main

    base = tmp_path / "base"
    shutil.copytree(tiny_whisper_dir, base)
    guard.mark(base, "merge")  # even a folder fitwhisper made: it is the adapter's input
    adapter = tmp_path / "run" / "final"
    adapter.mkdir(parents=True)
    config = {"base_model_name_or_path": str(base), "peft_type": "LORA"}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    before = _hashes(base)
    for out in (base, tmp_path / "link"):
        if out.name == "link":
            out.symlink_to(base)
        assert main(["merge", str(tmp_path / "run"), str(out), "--force"]) == 1
        err = capsys.readouterr().err
        assert f"is the input ADAPTER's base model {base}" in err and "Traceback" not in err
        assert _hashes(base) == before


def test_the_marker_is_written_only_into_a_new_or_empty_folder(tmp_path: Path) -> None:
    new, theirs = tmp_path / "new", tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("x")
    assert guard.claim_folder(new, "evaluate") and guard.made_by(new) == "evaluate"
    assert not guard.claim_folder(theirs, "evaluate") and guard.made_by(theirs) is None
    with pytest.raises(guard.ConfigError, match="did not write"):
        guard.replace_folder(theirs)
    assert (theirs / "notes.txt").is_file()
    guard.replace_folder(new)
    assert not new.exists()


RUN = "model: {}\nversions:\n  fitwhisper: 0.1.0\n"  # a run record, as train writes it
EXPORT = '{"format": "onnx", "source": "runs/a"}'
FORMATS = {"ct2/fitwhisper_export.json": EXPORT, "onnx/fitwhisper_export.json": EXPORT}


@pytest.mark.parametrize(
    "files, made_by",
    [
        ({"fitwhisper.yaml": RUN, "final/config.json": "{}"}, "train"),
        ({"fitwhisper_export.json": EXPORT, "model.bin": ""}, "export"),
        ({"study.db": "", "trials.md": ""}, "tune"),
        ({**FORMATS, "README.md": ""}, "export"),
        ({"config.json": "{}", "model.safetensors": ""}, None),  # a merge of an older version
        ({**FORMATS, "notes.txt": ""}, None),
        # A user's own files of the same names: options, not a run; not an export's record.
        ({"fitwhisper.yaml": "learning_rate: 1.0e-5\n", "notes.txt": ""}, None),
        ({"fitwhisper_export.json": "{}", "notes.txt": ""}, None),
        ({"study.db": "", "notes.txt": ""}, None),
    ],
)
def test_folders_of_older_versions_are_known_by_their_records(
    tmp_path: Path, files: dict[str, str], made_by: str | None
) -> None:
    """Folders written before the marker: --force replaces them where it did before."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert guard.made_by(tmp_path) == made_by
