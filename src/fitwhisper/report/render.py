"""One self-contained HTML file: the page's data embedded as JSON, the renderer
(assets/page.js), its styles (assets/page.css) and the charting library (uPlot,
assets/uPlot.*, MIT) inline. No server, no network: it opens from disk."""

from __future__ import annotations

import json
import math
from importlib import resources


def _asset(name: str) -> str:
    return (resources.files("fitwhisper") / "report" / "assets" / name).read_text(encoding="utf-8")


def _clean(value):
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def render(data: dict) -> str:
    """The page for `data` (report/gather.py or report/compare.py)."""
    # "</" would end the script element early; "\u2028" breaks old parsers.
    payload = (
        json.dumps(_clean(data), ensure_ascii=False, separators=(",", ":"))
        .replace("</", "<\\/")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )
    title = _escape(f"fitwhisper report: {data.get('title', '')}")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{title}</title>"
        f"<style>{_asset('uPlot.min.css')}</style><style>{_asset('page.css')}</style>"
        "</head><body><main id='app'><p>Loading the report…</p></main>"
        f"<script id='report-data' type='application/json'>{payload}</script>"
        f"<script>{_asset('uPlot.iife.min.js')}</script>"
        f"<script>{_asset('page.js')}</script>"
        "</body></html>\n"
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
