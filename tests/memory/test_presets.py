"""The guide's presets table (docs/memory-planning.md) is the planner's output, and stays so."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.errors import ConfigError
from fitwhisper.memory.presets import END, START, presets_markdown, replace_between_markers

PAGE = Path(__file__).resolve().parents[2] / "docs" / "memory-planning.md"


def test_replace_between_markers_rewrites_only_the_table():
    text = f"before\n{START}\nold table\n{END}\nafter\n"
    assert replace_between_markers(text, "new\n") == f"before\n{START}\nnew\n{END}\nafter\n"
    with pytest.raises(ConfigError, match="no <!-- presets:start --> ... <!-- presets:end -->"):
        replace_between_markers("no markers here", "new\n")


@pytest.mark.slow
def test_the_docs_presets_match_the_planner(background_result):
    """Regenerates every cell: 126 searches, about 150 s of CPU on 2 cores. In a run of the
    suite they are computed from the start on idle cores (tests/background.py)."""
    text = PAGE.read_text(encoding="utf-8")
    assert START in text and END in text
    table = background_result() if background_result else presets_markdown()
    fresh = replace_between_markers(text, table)
    assert fresh == text, (
        "docs/memory-planning.md's presets differ from the planner's; run "
        "`fitwhisper plan --presets --readme docs/memory-planning.md`"
    )
