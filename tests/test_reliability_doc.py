"""RELIABILITY.md names a test for every row: each one must exist, or the table lies."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def test_every_row_names_a_test_that_exists() -> None:
    text = (ROOT / "RELIABILITY.md").read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \|", line)]
    numbers = [int(line.split("|")[1]) for line in rows]
    assert numbers == list(range(1, len(rows) + 1)), "rows are numbered 1, 2, ... in order"
    missing = []
    for line in rows:
        ids = re.findall(r"`(tests/[^`:]+\.py)::(\w+)", line.split("|")[4])
        assert ids, f"row {line.split('|')[1].strip()} names no test"
        for file, name in ids:
            path = ROOT / file
            if not path.is_file() or name not in _test_functions(path):
                missing.append(f"{file}::{name}")
    assert missing == []
