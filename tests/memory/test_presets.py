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
def test_the_docs_presets_match_the_planner():
    """Regenerates every cell: 126 searches, about 2-2.5 minutes on 2 CPU cores."""
    text = PAGE.read_text(encoding="utf-8")
    assert START in text and END in text
    fresh = replace_between_markers(text, presets_markdown())
    assert fresh == text, (
        "docs/memory-planning.md's presets differ from the planner's; run "
        "`fitwhisper plan --presets --readme docs/memory-planning.md`"
    )
