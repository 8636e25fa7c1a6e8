"""docs/architecture.md's layer table names every module and package of `src/fitwhisper`,
each at the layer the import check gives it (tests/test_package_shape.py), and nothing
that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_package_shape import LAYERS

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "fitwhisper"


def _table() -> dict[str, int]:
    """Each unit the table names (a package as `name/`) -> its layer."""
    named = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"-?\d+", cells[0]):
            for unit in re.findall(r"`([^`]+)`", cells[1]):
                named[unit] = int(cells[0])
    return named


def _units() -> set[str]:
    """The package's top-level modules and packages (`__init__` is the package itself)."""
    modules = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    packages = {f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    return modules | packages


def test_the_layer_table_names_every_unit_at_its_layer() -> None:
    named = _table()
    assert set(named) == _units(), (
        f"in the code but not in docs/architecture.md: {sorted(_units() - set(named))}; "
        f"in the table but not in the code: {sorted(set(named) - _units())}"
    )
    wrong = {
        unit: (layer, LAYERS[unit.rstrip("/")])
        for unit, layer in named.items()
        if LAYERS[unit.rstrip("/")] != layer
    }
    assert wrong == {}, "unit: (the table's layer, the import check's)"
