"""Forgetting guard: a regression set scored before and after fine-tuning, and rehearsal
rows mixed into the training stream.

Fine-tuning on one language makes Whisper forget others (English, punctuation). With
`fitwhisper train --regression_manifest english.jsonl`, that set is transcribed by generation
with the starting model and with the fine-tuned one, each clip in its own language and scored
by its own metric, and both are reported side by side (RUN/eval/regression.json).
`--rehearsal_manifest` + `--rehearsal_share` mix such data into training instead.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.evaluate import EvalResult

log = logging.getLogger(__name__)


def mix_rehearsal(
    train_rows: Sequence, rehearsal_rows: Sequence, share: float, seed: int
) -> tuple[list, int]:
    """Training rows plus rehearsal rows making up `share` of the result; returns the rows
    and how many were added. Sampled with `seed` (the same rows on resume), with
    repetition only when the rehearsal set is smaller than what is asked."""
    if not rehearsal_rows or share <= 0:
        return list(train_rows), 0
    n = round(share / (1 - share) * len(train_rows))
    rng = random.Random(seed)
    rows = list(rehearsal_rows)
    picked = [*rows * (n // len(rows)), *rng.sample(rows, n % len(rows))]
    return [*train_rows, *picked], n


@dataclass(frozen=True)
class RegressionReport:
    """The regression set's scores before and after fine-tuning (after minus before)."""

    before: EvalResult
    after: EvalResult

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
        return (
            f"regression set {self.before.manifest} ({b.n_utterances} clips, {name}, "
            f"{b.normalizer}):\n"
            f"  before fine-tuning {100 * b.normalized:6.2f}%  ({b.errors} errors)\n"
            f"  after fine-tuning  {100 * a.normalized:6.2f}%  ({a.errors} errors)\n"
            f"  difference         {100 * (a.normalized - b.normalized):+6.2f}pt"
        )


def prepare_rows(model_cfg, data_cfg, train_cfg, processor, train_rows, eval_rows):
    """Training and eval rows in the output script and with the language-token strategy,
    rehearsal rows mixed in (counted), and the regression guard (None without the option)."""
    from fitwhisper.chinese_script import rows_in_script
    from fitwhisper.codeswitch import rows_for_strategy
    from fitwhisper.evaluate import checked_rows

    train_rows = rows_for_strategy(rows_in_script(train_rows, model_cfg.output_script),
                                   data_cfg.language_token)  # fmt: skip
    eval_rows = rows_for_strategy(eval_rows, data_cfg.language_token)
    if data_cfg.rehearsal_manifest:
        extra, skipped = checked_rows(data_cfg.rehearsal_manifest, processor, data_cfg.bad_rows)
        train_rows, added = mix_rehearsal(train_rows, extra, data_cfg.rehearsal_share,
                                          train_cfg.seed)  # fmt: skip
        log.info(
            "rehearsal: %d rows drawn from %d usable of %s (%d skipped) = %.1f%% of %d "
            "training rows",
            added, len(extra), data_cfg.rehearsal_manifest, len(skipped),
            100 * added / len(train_rows), len(train_rows),
        )  # fmt: skip
    regression = None
    if train_cfg.regression_manifest:
        rows, skipped = checked_rows(train_cfg.regression_manifest, processor, data_cfg.bad_rows)
        if skipped:
            log.warning("regression set: %d rows skipped (--bad_rows skip)", len(skipped))
        regression = RegressionGuard(
            rows, processor, train_cfg.regression_manifest, language=model_cfg.language,
            task=model_cfg.task, batch_size=train_cfg.per_device_eval_batch_size,
            generation_max_length=train_cfg.generation_max_length,
        )  # fmt: skip
    return train_rows, eval_rows, regression


def option_problems(model_cfg, data_cfg, train_cfg) -> list[str]:
    """Problems of the guard, rehearsal, language-token and output-script options."""
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.errors import ConfigError

    problems = []
    if not 0 < data_cfg.rehearsal_share < 1:
        problems.append(f"--rehearsal_share must be in (0, 1), got {data_cfg.rehearsal_share}")
    for flag, path in (("--rehearsal_manifest", data_cfg.rehearsal_manifest),
                       ("--regression_manifest", train_cfg.regression_manifest)):  # fmt: skip
        if path and not Path(path).exists():
            problems.append(f"{flag} {path}: no such file or folder")
    if data_cfg.language_token == "fixed" and not model_cfg.language:
        problems.append("--language_token fixed needs --language (the token every row gets)")
    try:
        check_output_script(model_cfg.output_script)
    except ConfigError as e:
        problems.append(f"--output_script: {e.message}; {e.hint}")
    return problems


class RegressionGuard:
    """Scores a checked regression set with a model; `before` and `after` hold the results.

    Args:
        rows: checked manifest rows (their own language column decides their prompt).
        processor: the run's WhisperProcessor.
        language: prompt for rows without a language column.
    """

    def __init__(
        self,
        rows: Sequence,
        processor,
        manifest: str,
        *,
        language: str | None,
        task: str,
        batch_size: int,
        generation_max_length: int,
    ) -> None:
        self.rows, self.processor, self.manifest = list(rows), processor, manifest
        self.language, self.task = language, task
        self.batch_size, self.generation_max_length = batch_size, generation_max_length
        self.before: EvalResult | None = None

    def score(self, model, name: str) -> EvalResult:
        """Transcribe and score the set with `model` (its generation config is restored)."""
        import dataclasses

        from fitwhisper.data.features import SpeechDataset
        from fitwhisper.evaluate import evaluate_model, scoring_language
        from fitwhisper.models.generation import language_for

        gen = model.generation_config
        saved = gen.language, gen.task, gen.forced_decoder_ids
        per_row = [language_for(model, r.language or self.language) for r in self.rows]
        try:
            if per_row and per_row[0] is not None:
                # Each clip in its own language (evaluate_model groups mixed sets), also
                # after a run trained without language tokens (codeswitch.py).
                gen.forced_decoder_ids = None
                gen.language, gen.task = per_row[0], self.task
            res = evaluate_model(
                model,
                self.processor,
                SpeechDataset(self.rows, self.processor, language=self.language, task=self.task),
                [r.text for r in self.rows],
                [r.id for r in self.rows],
                language=scoring_language(self.rows, self.language),
                batch_size=self.batch_size,
                generation_max_length=self.generation_max_length,
                languages=per_row,
                model_name=name,
            )
        finally:
            gen.language, gen.task, gen.forced_decoder_ids = saved
        return dataclasses.replace(res, manifest=self.manifest)

    def score_before(self, model) -> None:
        self.before = self.score(model, "before fine-tuning")
        s = self.before.score
        log.info(
            "regression set before fine-tuning: %s %.2f%% on %d clips",
            s.metric.upper(),
            100 * s.normalized,
            s.n_utterances,
        )

    def score_after(self, model, out_dir: Path) -> RegressionReport:
        assert self.before is not None, "score_before first"
        report = RegressionReport(self.before, self.score(model, "after fine-tuning"))
        report.write(out_dir)
        for line in report.format_table().splitlines():
            log.info("%s", line)
        return report
