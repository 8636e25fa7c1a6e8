"""Everything a run folder or an evaluation folder holds, read into one dict for the page.

A run folder (`fitwhisper train`): trainer_state.json (the logged curves), fitwhisper.yaml
(options, versions), data_report.json and data_report_*.csv (clips used and skipped), a
plan (`--plan`), final/config.json (the encoder input chosen), eval/ (after, before,
short window, regression set). An evaluation folder (`fitwhisper evaluate --output_dir`):
predictions.jsonl and metrics.json. Files a run did not write are simply absent from the
dict; the page leaves their sections out.
"""

from __future__ import annotations

import csv
import datetime
import json
from pathlib import Path

import yaml

from fitwhisper.report.clips import (
    COLUMNS,
    clip_rows,
    confusions,
    data_report_meta,
    manifest_meta,
    read_jsonl,
)
from fitwhisper.report.stats import by_duration, by_key, paired_bootstrap
from fitwhisper.report.unreadable import note

# Trainer's per-log figures the page draws, as log_history names them.
TRAIN_KEYS = ("loss", "learning_rate", "grad_norm", "clips_per_second")


def kind_of(folder: Path) -> str:
    """ "run", "evaluation" or "comparison" (evaluate --compare's folder); "" when neither."""
    if (folder / "trainer_state.json").is_file() or (folder / "fitwhisper.yaml").is_file():
        return "run"
    if (folder / "comparison.json").is_file():
        return "comparison"
    if (folder / "predictions.jsonl").is_file():
        return "evaluation"
    return ""


def gather(folder: Path, report_dir: Path, *, embed_audio: bool = False) -> dict:
    """The page's data for one run or evaluation folder."""
    kind = kind_of(folder)
    out: dict = {
        "kind": kind,
        "title": folder.resolve().name,
        "folder": str(folder),
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    if kind == "run":
        out.update(_run_files(folder))
    scored = folder / "eval" if kind == "run" else folder
    if (scored / "predictions.jsonl").is_file():
        out["evaluation"] = scored_set(
            scored,
            report_dir,
            meta=data_report_meta(folder),
            before_dir=scored / "before" if kind == "run" else None,
            manifest=_eval_manifest(out, scored),
            base=Path.cwd(),
            embed_audio=embed_audio,
        )
    if (scored / "short_window" / "metrics.json").is_file():
        out["short_window"] = _json(scored / "short_window" / "metrics.json")
    if (scored / "regression.json").is_file():
        out["regression"] = _regression(scored)
    return out


def scored_set(
    folder: Path,
    report_dir: Path,
    *,
    meta: dict | None = None,
    before_dir: Path | None = None,
    manifest: str | None = None,
    base: Path | None = None,
    embed_audio: bool = False,
) -> dict:
    """One scored set: its metrics, the clip table, confusions, breakdowns, hallucination
    counts and, where the starting model scored the same clips, before against after."""
    metrics = _json(folder / "metrics.json") or {}
    metric = metrics.get("metric", "wer")
    predictions = read_jsonl(folder / "predictions.jsonl")
    before = None
    if before_dir and (before_dir / "predictions.jsonl").is_file():
        before = read_jsonl(before_dir / "predictions.jsonl")
    meta = dict(meta or {})
    speakers = manifest_meta(manifest or metrics.get("manifest"), base or Path.cwd())
    for cid, extra in speakers.items():
        meta.setdefault(cid, {}).update(extra)
    rows = clip_rows(
        predictions, metric, report_dir, meta=meta, before=before, embed_audio=embed_audio
    )
    flags = COLUMNS.index("flags")
    out = {
        "metric": metric,
        "metrics": metrics,
        "columns": list(COLUMNS),
        "rows": rows,
        "confusions": confusions(rows),
        "by_duration": by_duration(rows, COLUMNS),
        "by_speaker": by_key(rows, COLUMNS, "speaker"),
        "by_language": by_key(rows, COLUMNS, "language"),
        "hallucination": {
            sign: sum(sign in r[flags] for r in rows)
            for sign in ("repeats", "text on a short clip", "hit the generation limit")
        },
    }
    if before is not None:
        out["before"] = _json(before_dir / "metrics.json")
        out["change"] = paired_change(before, predictions)
    return out


def paired_change(a: list[dict], b: list[dict]) -> dict:
    """B against A on the clips both scored: clips better, worse, the same, and the
    paired-bootstrap interval of B's rate minus A's."""
    by_id = {u["id"]: u for u in a}
    pairs = [(by_id[u["id"]], u) for u in b if u["id"] in by_id]
    out = paired_bootstrap(
        [x["errors"] for x, _ in pairs],
        [y["errors"] for _, y in pairs],
        [x["ref_units"] for x, _ in pairs],
    )
    out["better"] = sum(y["errors"] < x["errors"] for x, y in pairs)
    out["worse"] = sum(y["errors"] > x["errors"] for x, y in pairs)
    out["same"] = len(pairs) - out["better"] - out["worse"]
    return out


def curves(log_history: list[dict]) -> dict:
    """Per-log series from Trainer's log_history: training figures and memory at each
    logging step, evaluation figures at each evaluation."""
    train = [h for h in log_history if "loss" in h]
    evals = [h for h in log_history if any(k.startswith("eval_") for k in h)]
    mem_keys = sorted({k for h in train for k in h if k.startswith("mem_")})
    eval_keys = sorted(
        {k for h in evals for k in h if k.startswith("eval_")}
        - {"eval_runtime", "eval_samples_per_second", "eval_steps_per_second"}
    )
    return {
        "step": [h["step"] for h in train],
        "epoch": [h.get("epoch") for h in train],
        **{k: [h.get(k) for h in train] for k in TRAIN_KEYS if any(k in h for h in train)},
        "memory": {k: [h.get(k) for h in train] for k in mem_keys},
        "eval_step": [h["step"] for h in evals],
        "eval": {k: [h.get(k) for h in evals] for k in eval_keys},
    }


def _run_files(run: Path) -> dict:
    out: dict = {}
    state = _json(run / "trainer_state.json")
    if state:
        out["curves"] = curves(state.get("log_history", []))
        out["progress"] = {k: state.get(k) for k in ("global_step", "max_steps", "epoch")}
    record = _yaml(run / "fitwhisper.yaml")
    if record:
        out["options"] = {k: record[k] for k in ("model", "data", "train") if k in record}
        out["versions"] = record.get("versions")
        out["manifests"] = record.get("manifests")
    out["plan"] = _plan(run, record or {})
    config = _json(run / "final" / "config.json") or {}
    out["encoder_input"] = config.get("fitwhisper_encoder_input")
    out["data_report"] = _json(run / "data_report.json")
    out["skipped_rows"] = {
        split: _skipped(run / f"data_report_{split}.csv") for split in ("train", "eval")
    }
    out["hours"] = {split: _hours(run / f"data_report_{split}.csv") for split in ("train", "eval")}
    return out


def _plan(run: Path, record: dict) -> dict | None:
    """The memory plan the run followed: RUN/plan.json, else the `--plan` file it names."""
    named = (record.get("train") or {}).get("plan")
    for path in (run / "plan.json", Path(named) if named else None):
        if path and path.is_file():
            return _json(path)
    return None


def _regression(scored: Path) -> dict:
    out = _json(scored / "regression.json") or {}
    before = scored / "regression" / "before" / "predictions.jsonl"
    after = scored / "regression" / "after" / "predictions.jsonl"
    if before.is_file() and after.is_file():
        out["change"] = paired_change(read_jsonl(before), read_jsonl(after))
    return out


def _eval_manifest(out: dict, scored: Path) -> str | None:
    manifests = out.get("manifests") or {}
    return (manifests.get("eval") or {}).get("path")


def _csv_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    try:
        with path.open(encoding="utf-8", newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, ValueError, csv.Error) as e:  # ValueError: not UTF-8
        note(path, e)
        return []


def _skipped(path: Path) -> list[dict]:
    """Rows the data check left out, and why (at most 200: the JSON files have them all)."""
    bad = [r for r in _csv_rows(path) if r.get("ok") == "False"]
    return [{k: r.get(k) for k in ("where", "id", "problems", "details")} for r in bad[:200]]


def _hours(path: Path) -> float | None:
    rows = [r for r in _csv_rows(path) if r.get("ok") == "True" and r.get("duration_s")]
    return sum(float(r["duration_s"]) for r in rows) / 3600 if rows else None


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None  # not written by this run: its section is left out
    except (OSError, ValueError) as e:
        note(path, e)
        return None
    if not isinstance(data, dict):
        note(path, f"holds a {type(data).__name__}, not an object")
        return None
    return data


def _yaml(path: Path) -> dict | None:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, yaml.YAMLError) as e:
        note(path, str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None
    if not isinstance(data, dict):
        note(path, "holds no mapping of option: value")
        return None
    return data
