"""No import circle between modules: test_package_shape checks the arrows between top-level
units (data, models, ...); this checks every module of src/fitwhisper, inside a unit too.

Every import counts, at the top of a module or inside a function: a function-level import
back into a module that imports this one runs only later, so it does not break at import
time, but it is the same tangle (the module can be neither read nor moved on its own), and
the tree holds none. Imports under `if TYPE_CHECKING:` never run and only name types for
annotations; they are left out. A package's `__init__` counts as the module `fitwhisper.x`;
the implicit import of a parent package (importing `fitwhisper.data.audio` runs
`fitwhisper/data/__init__.py` first) is Python's mechanics, not an arrow of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules() -> dict[str, tuple[Path, bool]]:
    """`fitwhisper.data.audio` -> (its file, whether it is a package's __init__)."""
    found = {}
    for path in sorted((SRC / "fitwhisper").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = (path, name.endswith(".__init__"))
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under `if TYPE_CHECKING:` (they never run)."""
    skipped = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}."""
    modules = _modules()

    def known(name: str) -> str | None:  # `fitwhisper.x.y.Name` -> `fitwhisper.x.y`
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_only(tree)
        arrows: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x, from ..data import audio
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                # `from fitwhisper.data import audio` imports the module data.audio
                names = [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = known(name) if name.startswith("fitwhisper") else None
                if target and target != module:
                    arrows.setdefault(target, node.lineno)
        graph[module] = arrows
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: no recursion limit on a deep chain of imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _described(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    inside = set(component)
    arrows = [
        f"  {a} -> {b} (line {graph[a][b]})" for a in component for b in graph[a] if b in inside
    ]
    return " <-> ".join(component) + ":\n" + "\n".join(arrows)


def test_no_module_imports_itself_round_a_circle() -> None:
    graph = import_graph()
    found = [_described(c, graph) for c in circles(graph)]
    assert not found, "import circles (move what both need into a lower module):\n" + "\n".join(
        found
    )


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above fails when there is a circle: three modules round one, and a tail."""
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1, "d": 1}, "d": {}, "e": {"e": 1}}
    assert circles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_function_level_and_package_imports() -> None:
    graph = import_graph()
    # inside a function: train/setup.py imports the training items when a run is set up
    assert "fitwhisper.data.training_data" in graph["fitwhisper.train.setup"]
    # `from fitwhisper.cli import (check_data, ...)` in the cli package's __init__
    assert "fitwhisper.cli.transcribe" in graph["fitwhisper.cli"]
