"""What a scoring run found, and the files and tables it writes.

`EvalResult` is one model on one set of clips (per-clip records, metrics.json, the terminal
summary); `Comparison` two models on the same clips (`fitwhisper evaluate --compare`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.evaluate.plan import EvalPlan
from fitwhisper.evaluate.scorer import make_scorer
from fitwhisper.safe_text import json_text
from fitwhisper.scoring import Score, TextNormalizer, score, utterance_errors

UNITS = {"wer": "words", "cer": "characters", "mer": "tokens (Chinese characters, other words)"}


@dataclass(frozen=True)
class EvalResult:
    """Scores of one model on one set of clips, with what it wrote for each.

    ``skipped`` names the manifest rows left out by ``--bad_rows skip`` (``file:line
    problem``); they are not part of the score. ``languages`` are the clips' own language
    tags (a per-language breakdown is reported when they differ); ``expected_script`` the
    script the output should be in (its share is reported); ``output_script`` the conversion
    applied to the model's output before scoring, if any. ``audio`` (each clip's file) and
    ``hit_limit`` (generation stopped at the length limit) go into the per-clip records for
    the HTML report, where known.
    """

    score: Score
    references: tuple[str, ...]
    hypotheses: tuple[str, ...]
    ids: tuple[str, ...]
    normalizer: TextNormalizer
    model: str = ""
    manifest: str = ""
    skipped: tuple[str, ...] = ()
    languages: tuple[str | None, ...] = ()
    expected_script: str | None = None
    output_script: str | None = None
    audio: tuple[str | None, ...] = ()
    hit_limit: tuple[bool, ...] = ()
    plan: EvalPlan | None = None  # what was decided for this scoring, and why
    # `evaluate --long_form` (evaluate/long_form.py): boundary error and how it was found.
    long_form: dict | None = None

    def utterances(self) -> list[dict]:
        """One record per clip: texts as written and as scored, and the edit errors."""
        metric = self.score.metric
        out = []
        for i, (uid, ref, hyp) in enumerate(
            zip(self.ids, self.references, self.hypotheses, strict=True)
        ):
            ref_n, hyp_n = self.normalizer(ref), self.normalizer(hyp)
            e = utterance_errors(ref_n, hyp_n, metric)
            out.append(
                {
                    "id": uid,
                    "reference": ref,
                    "hypothesis": hyp,
                    "reference_normalized": ref_n,
                    "hypothesis_normalized": hyp_n,
                    "errors": e.errors,
                    "substitutions": e.substitutions,
                    "deletions": e.deletions,
                    "insertions": e.insertions,
                    "ref_units": e.ref_units,
                    "units": UNITS[metric],
                    # Per-clip rate; None where the normalised reference is empty.
                    metric: e.errors / e.ref_units if e.ref_units else None,
                    **({"audio": self.audio[i]} if self.audio else {}),
                    **({"language": self.languages[i]} if self.languages else {}),
                    **({"hit_limit": self.hit_limit[i]} if self.hit_limit else {}),
                }
            )
        return out

    def metrics(self, utterances: list[dict] | None = None) -> dict:
        """What metrics.json holds: raw and normalised rates, error counts, clips, skips."""
        utts = self.utterances() if utterances is None else utterances
        return {
            "model": self.model,
            "manifest": self.manifest,
            **self.score.as_dict(),
            "units": UNITS[self.score.metric],
            # Corpus totals equal the sums over clips: jiwer aligns each clip on its own.
            **{k: sum(u[k] for u in utts) for k in ("substitutions", "deletions", "insertions")},
            "skipped_rows": len(self.skipped),
            "skipped": list(self.skipped),
            "output_script": self.output_script or "none",
            **({"long_form": self.long_form} if self.long_form else {}),
            **self.extra_figures(),
        }

    def extra_figures(self) -> dict:
        """What Chinese and code-switched data need beside the main rate: MER beside CER
        (and CER beside MER), the share of output in the expected script, and a breakdown
        per language when the clips carry different language tags."""
        from fitwhisper.chinese_script import script_share

        s, refs, hyps = self.score, list(self.references), list(self.hypotheses)
        out: dict = {}
        if s.metric in ("cer", "mer"):
            other = "mer" if s.metric == "cer" else "cer"
            o = score(refs, hyps, other, self.normalizer)  # type: ignore[arg-type]
            out[other] = {
                other: o.normalized,
                "errors": o.errors,
                "ref_units": o.ref_units,
                "units": UNITS[other],
            }
        if self.expected_script:
            share = script_share(hyps, self.expected_script)  # type: ignore[arg-type]
            out["script"] = {
                **share.as_dict(),
                # The references' own share: what a perfect transcript would reach.
                "reference_share": script_share(refs, self.expected_script).share,  # type: ignore[arg-type]
            }
        tags = [lang or "unknown" for lang in self.languages]
        if len(set(tags)) > 1:
            out["by_language"] = {
                tag: _language_figures(
                    [r for r, t in zip(refs, tags, strict=True) if t == tag],
                    [h for h, t in zip(hyps, tags, strict=True) if t == tag],
                    tag,
                    self.normalizer,
                )
                for tag in sorted(set(tags))
            }
        return out

    def write(self, out_dir: str | Path) -> Path:
        """Write `predictions.jsonl` (per utterance), `metrics.json` and, when known,
        `eval_plan.json` (what was decided, and why) into out_dir."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        utts = self.utterances()
        _write_jsonl(out / "predictions.jsonl", utts)
        _write_json(out / "metrics.json", self.metrics(utts))
        if self.plan is not None:
            self.plan.write(out)
        return out

    def format_summary(self) -> str:
        """A few lines for the terminal: metric, normaliser, clips, raw and normalised rate."""
        s = self.score
        name = s.metric.upper()
        lines = [
            f"model           {self.model}",
            f"clips           {s.n_utterances}" + _skipped_note(self.skipped),
            f"metric          {name} over {UNITS[s.metric]}",
            f"normaliser      {s.normalizer}",
            *(self.plan.summary_lines() if self.plan else []),
            f"{name + ' raw':<15} {100 * s.raw:6.2f}%  (texts as written)",
            f"{name + ' normalised':<15} {100 * s.normalized:6.2f}%  "
            f"({s.errors} errors in {s.ref_units} reference {UNITS[s.metric]})",
        ]
        lines += _extra_lines(self.extra_figures(), self.output_script)
        if self.long_form:
            error = self.long_form["mean_boundary_error_s"]
            lines.append(
                f"{'boundary error':<15} "
                + (
                    f"{error:6.2f} s  (mean over {self.long_form['boundaries']} segment "
                    "boundaries of the references)"
                    if error is not None
                    else "  n/a   (no reference has times)"
                )
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class Comparison:
    """Two models scored on the same clips with the same metric and normaliser.

    ``model`` is the one under test (usually the fine-tune); ``baseline`` the one given by
    ``--compare`` (usually the zero-shot model). Differences are model minus baseline, so
    a negative difference means the model makes fewer errors.
    """

    model: EvalResult
    baseline: EvalResult

    def per_utterance(self) -> list[dict]:
        """Each clip's errors under both models, and whether the model did better."""
        metric = self.model.score.metric
        rows = []
        for a, b in zip(self.model.utterances(), self.baseline.utterances(), strict=True):
            change = "same"
            if a["errors"] != b["errors"]:
                change = "better" if a["errors"] < b["errors"] else "worse"
            rows.append(
                {
                    "id": a["id"],
                    "reference": a["reference"],
                    "hypothesis": a["hypothesis"],
                    "baseline_hypothesis": b["hypothesis"],
                    "errors": a["errors"],
                    "baseline_errors": b["errors"],
                    "ref_units": a["ref_units"],
                    "units": UNITS[metric],
                    "change": change,
                }
            )
        return rows

    def as_dict(self, per_utterance: list[dict] | None = None) -> dict:
        """What comparison.json holds."""
        utts = self.per_utterance() if per_utterance is None else per_utterance
        a, b = self.model.score, self.baseline.score
        return {
            "metric": a.metric,
            "normalizer": a.normalizer,
            "n_utterances": a.n_utterances,
            "model": _summary(self.model),
            "baseline": _summary(self.baseline),
            "difference": {
                a.metric: a.normalized - b.normalized,
                f"{a.metric}_raw": a.raw - b.raw,
                "errors": a.errors - b.errors,
            },
            "clips": {k: sum(u["change"] == k for u in utts) for k in ("better", "worse", "same")},
        }

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """Each model's predictions and metrics in OUT/<model-slug>/, plus comparison.json
        and comparison.jsonl (per clip) in OUT. Returns the folders and files written."""
        out = Path(out_dir)
        slug_a, slug_b = _distinct_slugs(self.model.model, self.baseline.model)
        written = {
            "model": self.model.write(out / slug_a),
            "baseline": self.baseline.write(out / slug_b),
        }
        utts = self.per_utterance()
        _write_jsonl(out / "comparison.jsonl", utts)
        _write_json(out / "comparison.json", self.as_dict(utts))
        written["comparison"] = out / "comparison.json"
        return written

    def format_table(self) -> str:
        """Both models' raw and normalised rates side by side, and the difference."""
        a, b = self.model.score, self.baseline.score
        name = a.metric.upper()
        d = self.as_dict()
        names = [self.model.model, f"{self.baseline.model} (--compare)", "difference"]
        w = max(len(n) for n in names)
        head = f"{'model':<{w}}  {name + ' raw':>10}  {name + ' normalised':>15}  {'errors':>8}"
        lines = [
            f"{name} over {UNITS[a.metric]} on {a.n_utterances} clips"
            + _skipped_note(self.model.skipped),
            f"normaliser: {a.normalizer}",
            "",
            head,
            "-" * len(head),
        ]
        for n, s in ((names[0], a), (names[1], b)):
            lines.append(
                f"{n:<{w}}  {100 * s.raw:>9.2f}%  {100 * s.normalized:>14.2f}%  {s.errors:>8}"
            )
        diff = d["difference"]
        lines.append(
            f"{names[2]:<{w}}  {100 * diff[a.metric + '_raw']:>+8.2f}pt  "
            f"{100 * diff[a.metric]:>+13.2f}pt  {diff['errors']:>+8}"
        )
        for label, key in (("MER", "mer"), ("CER", "cer")):
            if key in d["model"] and key != a.metric:
                lines.append(
                    f"{label + ' normalised':<{w}}  {100 * d['model'][key]:>9.2f}% "
                    f"(model)  {100 * d['baseline'][key]:.2f}% (--compare)"
                )
        if "script" in d["model"]:
            sm, sb = d["model"]["script"], d["baseline"]["script"]
            lines.append(
                f"{sm['expected_script']} share of output Han characters: "
                f"{100 * sm['share_in_expected_script']:.2f}% (model), "
                f"{100 * sb['share_in_expected_script']:.2f}% (--compare)"
            )
        c = d["clips"]
        lines.append(
            f"\nper clip: {c['better']} better, {c['worse']} worse, {c['same']} the same "
            f"(errors of {self.model.model} against {self.baseline.model})"
        )
        return "\n".join(lines)


def model_slug(spec: str) -> str:
    """A folder name for a model spec: `offline/tiny.en` -> `offline-tiny.en`,
    `runs/exp1/checkpoint-500` -> `exp1-checkpoint-500`, `runs/exp1/final` -> `exp1-final`."""
    text = str(spec).rstrip("/\\")
    path = Path(text).expanduser()
    if path.exists():
        parts = path.resolve().parts
        keep = (
            parts[-2:]
            if parts[-1] == "final" or parts[-1].startswith("checkpoint-")
            else parts[-1:]
        )
        text = "-".join(keep)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return slug or "model"


# --- helpers ------------------------------------------------------------------------------


def _language_figures(refs: list[str], hyps: list[str], tag: str, normalizer) -> dict:
    """One language's clips scored by that language's own metric and default normaliser
    (with the run's OpenCC conversion): CER for zh, WER with Whisper's normaliser for en."""
    lang = None if tag == "unknown" else tag
    metric, norm = make_scorer(lang, opencc=normalizer.opencc_config)
    s = score(refs, hyps, metric, norm)
    return {
        "metric": metric,
        metric: s.normalized,
        "errors": s.errors,
        "ref_units": s.ref_units,
        "n_utterances": s.n_utterances,
        "normalizer": s.normalizer,
    }


def _extra_lines(extra: dict, output_script: str | None) -> list[str]:
    lines = []
    for name in ("cer", "mer"):
        if name in extra:
            e = extra[name]
            lines.append(
                f"{name.upper() + ' normalised':<15} {100 * e[name]:6.2f}%  "
                f"({e['errors']} errors in {e['ref_units']} reference {e['units']})"
            )
    if output_script:
        lines.append(f"output script   converted to {output_script} before scoring")
    if "script" in extra:
        sc = extra["script"]
        wrong = "".join(list(sc["most_frequent_wrong"])[:10])
        lines.append(
            f"{sc['expected_script'] + ' share':<15} {100 * sc['share_in_expected_script']:6.2f}%"
            f"  of {sc['han_characters']} Han characters in the output"
            f" (references: {100 * sc['reference_share']:.2f}%)"
            + (f"; wrong script: {wrong}" if wrong else "")
        )
    for tag, f in extra.get("by_language", {}).items():
        m = f["metric"]
        lines.append(
            f"{'  ' + tag:<15} {100 * f[m]:6.2f}%  {m.upper()} on {f['n_utterances']} clips"
        )
    return lines


def _summary(res: EvalResult) -> dict:
    s = res.score
    extra = res.extra_figures()
    return {
        "name": res.model,
        s.metric: s.normalized,
        f"{s.metric}_raw": s.raw,
        "errors": s.errors,
        "ref_units": s.ref_units,
        **{m: extra[m][m] for m in ("cer", "mer") if m in extra},
        **({"script": extra["script"]} if "script" in extra else {}),
        **({"by_language": extra["by_language"]} if "by_language" in extra else {}),
    }


def _distinct_slugs(a: str, b: str) -> tuple[str, str]:
    slug_a, slug_b = model_slug(a), model_slug(b)
    if slug_a == slug_b:
        slug_a, slug_b = f"{slug_a}-model", f"{slug_b}-baseline"
    return slug_a, slug_b


def _skipped_note(skipped: Sequence[str]) -> str:
    return f" ({len(skipped)} rows skipped by --bad_rows skip)" if skipped else ""


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json_text(data, indent=2) + "\n", encoding="utf-8")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json_text(row) + "\n")
