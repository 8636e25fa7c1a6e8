"""Metric and normaliser choice, and the scorer training-time evaluation calls.

`make_scorer` picks CER for Chinese and WER otherwise, with the matching normaliser;
`metrics_fn` is Seq2SeqTrainer's `compute_metrics`, so a checkpoint's score during training
equals the one `fitwhisper evaluate` prints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from fitwhisper.config import EvalConfig
from fitwhisper.scoring import (
    Metric,
    NormalizeOptions,
    TextNormalizer,
    metric_for_language,
    normalizer_for_language,
    score,
)

log = logging.getLogger(__name__)


def make_scorer(
    language: str | None,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
    options: NormalizeOptions | None = None,
    digits: str = "numbers",
) -> tuple[Metric, TextNormalizer]:
    """Pick the metric and normaliser for a language (CER for Chinese, WER otherwise).

    `options` (punctuation, spaces, case, numerals) shape the chinese normaliser; giving
    any with a language scored by WER chooses the chinese normaliser for auto.
    """
    chosen_metric = metric or metric_for_language(language)
    name = normalizer_for_language(language) if normalizer == "auto" else normalizer
    if normalizer == "auto" and options not in (None, NormalizeOptions()):
        name = "chinese"
    normalizer_obj = TextNormalizer(name, opencc_config=opencc, options=options, digits=digits)  # type: ignore[arg-type]
    return chosen_metric, normalizer_obj


def scorer_for(cfg: EvalConfig) -> tuple[Metric, TextNormalizer]:
    """`make_scorer` for an EvalConfig: its metric, normaliser, OpenCC table and the chinese
    normaliser's options."""
    options = NormalizeOptions(
        punctuation=cfg.punctuation, spaces=cfg.spaces, case=cfg.case, numerals=cfg.numerals
    )
    return make_scorer(
        cfg.language, cfg.metric, cfg.normalizer, cfg.opencc, options, digits=cfg.digits
    )


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
    """Generated ids, one sequence per clip (rows of any length; the Trainer pads them with
    -100), to stripped text."""
    pad = tokenizer.pad_token_id
    ids = [np.where(np.asarray(row) < 0, pad, row).tolist() for row in token_ids]
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
