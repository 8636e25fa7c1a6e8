"""A headless Chromium for the report's page tests (browser.py drives it).

`make test` installs Debian's `chromium` when it is missing and sets
FITWHISPER_BROWSER_TESTS=required: there a missing browser fails the page tests instead of
skipping them, so they cannot silently stop running in CI. Elsewhere they skip.
"""

from __future__ import annotations

import os

import pytest
from tests.report.browser import Browser, chromium_path

BROWSER_REQUIRED = os.environ.get("FITWHISPER_BROWSER_TESTS") == "required"


@pytest.fixture(scope="session")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        why = "no chromium on PATH (Debian: apt-get install chromium; `make test` installs it)"
        if BROWSER_REQUIRED:
            pytest.fail(f"FITWHISPER_BROWSER_TESTS=required and {why}")
        pytest.skip(why)
    return path


@pytest.fixture
def browser(chromium: str):
    with Browser(chromium) as b:
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            b.page(domain)
        yield b
