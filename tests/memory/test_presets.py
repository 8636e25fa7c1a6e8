"""The README's presets table is the planner's output, and stays so."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.errors import ConfigError
from fitwhisper.memory.presets import END, START, presets_markdown, replace_between_markers

README = Path(__file__).resolve().parents[2] / "README.md"


def test_replace_between_markers_rewrites_only_the_table():
    text = f"before\n{START}\nold table\n{END}\nafter\n"
    assert replace_between_markers(text, "new\n") == f"before\n{START}\nnew\n{END}\nafter\n"
    with pytest.raises(ConfigError, match="no <!-- presets:start --> ... <!-- presets:end -->"):
        replace_between_markers("no markers here", "new\n")


@pytest.mark.slow
def test_readme_presets_match_the_planner():
    """Regenerates every cell: 126 searches, about 2-2.5 minutes on 2 CPU cores."""
    text = README.read_text(encoding="utf-8")
    assert START in text and END in text
    fresh = replace_between_markers(text, presets_markdown())
    assert fresh == text, (
        "README.md's presets differ from the planner's; run "
        "`fitwhisper plan --presets --readme README.md`"
    )
