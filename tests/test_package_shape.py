"""The package's shape: no module imports a layer above its own, only `cli/` knows
argparse, every package has a map, modules and functions stay small. Every import counts,
at the top of a module or inside a function.

Layers, lowest first (a unit may import its own modules and any lower layer):

   -1  whisper_facts                                Whisper's fixed numbers: imports nothing
                                                    of fitwhisper, so every unit may import it
    0  errors, logs, config, precision, method,    ground: no fitwhisper imports above
       option_ranges
       safe_text
    1  scoring, codeswitch, paths, folder_lock,
       output_guard
    2  chinese_script, models, recipes                recipes: defaults by method (config)
    3  data, memory
    4  evaluate, transcribe, report                   report reads the files they write
    5  train, export
    6  demo
    7  cli                                           the only place that parses or exits
    8  __main__                                      `python -m fitwhisper`
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = {
    "whisper_facts": -1,  # sample rate, window, token cleaning: below the ground
    **dict.fromkeys(
        (
            "errors",
            "logs",
            "eval_config",
            "tune_config",
            "precision",
            "method",
            "option_ranges",
            "__init__",
        ),
        0,
    ),
    "config": 1,  # re-exports eval_config's EvalConfig
    "safe_text": 0,  # one writer per kind of output: imports nothing of fitwhisper
    "text_joins": 0,  # how transcript pieces join: imports nothing of fitwhisper
    **dict.fromkeys(("scoring", "codeswitch", "paths", "folder_lock", "output_guard"), 1),
    **dict.fromkeys(("chinese_script", "models", "recipes"), 2),
    **dict.fromkeys(("data", "memory"), 3),
    **dict.fromkeys(("evaluate", "transcribe", "report"), 4),
    **dict.fromkeys(("train", "export"), 5),
    **dict.fromkeys(("demo", "tune"), 6),
    "cli": 7,
    "__main__": 8,  # `python -m fitwhisper` runs cli.main
}


def _unit(module: str) -> str:
    """The top-level unit of `fitwhisper.a.b`: `a` (`__init__` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_graph() -> dict[str, set[tuple[str, str]]]:
    """unit -> {(imported unit, importing file)} over every import of every module."""
    graph: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in sorted((SRC / "fitwhisper").rglob("*.py")):
        rel = path.relative_to(SRC).with_suffix("")
        unit = _unit(".".join(rel.parts).removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
                if node.module == "fitwhisper":  # from fitwhisper import config
                    names = [f"fitwhisper.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name == "argparse" or name.startswith("fitwhisper"):
                    target = "argparse" if name == "argparse" else _unit(name)
                    graph[unit].add((target, str(rel)))
    return graph


def test_every_unit_has_a_layer() -> None:
    units = {_unit(".".join(p.relative_to(SRC).with_suffix("").parts))
             for p in (SRC / "fitwhisper").glob("*")
             if p.suffix == ".py" or (p / "__init__.py").exists()}  # fmt: skip
    assert units <= set(LAYERS), f"give these a layer: {sorted(units - set(LAYERS))}"


def test_no_module_imports_upward() -> None:
    upward = [
        f"{where}: {unit} (layer {LAYERS[unit]}) imports {target} (layer {LAYERS[target]})"
        for unit, targets in import_graph().items()
        for target, where in targets
        if target != "argparse" and target != unit and LAYERS[target] >= LAYERS[unit]
    ]
    assert upward == []


def test_only_the_cli_imports_argparse() -> None:
    users = sorted(where for unit, t in import_graph().items() for target, where in t
                   if target == "argparse" and unit != "cli")  # fmt: skip
    assert users == []


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def test_modules_and_functions_past_their_size_are_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Sizes past the caps are printed on every run, not failed: a module that grows past
    them is a prompt to split it by its jobs, never to pack its lines to fit. Twice a cap
    still fails: by then the split is overdue."""
    too_big = []
    for path in sorted((SRC / "fitwhisper").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(SRC)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_big.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    too_big.append(f"{where}:{node.name}: {lines} lines")
    with capsys.disabled():
        for line in too_big:
            print(f"\npast the size caps ({MAX_MODULE_LINES}/{MAX_FUNCTION_LINES}): {line}")
    sizes = [(int(line.rsplit(": ", 1)[1].split()[0]), line) for line in too_big]
    overdue = [line for n, line in sizes if n > 2 * (MAX_FUNCTION_LINES if ":" in
               line.split(": ")[0] else MAX_MODULE_LINES)]  # fmt: skip
    assert overdue == []


def test_every_package_has_a_map() -> None:
    """Each package's __init__ docstring names each of its modules."""
    missing = []
    for init in sorted((SRC / "fitwhisper").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for module in sorted(init.parent.glob("*.py")):
            if module.name != "__init__.py" and module.stem not in doc:
                missing.append(f"{init.relative_to(SRC)}: {module.stem}")
    assert missing == []
