"""Scoring by real generation (E1, E2): the model writes its transcript, we compare.

Training-time evaluation and `fitwhisper evaluate` both go through `Seq2SeqTrainer` with
`predict_with_generate` and the `metrics_fn` built here, so a checkpoint's WER is the same
number wherever it is computed. Never teacher-forced.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fitwhisper.scoring import (
    Metric,
    Score,
    TextNormalizer,
    metric_for_language,
    normalizer_for_language,
    score,
    utterance_errors,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalResult:
    """Scores of one model on one set of clips, with what it wrote for each."""

    score: Score
    references: tuple[str, ...]
    hypotheses: tuple[str, ...]
    ids: tuple[str, ...]
    normalizer: TextNormalizer

    def write(self, out_dir: str | Path) -> Path:
        """Write `predictions.jsonl` (per utterance) and `metrics.json` into out_dir."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        metric = self.score.metric
        with open(out / "predictions.jsonl", "w", encoding="utf-8") as f:
            for uid, ref, hyp in zip(self.ids, self.references, self.hypotheses, strict=True):
                errors, units = utterance_errors(self.normalizer(ref), self.normalizer(hyp), metric)
                row = {"id": uid, "reference": ref, "hypothesis": hyp, "errors": errors}
                row[f"ref_{'words' if metric == 'wer' else 'chars'}"] = units
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        (out / "metrics.json").write_text(
            json.dumps(self.score.as_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return out


def make_scorer(
    language: str | None,
    metric: Metric | None = None,
    normalizer: str = "auto",
    opencc: str | None = None,
) -> tuple[Metric, TextNormalizer]:
    """Pick the metric and normaliser for a language (CER for Chinese, WER otherwise)."""
    chosen_metric = metric or metric_for_language(language)
    name = normalizer_for_language(language) if normalizer == "auto" else normalizer
    return chosen_metric, TextNormalizer(name, opencc_config=opencc)  # type: ignore[arg-type]


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
) -> EvalResult:
    """Transcribe every clip of `dataset` by greedy generation and score it.

    Args:
        model: a WhisperForConditionalGeneration (or PEFT-wrapped) whose generation_config
            carries language and task.
        processor: its WhisperProcessor.
        dataset: a torch Dataset yielding {"input_features", "labels"}, in reference order.
        references: the manifest's transcripts, one per clip.
        ids: row ids for the per-utterance file.
        language: picks the metric and normaliser when those are not given.
    """
    import torch
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    from fitwhisper.data.features import WhisperCollator

    chosen_metric, norm = make_scorer(language, metric, normalizer, opencc)
    collator = collator or WhisperCollator(processor, model.config.decoder_start_token_id)
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
        trainer = Seq2SeqTrainer(
            model=model,
            args=args,
            data_collator=collator,
            processing_class=processor.feature_extractor,
        )
        out = trainer.predict(dataset, metric_key_prefix="eval")
    hyps = decode(processor.tokenizer, out.predictions)
    s = score(list(references), hyps, chosen_metric, norm)
    return EvalResult(
        score=s,
        references=tuple(references),
        hypotheses=tuple(hyps),
        ids=tuple(ids),
        normalizer=norm,
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
) -> EvalResult:
    """Score any resolvable model on a manifest (the engine of `fitwhisper evaluate`).

    Rows that fail the data check are an error, as in training: scores on a silently
    smaller set would not be comparable.
    """
    from fitwhisper.config import DataConfig
    from fitwhisper.data.check import apply_bad_row_policy, check_manifest
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.data.manifest import load_manifest, select
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.resolve import load_model, load_processor

    processor = load_processor(model_spec)
    data_cfg = DataConfig()
    report = check_manifest(load_manifest(manifest_path), data_cfg, tokenizer=processor.tokenizer)
    rows = select(apply_bad_row_policy(report, data_cfg), max_samples)
    model = load_model(model_spec)
    lang = language_for(model, language)
    configure_generation(model, lang, task)
    dataset = SpeechDataset(rows, processor, language=lang, task=task)
    return evaluate_model(
        model,
        processor,
        dataset,
        [r.text for r in rows],
        [r.id for r in rows],
        language=lang,
        batch_size=batch_size,
        generation_max_length=generation_max_length,
        metric=metric,
        normalizer=normalizer,
        opencc=opencc,
    )
