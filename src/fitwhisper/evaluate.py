"""Scoring by real generation (E1, E2): the model writes its transcript, we compare.

Training-time evaluation and `fitwhisper evaluate` both go through `Seq2SeqTrainer` with
`predict_with_generate` and the `metrics_fn` built here, so a checkpoint's WER is the same
number wherever it is computed. Never teacher-forced.

`fitwhisper evaluate MODEL MANIFEST [--compare OTHER]` runs `evaluate_manifest` or
`compare_manifest`; their results write per-clip and summary files (`EvalResult.write`,
`Comparison.write`).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fitwhisper.scoring import (
    Metric,
    NormalizeOptions,
    Score,
    TextNormalizer,
    metric_for_language,
    normalizer_for_language,
    score,
    utterance_errors,
)

log = logging.getLogger(__name__)


UNITS = {"wer": "words", "cer": "characters", "mer": "tokens (Chinese characters, other words)"}


@dataclass(frozen=True)
class EvalResult:
    """Scores of one model on one set of clips, with what it wrote for each.

    ``skipped`` names the manifest rows left out by ``--bad_rows skip`` (``file:line
    problem``); they are not part of the score. ``languages`` are the clips' own language
    tags (a per-language breakdown is reported when they differ); ``expected_script`` the
    script the output should be in (its share is reported); ``output_script`` the conversion
    applied to the model's output before scoring, if any.
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

    def utterances(self) -> list[dict]:
        """One record per clip: texts as written and as scored, and the edit errors."""
        metric = self.score.metric
        out = []
        for uid, ref, hyp in zip(self.ids, self.references, self.hypotheses, strict=True):
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
            out[other] = {other: o.normalized, "errors": o.errors, "ref_units": o.ref_units,
                          "units": UNITS[other]}  # fmt: skip
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
        """Write `predictions.jsonl` (per utterance) and `metrics.json` into out_dir."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        utts = self.utterances()
        _write_jsonl(out / "predictions.jsonl", utts)
        _write_json(out / "metrics.json", self.metrics(utts))
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
            f"{name + ' raw':<15} {100 * s.raw:6.2f}%  (texts as written)",
            f"{name + ' normalised':<15} {100 * s.normalized:6.2f}%  "
            f"({s.errors} errors in {s.ref_units} reference {UNITS[s.metric]})",
        ]
        lines += _extra_lines(self.extra_figures(), self.output_script)
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


def make_scorer(
    language: str | None,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
    options: NormalizeOptions | None = None,
) -> tuple[Metric, TextNormalizer]:
    """Pick the metric and normaliser for a language (CER for Chinese, WER otherwise).

    `options` (punctuation, spaces, case, numerals) shape the chinese normaliser; giving
    any with a language scored by WER chooses the chinese normaliser for auto.
    """
    chosen_metric = metric or metric_for_language(language)
    name = normalizer_for_language(language) if normalizer == "auto" else normalizer
    if normalizer == "auto" and options not in (None, NormalizeOptions()):
        name = "chinese"
    return chosen_metric, TextNormalizer(name, opencc_config=opencc, options=options)  # type: ignore[arg-type]


def resolve_expected_script(
    expected_script: str | None, output_script: str | None, references: Sequence[str]
) -> str | None:
    """The script whose share is reported: as given; for "auto", the one `output_script`
    produces, else the one the references are written in (None when they have no
    script-specific characters, e.g. English)."""
    from fitwhisper.chinese_script import expected_script as script_of_option
    from fitwhisper.chinese_script import script_share

    if expected_script in (None, "none"):
        return None
    if expected_script != "auto":
        if expected_script not in ("traditional", "simplified"):
            from fitwhisper.errors import ConfigError

            raise ConfigError(
                f"unknown expected script {expected_script!r}",
                hint="use auto, none, traditional or simplified",
            )
        return expected_script
    if output_script:
        return script_of_option(output_script)
    trad = script_share(references, "simplified").wrong_chars  # Traditional-only characters
    simp = script_share(references, "traditional").wrong_chars  # Simplified-only characters
    if trad == simp == 0:
        return None
    return "traditional" if trad > simp else "simplified"


def metrics_fn(
    tokenizer, references: Sequence[str], metric: Metric, normalizer: TextNormalizer
) -> Callable:
    """A `compute_metrics` for Seq2SeqTrainer: decodes generated ids, scores against the
    manifest's own texts (eval order is sequential, so prediction i is reference i)."""

    def compute(pred) -> dict[str, float]:
        hyps = decode(tokenizer, pred.predictions)
        s = score(list(references), hyps, metric, normalizer)
        compute.last_hypotheses = hyps  # type: ignore[attr-defined]
        return {metric: s.normalized, f"{metric}_raw": s.raw}

    return compute


def decode(tokenizer, token_ids) -> list[str]:
    """Generated ids (batch, length), padded with -100 by the Trainer, to stripped text."""
    ids = np.asarray(token_ids)
    ids = np.where(ids < 0, tokenizer.pad_token_id, ids)
    return [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def scoring_language(rows: Sequence, language: str | None) -> str | None:
    """The language that picks metric and normaliser: the one every row is in (a row's own
    `language` column, else `language`), or `language` when rows mix languages."""
    langs = {(getattr(r, "language", None) or language) for r in rows}
    if len(langs) == 1:
        return langs.pop()
    log.warning(
        "The clips mix languages (%s): metric and normaliser follow --language %s; "
        "pass --metric and --normalizer to choose them",
        ", ".join(sorted(str(x) for x in langs)),
        language,
    )
    return language


def evaluate_model(
    model,
    processor,
    dataset,
    references: Sequence[str],
    ids: Sequence[str],
    *,
    language: str | None,
    batch_size: int = 8,
    generation_max_length: int = 225,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
    collator=None,
    languages: Sequence[str | None] | None = None,
    model_name: str = "",
    options: NormalizeOptions | None = None,
    output_script: str | None = None,
    expected_script: str | None = "auto",
    tags: Sequence[str | None] | None = None,
) -> EvalResult:
    """Transcribe every clip of `dataset` by greedy generation and score it.

    This is the same `Seq2SeqTrainer.predict` path that training-time evaluation takes
    (same collator, batch size and generation settings), so the numbers agree.

    Args:
        model: a WhisperForConditionalGeneration (or PEFT-wrapped) whose generation_config
            carries language and task.
        processor: its WhisperProcessor.
        dataset: a torch Dataset yielding {"input_features", "labels"}, in reference order.
        references: the manifest's transcripts, one per clip.
        ids: row ids for the per-utterance file.
        language: picks the metric and normaliser when those are not given.
        languages: each clip's language token for generation; clips are generated in
            groups of one language. None: the model's generation config decides.
        model_name: the model as the user named it, for the reports.
        options: the chinese normaliser's punctuation, spaces, case and numerals options.
        output_script: convert the output into this script before scoring (traditional,
            simplified, an OpenCC table; None: as written), with `script.to_script`.
        expected_script: the script whose share of the output is reported (auto: from
            output_script, else the references' script).
        tags: each clip's language tag, for the per-language breakdown (default: languages).
    """
    import torch
    from torch.utils.data import Subset
    from transformers import Seq2SeqTrainingArguments

    from fitwhisper.chinese_script import check_output_script, to_script
    from fitwhisper.data.features import WhisperCollator
    from fitwhisper.memory.backoff import BackoffTrainer

    chosen_metric, norm = make_scorer(language, metric, normalizer, opencc, options)
    output_script = check_output_script(output_script)
    collator = collator or WhisperCollator(processor, model.config.decoder_start_token_id)
    groups = _language_groups(languages, len(dataset))
    hyps: list[str] = [""] * len(dataset)
    with tempfile.TemporaryDirectory(prefix="fitwhisper-eval-") as tmp:
        args = Seq2SeqTrainingArguments(
            output_dir=tmp,
            per_device_eval_batch_size=batch_size,
            predict_with_generate=True,
            generation_max_length=generation_max_length,
            generation_num_beams=1,
            report_to="none",
            remove_unused_columns=False,
            disable_tqdm=True,
            dataloader_pin_memory=torch.cuda.is_available(),
        )
        # Halves the generation batch on OOM (backoff.py).
        trainer = BackoffTrainer(
            model=model,
            args=args,
            data_collator=collator,
            processing_class=processor,
        )
        gen = model.generation_config
        saved_language = gen.language
        try:
            for lang, idx in groups:
                part = dataset
                if len(groups) > 1:
                    # Whisper prompts a batch with one language: generate group by group.
                    part, gen.language = Subset(dataset, idx), lang
                out = trainer.predict(part, metric_key_prefix="eval")
                texts = decode(processor.tokenizer, out.predictions)
                for i, text in zip(idx, texts, strict=True):
                    hyps[i] = to_script(text, output_script)
        finally:
            gen.language = saved_language
    s = score(list(references), hyps, chosen_metric, norm)
    return EvalResult(
        score=s,
        references=tuple(references),
        hypotheses=tuple(hyps),
        ids=tuple(ids),
        normalizer=norm,
        model=model_name,
        languages=tuple(tags if tags is not None else (languages or ())),
        expected_script=resolve_expected_script(expected_script, output_script, references),
        output_script=output_script,
    )


def evaluate_manifest(
    model_spec: str,
    manifest_path: str | Path,
    *,
    language: str | None = None,
    task: str = "transcribe",
    batch_size: int = 8,
    generation_max_length: int = 225,
    max_samples: int | None = None,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
    bad_rows: str = "error",
    data_cfg=None,
    options: NormalizeOptions | None = None,
    output_script: str | None = None,
    expected_script: str | None = "auto",
) -> EvalResult:
    """Score any resolvable model on a manifest (the engine of `fitwhisper evaluate`).

    Rows that fail the data check are an error by default, as in training: scores on a
    silently smaller set would not be comparable. `bad_rows="skip"` leaves them out,
    counted and named in the result.
    """
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.models.presets import preset_language
    from fitwhisper.models.resolve import load_processor

    # Bad options fail before any work.
    make_scorer(language, metric, normalizer, opencc, options)
    check_output_script(output_script)
    language = language or preset_language(model_spec)
    processor = load_processor(model_spec)
    rows, skipped = checked_rows(manifest_path, processor, bad_rows, max_samples, data_cfg)
    res = _evaluate_rows(
        model_spec, processor, rows, language=language, task=task, batch_size=batch_size,
        generation_max_length=generation_max_length, metric=metric, normalizer=normalizer,
        opencc=opencc, options=options, output_script=output_script,
        expected_script=expected_script,
        language_token=data_cfg.language_token if data_cfg else "per_row",
    )  # fmt: skip
    return dataclasses.replace(res, manifest=str(manifest_path), skipped=skipped)


def compare_manifest(
    model_spec: str,
    baseline_spec: str,
    manifest_path: str | Path,
    **kwargs,
) -> Comparison:
    """Score two models on the same clips with the same metric and normaliser
    (`fitwhisper evaluate MODEL MANIFEST --compare BASELINE`). Keyword arguments are those
    of `evaluate_manifest`. The data is checked once, with the first model's tokenizer."""
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.models.resolve import load_processor

    language, metric = kwargs.get("language"), kwargs.get("metric")
    make_scorer(
        language, metric, kwargs.get("normalizer", "auto"), kwargs.get("opencc"),
        kwargs.get("options"),
    )  # fmt: skip
    check_output_script(kwargs.get("output_script"))
    processor = load_processor(model_spec)
    data_cfg = kwargs.pop("data_cfg", None)
    rows, skipped = checked_rows(
        manifest_path,
        processor,
        kwargs.pop("bad_rows", "error"),
        kwargs.pop("max_samples", None),
        data_cfg,
    )
    kwargs["language_token"] = data_cfg.language_token if data_cfg else "per_row"
    results = []
    for spec, proc in ((model_spec, processor), (baseline_spec, load_processor(baseline_spec))):
        res = _evaluate_rows(spec, proc, rows, **kwargs)
        results.append(dataclasses.replace(res, manifest=str(manifest_path), skipped=skipped))
    return Comparison(model=results[0], baseline=results[1])


def checked_rows(
    manifest_path: str | Path,
    processor,
    bad_rows: str = "error",
    max_samples: int | None = None,
    data_cfg=None,
) -> tuple[list, tuple[str, ...]]:
    """The manifest's rows that pass the data check (`bad_rows` decides about the others),
    and `file:line problem` for each row left out."""
    from fitwhisper.config import DataConfig
    from fitwhisper.data.check import apply_bad_row_policy, check_manifest
    from fitwhisper.data.manifest import load_manifest, select
    from fitwhisper.errors import ConfigError

    if bad_rows not in ("error", "skip"):
        raise ConfigError(f"unknown --bad_rows {bad_rows!r}", hint="use error or skip")
    cfg = dataclasses.replace(data_cfg or DataConfig(), bad_rows=bad_rows)
    manifest = load_manifest(manifest_path, **cfg.manifest_columns())
    report = check_manifest(manifest, cfg, tokenizer=processor.tokenizer)
    rows = select(apply_bad_row_policy(report, cfg, purpose="scoring"), max_samples)
    skipped = tuple(
        f"{r.where} {'; '.join(f'{p.kind} ({p.detail})' for p in r.problems)}"
        for r in report.bad_rows()
    )
    return rows, skipped


# --- helpers ------------------------------------------------------------------------------


def _evaluate_rows(
    model_spec: str,
    processor,
    rows: Sequence,
    *,
    language: str | None = None,
    task: str = "transcribe",
    batch_size: int = 8,
    generation_max_length: int = 225,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
    options: NormalizeOptions | None = None,
    output_script: str | None = None,
    expected_script: str | None = "auto",
    language_token: str = "per_row",
) -> EvalResult:
    from fitwhisper.codeswitch import configure_no_language_token, rows_for_strategy
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.resolve import load_model

    model = load_model(model_spec)
    lang = language_for(model, language)
    # A row's own language wins for its prompt, as in training (codeswitch.py: unless the
    # language-token strategy is fixed or none).
    prompted = rows_for_strategy(rows, language_token)
    per_row = [language_for(model, r.language) if r.language else lang for r in prompted]
    if len(set(per_row)) == 1:
        lang, per_row = per_row[0], None
    configure_generation(model, lang, task)
    if language_token == "none":
        configure_no_language_token(model, task)
        lang = None
    dataset = SpeechDataset(prompted, processor, language=lang, task=task)
    try:
        return evaluate_model(
            model,
            processor,
            dataset,
            [r.text for r in rows],
            [r.id for r in rows],
            # Metric and normaliser follow the clips, not the model: equal for --compare.
            language=scoring_language(rows, language),
            batch_size=batch_size,
            generation_max_length=generation_max_length,
            metric=metric,
            normalizer=normalizer,
            opencc=opencc,
            languages=per_row,
            model_name=str(model_spec),
            options=options,
            output_script=output_script,
            expected_script=expected_script,
            tags=[r.language or language for r in rows],
        )
    finally:
        # Free the model before the next one loads (--compare): memory is released between
        # phases, not accumulated.
        del model
        gc.collect()
        _empty_cuda_cache()


def _language_groups(
    languages: Sequence[str | None] | None, n: int
) -> list[tuple[str | None, list[int]]]:
    """Clip indices grouped by generation language, in first-seen order; one group of all
    clips (the generation config's language) when `languages` is None or all equal."""
    if languages is None or len(set(languages)) <= 1:
        return [(None, list(range(n)))]
    groups: dict[str | None, list[int]] = {}
    for i, lang in enumerate(languages):
        groups.setdefault(lang, []).append(i)
    return list(groups.items())


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _language_figures(refs: list[str], hyps: list[str], tag: str, normalizer) -> dict:
    """One language's clips scored by that language's own metric and default normaliser
    (with the run's OpenCC conversion): CER for zh, WER with Whisper's normaliser for en."""
    lang = None if tag == "unknown" else tag
    metric, norm = make_scorer(lang, opencc=normalizer.opencc_config)
    s = score(refs, hyps, metric, norm)
    return {"metric": metric, metric: s.normalized, "errors": s.errors,
            "ref_units": s.ref_units, "n_utterances": s.n_utterances,
            "normalizer": s.normalizer}  # fmt: skip


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
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
