"""Forgetting guard: a regression set scored before and after fine-tuning.

Fine-tuning on one language makes Whisper forget others (English, punctuation). With
`fitwhisper train --regression_manifest english.jsonl`, that set is transcribed by generation
with the starting model and with the fine-tuned one, each clip in its own language and scored
by its own metric, and both are reported side by side (RUN/eval/regression.json). A
multilingual model also names each clip's language before and after (evaluate/language_id.py):
a fine-tune on Mandarin that starts calling English "zh" breaks `transcribe` without
`--language`. The rows come from rows.py, which also mixes rehearsal data into training.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import EvalConfig
from fitwhisper.evaluate import EvalResult
from fitwhisper.evaluate.language_id import LanguageId, identify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RegressionReport:
    """The regression set's scores before and after fine-tuning (after minus before)."""

    before: EvalResult
    after: EvalResult
    # Each clip's language as the model detects it, before and after (None: English-only).
    language_before: LanguageId | None = None
    language_after: LanguageId | None = None

    def as_dict(self) -> dict:
        a, b = self.after.score, self.before.score
        out = {
            "manifest": self.before.manifest,
            "metric": b.metric,
            "normalizer": b.normalizer,
            "n_utterances": b.n_utterances,
            "before": {b.metric: b.normalized, "errors": b.errors, "ref_units": b.ref_units},
            "after": {a.metric: a.normalized, "errors": a.errors, "ref_units": a.ref_units},
            "difference": {a.metric: a.normalized - b.normalized, "errors": a.errors - b.errors},
        }
        for name, res in (("before", self.before), ("after", self.after)):
            if "by_language" in (extra := res.extra_figures()):
                out[name]["by_language"] = extra["by_language"]
        if self.language_before is not None and self.language_after is not None:
            out["language_id"] = {
                "before": self.language_before.as_dict(),
                "after": self.language_after.as_dict(),
                "difference": self.language_after.share - self.language_before.share,
            }
        return out

    def write(self, out_dir: str | Path) -> Path:
        """regression.json, and each side's predictions in regression/{before,after}/."""
        out = Path(out_dir)
        self.before.write(out / "regression" / "before")
        self.after.write(out / "regression" / "after")
        path = out / "regression.json"
        text = json.dumps(self.as_dict(), indent=2, ensure_ascii=False)
        path.write_text(text + "\n", encoding="utf-8")
        return path

    def format_table(self) -> str:
        a, b = self.after.score, self.before.score
        name = b.metric.upper()
        text = (
            f"regression set {self.before.manifest} ({b.n_utterances} clips, {name}, "
            f"{b.normalizer}):\n"
            f"  before fine-tuning {100 * b.normalized:6.2f}%  ({b.errors} errors)\n"
            f"  after fine-tuning  {100 * a.normalized:6.2f}%  ({a.errors} errors)\n"
            f"  difference         {100 * (a.normalized - b.normalized):+6.2f}pt"
        )
        lb, la = self.language_before, self.language_after
        if lb is not None and la is not None:
            text += (
                f"\n  language detected right: {100 * lb.share:.1f}% before, "
                f"{100 * la.share:.1f}% after ({la.correct} of {len(la.expected)} clips)"
            )
        return text


class RegressionGuard:
    """Scores a checked regression set with a model; `before` and `after` hold the results.

    Args:
        rows: checked manifest rows (their own language column decides their prompt).
        processor: the run's WhisperProcessor.
        cfg: scoring options; `cfg.language` prompts rows without a language column.
    """

    def __init__(self, rows: Sequence, processor, manifest: str, cfg: EvalConfig) -> None:
        self.rows, self.processor, self.manifest, self.cfg = list(rows), processor, manifest, cfg
        self.before: EvalResult | None = None
        self.language_before: LanguageId | None = None

    def score(self, model, name: str) -> EvalResult:
        """Transcribe and score the set with `model` (its generation config is restored)."""
        import dataclasses

        from fitwhisper.data.features import SpeechDataset
        from fitwhisper.evaluate import audio_file, evaluate_model, scoring_language
        from fitwhisper.models.generation import language_for

        gen = model.generation_config
        saved = gen.language, gen.task, gen.forced_decoder_ids
        language, task = self.cfg.language, self.cfg.task
        per_row = [language_for(model, r.language or language) for r in self.rows]
        try:
            if per_row and per_row[0] is not None:
                # Each clip in its own language (evaluate_model groups mixed sets), also
                # after a run trained without language tokens (codeswitch.py).
                gen.forced_decoder_ids = None
                gen.language, gen.task = per_row[0], task
            res = evaluate_model(
                model,
                self.processor,
                SpeechDataset(self.rows, self.processor, language=language, task=task),
                [r.text for r in self.rows],
                [r.id for r in self.rows],
                # 30 s windows before and after, whatever the training window (run.py).
                dataclasses.replace(
                    self.cfg, language=scoring_language(self.rows, language), encoder_window="full"
                ),
                languages=per_row,
                model_name=name,
                audio=[audio_file(r) for r in self.rows],
            )
        finally:
            gen.language, gen.task, gen.forced_decoder_ids = saved
        return dataclasses.replace(res, manifest=self.manifest)

    def score_before(self, model) -> None:
        self.before = self.score(model, "before fine-tuning")
        self.language_before = identify(model, self.processor, self.rows, self.cfg.language)
        s = self.before.score
        log.info(
            "regression set before fine-tuning: %s %.2f%% on %d clips",
            s.metric.upper(),
            100 * s.normalized,
            s.n_utterances,
        )

    def score_after(self, model, out_dir: Path) -> RegressionReport:
        assert self.before is not None, "score_before first"
        report = RegressionReport(
            self.before,
            self.score(model, "after fine-tuning"),
            self.language_before,
            identify(model, self.processor, self.rows, self.cfg.language),
        )
        report.write(out_dir)
        for line in report.format_table().splitlines():
            log.info("%s", line)
        return report
