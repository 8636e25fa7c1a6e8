"""Helpers of the page tests: open a report, screenshot it, make evaluation folders."""

from __future__ import annotations

import json
from pathlib import Path

from tests.report.browser import Browser


def open_page(b: Browser, page: Path) -> float:
    """Load `page` from disk; returns the page's own milliseconds from navigation to the
    renderer's end (performance.now() at its last line)."""
    b.page("Page.navigate", url=page.resolve().as_uri())
    b.wait_for("document.body && document.body.dataset.ready === '1'")
    return float(b.evaluate("document.body.dataset.renderMs"))


def full_screenshot(b: Browser, path: Path, height: int | None = None) -> Path:
    h = height or int(b.evaluate("document.documentElement.scrollHeight"))
    b.page(
        "Emulation.setDeviceMetricsOverride",
        width=1400,
        height=min(h, 4000),
        deviceScaleFactor=1,
        mobile=False,
    )
    b.screenshot(path)
    print(f"\nscreenshot: {path}")
    return path


def generated_evaluation(folder: Path, n: int, audio: list[Path], *, worse: int = 0) -> Path:
    """An `evaluate --output_dir` folder of `n` generated clips: every third clip has one
    substituted word, clip i plays audio[i % len(audio)]; `worse` adds an inserted word to
    the first `worse` clips (a second model that did worse there)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, errors, units = [], 0, 0
    for i in range(n):
        ref = f"clip {i} says the quick brown fox jumps"
        hyp = ref.replace("brown", "round") if i % 3 == 0 else ref
        if i < worse:
            hyp += " again"
        s, ins = int(i % 3 == 0), int(i < worse)
        rows.append(
            {
                "id": f"clip_{i:05d}",
                "reference": ref,
                "hypothesis": hyp,
                "reference_normalized": ref,
                "hypothesis_normalized": hyp,
                "errors": s + ins,
                "substitutions": s,
                "deletions": 0,
                "insertions": ins,
                "ref_units": 7,
                "units": "words",
                "wer": (s + ins) / 7,
                "audio": str(audio[i % len(audio)]),
                "language": "en",
                "hit_limit": False,
            }
        )
        errors, units = errors + s + ins, units + 7
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = {
        "model": "generated",
        "manifest": "",
        "metric": "wer",
        "wer": errors / units,
        "wer_raw": errors / units,
        "errors": errors,
        "ref_units": units,
        "n_utterances": n,
        "units": "words",
        "deletions": 0,
        "insertions": worse,
        "substitutions": sum(r["substitutions"] for r in rows),
        "normalizer": "none",
    }
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return folder
