"""Both transcription engines have the shape `run` drives (transcribe/engine.py `Engine`):
the same methods with the same parameters, and the attributes it reads."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from fitwhisper.transcribe.engine import Engine

SRC = Path(__file__).resolve().parents[2] / "src" / "fitwhisper" / "transcribe"


@pytest.mark.parametrize(
    ("module", "cls"), [("hf_engine", "TransformersEngine"), ("ct2_engine", "CT2Engine")]
)
def test_each_engine_has_the_shape_run_drives(module: str, cls: str) -> None:
    import importlib

    engine = getattr(importlib.import_module(f"fitwhisper.transcribe.{module}"), cls)
    for method in ("transcribe", "stream"):
        want = inspect.signature(getattr(Engine, method))
        got = inspect.signature(getattr(engine, method))
        assert list(got.parameters) == list(want.parameters), (cls, method)
        assert str(got.return_annotation) == str(want.return_annotation), (cls, method)
    # The attributes run and the command read: set in the class or by its constructor.
    tree = ast.parse((SRC / f"{module}.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    assigned = {
        t.attr if isinstance(t, ast.Attribute) else t.id
        for n in ast.walk(node)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name | ast.Attribute)
    }
    wanted = set(inspect.get_annotations(Engine)) - {"language_why"}  # set by make_engine
    assert wanted <= assigned, (cls, wanted - assigned)
