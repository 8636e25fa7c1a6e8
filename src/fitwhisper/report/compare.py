"""Two runs or evaluations side by side: the options that differ, both curves, and the
clips both scored, clip by clip (better, worse, the same) with the paired-bootstrap
interval of the difference."""

from __future__ import annotations

from pathlib import Path

from fitwhisper.report.clips import COLUMNS
from fitwhisper.report.gather import gather, paired_change, read_jsonl

# The comparison table's row, in this order.
PAIR_COLUMNS = (
    "id",
    "audio",
    "duration",
    "speaker",
    "language",
    "units",
    "errors_a",
    "errors_b",
    "change",
    "ops_a",
    "ops_b",
)


def predictions_file(folder: Path) -> Path:
    eval_dir = folder / "eval"
    return (eval_dir if eval_dir.is_dir() else folder) / "predictions.jsonl"


def gather_pair(a: Path, b: Path, report_dir: Path, *, embed_audio: bool = False) -> dict:
    """The page's data for A against B (differences are B minus A)."""
    sides = [gather(p, report_dir, embed_audio=embed_audio) for p in (a, b)]
    out: dict = {"kind": "pair", "title": f"{sides[0]['title']} vs {sides[1]['title']}"}
    out["created"] = sides[0]["created"]
    out["sides"] = [_side(s) for s in sides]
    out["option_differences"] = _option_differences(sides[0], sides[1])
    preds = [read_jsonl(predictions_file(p)) for p in (a, b)]
    out["change"] = paired_change(preds[0], preds[1])
    out["columns"] = list(PAIR_COLUMNS)
    out["rows"] = _pair_rows(sides[0], sides[1])
    return out


def _side(side: dict) -> dict:
    ev = side.get("evaluation") or {}
    return {
        "title": side["title"],
        "folder": side["folder"],
        "kind": side["kind"],
        "metric": ev.get("metric"),
        "metrics": ev.get("metrics"),
        "curves": side.get("curves"),
        "hallucination": ev.get("hallucination"),
    }


def _option_differences(a: dict, b: dict) -> list[list]:
    """[section.option, A's value, B's value] for every option the two runs set apart."""
    out = []
    oa, ob = a.get("options") or {}, b.get("options") or {}
    for section in sorted(set(oa) | set(ob)):
        sa, sb = oa.get(section) or {}, ob.get(section) or {}
        for key in sorted(set(sa) | set(sb)):
            if key != "output_dir" and sa.get(key) != sb.get(key):
                out.append([f"{section}.{key}", sa.get(key), sb.get(key)])
    return out


def _pair_rows(a: dict, b: dict) -> list[list]:
    """Clips both sides scored, the most changed first."""
    col = {k: COLUMNS.index(k) for k in COLUMNS}
    rows_a = {r[0]: r for r in (a.get("evaluation") or {}).get("rows", [])}
    out = []
    for rb in (b.get("evaluation") or {}).get("rows", []):
        ra = rows_a.get(rb[0])
        if ra is None:
            continue
        ea, eb = ra[col["errors"]], rb[col["errors"]]
        change = "same" if ea == eb else ("better" if eb < ea else "worse")
        out.append(
            [
                rb[0],
                rb[col["audio"]] or ra[col["audio"]],
                rb[col["duration"]] or ra[col["duration"]],
                rb[col["speaker"]] or ra[col["speaker"]],
                rb[col["language"]] or ra[col["language"]],
                rb[col["units"]],
                ea,
                eb,
                change,
                ra[col["ops"]],
                rb[col["ops"]],
            ]
        )
    out.sort(key=lambda r: (-abs(r[7] - r[6]), r[0]))
    return out
