"""One self-contained HTML file: the page's data embedded as JSON, the renderer
(assets/page.js), its styles (assets/page.css) and the charting library (uPlot,
assets/uPlot.*, MIT) inline. No server, no network: it opens from disk."""

from __future__ import annotations

import math
from importlib import resources

from fitwhisper.safe_text import html_text, json_for_html


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
    payload = json_for_html(_clean(data))  # fitwhisper.safe_text: no text can end the script
    title = html_text(f"fitwhisper report: {data.get('title', '')}")
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
