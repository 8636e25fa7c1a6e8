"""The README stays a front door, and its links and commands, and the guide's, stay true.

`make docs` (mkdocs build --strict) checks the links inside docs/; these checks also cover
README.md, which the site does not build, and run in the plain test suite."""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path

import pytest
import yaml

from fitwhisper.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted([README, *DOCS.glob("*.md")])
README_MAX_LINES = 320

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def _prose(text: str) -> str:
    """The text outside code blocks and code spans, where links are links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (mkdocs), which GitHub's agrees with on these headings."""
    text = unicodedata.normalize("NFKD", heading.replace("`", ""))
    text = re.sub(r"[^\w\s-]", "", text.encode("ascii", "ignore").decode()).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))}


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move the detail into a "
        "page of docs/ and link it"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto: ...
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert broken == [], f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_site_lists_every_page_of_docs() -> None:
    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        items = nav.values() if isinstance(nav, dict) else nav
        return [p for item in items for p in pages(item)]

    nav = pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))


def _commands(text: str) -> list[list[str]]:
    """Each `fitwhisper COMMAND ...` of the bash blocks, continuation lines joined, cut at a
    comment, pipe or redirect."""
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "fitwhisper" not in words:
                continue
            words = words[words.index("fitwhisper") + 1 :]
            cut = [i for i, w in enumerate(words) if w in ("|", ">", ">>", "&&", ";")]
            found.append(words[: cut[0]] if cut else words)
    return found


def test_the_commands_shown_take_the_flags_shown() -> None:
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    wrong, seen = [], 0
    for page in PAGES:
        for words in _commands(page.read_text(encoding="utf-8")):
            seen += 1
            name = words[0] if words else ""
            if name not in subcommands:
                wrong.append(f"{page.name}: fitwhisper {name!r} is not a command")
                continue
            known = subcommands[name]._option_string_actions
            for word in words[1:]:
                flag = word.split("=", 1)[0]
                if flag.startswith("--") and flag not in known:
                    wrong.append(f"{page.name}: fitwhisper {name} has no {flag}")
    assert seen >= 20, "the README and the guide show the commands in ```bash blocks"
    assert wrong == []
