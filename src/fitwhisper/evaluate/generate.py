"""Running a model over rows by generation and scoring what it wrote.

`evaluate_model` is the one path: greedy generation by this process alone
(`evaluate/predict.py`), with the collator and generation settings of training-time
evaluation, never teacher-forced. `evaluate_manifest` and `compare_manifest`
(`fitwhisper evaluate`) load the model(s) and the checked rows around it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Mapping, Sequence
from pathlib import Path

from fitwhisper.config import DataConfig, EvalConfig
from fitwhisper.evaluate.plan import decided
from fitwhisper.evaluate.results import Comparison, EvalResult
from fitwhisper.evaluate.scorer import resolve_expected_script, scorer_for, scoring_language
from fitwhisper.scoring import score


def eval_config(cfg: EvalConfig | None = None, **options) -> EvalConfig:
    """`cfg` (or the defaults) with `options` (EvalConfig field names) written over it;
    the one place that checks the scorer and script options, before any model loads.

    Raises:
        TypeError: an option that is not an EvalConfig field.
        ConfigError: an unknown normaliser option, OpenCC table or output script.
    """
    from fitwhisper.chinese_script import check_output_script

    cfg = dataclasses.replace(cfg or EvalConfig(), **options)
    scorer_for(cfg)
    check_output_script(cfg.output_script)
    return cfg


def evaluate_model(
    model,
    processor,
    dataset,
    references: Sequence[str],
    ids: Sequence[str],
    cfg: EvalConfig | None = None,
    *,
    collator=None,
    languages: Sequence[str | None] | None = None,
    tags: Sequence[str | None] | None = None,
    model_name: str = "",
    audio: Sequence[str | None] = (),
    why: Mapping[str, str] | None = None,
    **options,
) -> EvalResult:
    """Transcribe every clip of `dataset` by generation (greedy unless `cfg.beam_size`) and
    score it.

    The collator, batch size and generation settings are those of training-time evaluation,
    so the numbers agree; it runs on this process alone, whatever the process group
    (evaluate/predict.py).

    Args:
        model: a WhisperForConditionalGeneration (or PEFT-wrapped) whose generation_config
            carries language and task.
        processor: its WhisperProcessor.
        dataset: a torch Dataset yielding {"input_features", "labels"}, in reference order.
        references: the manifest's transcripts, one per clip.
        ids: row ids for the per-utterance file.
        cfg: metric, normaliser, scripts, batch size, beams, generation length; `cfg.language`
            picks metric and normaliser when those are not given. `options` are EvalConfig
            fields written over it.
        languages: each clip's language token for generation; clips are generated in
            groups of one language. None: the model's generation config decides.
        tags: each clip's language tag, for the per-language breakdown (default: languages).
        model_name: the model as the user named it, for the reports.
        audio: each clip's audio file, for the report's player (None: stored in a dataset).
        why: reasons for decisions made before this call (the prompt's language), for the
            result's plan (evaluate/plan.py).
    """
    from fitwhisper.chinese_script import to_script
    from fitwhisper.data.features import WhisperCollator
    from fitwhisper.evaluate.predict import generate_texts
    from fitwhisper.models.short_window import (
        ShortWindowCollator,
        short_generation,
        window_choice,
    )

    cfg = eval_config(cfg, **options)
    metric, norm = scorer_for(cfg)
    collator = collator or WhisperCollator(processor, model.config.decoder_start_token_id)
    window, window_why = window_choice(model.config, cfg.encoder_window)
    if window == "short":  # clips encoded on their own length (models/short_window.py)
        collator = ShortWindowCollator(collator)
    # Every choice of this scoring, before it runs (evaluate/plan.py).
    expected = resolve_expected_script(cfg.expected_script, cfg.output_script, references)
    plan = decided(
        model,
        cfg,
        metric,
        norm,
        window=(window, window_why),
        expected_script=expected,
        languages=languages,
        model_name=model_name,
        why=why,
    )
    hyps: list[str] = [""] * len(dataset)
    hit_limit: dict[int, bool] = {}
    with short_generation(model) if window == "short" else contextlib.nullcontext():
        texts = generate_texts(
            model,
            dataset,
            collator,
            processor.tokenizer,
            batch_size=cfg.batch_size,
            max_length=cfg.generation_max_length,
            num_beams=cfg.beam_size,
            groups=_language_groups(languages, len(dataset)),
            hit_limit=hit_limit,
        )
    for i, text in texts.items():
        hyps[i] = to_script(text, cfg.output_script)
    return EvalResult(
        score=score(list(references), hyps, metric, norm),
        references=tuple(references),
        hypotheses=tuple(hyps),
        ids=tuple(ids),
        normalizer=norm,
        model=model_name,
        languages=tuple(tags if tags is not None else (languages or ())),
        expected_script=expected,
        output_script=cfg.output_script,
        audio=tuple(audio),
        hit_limit=tuple(hit_limit.get(i, False) for i in range(len(dataset))),
        plan=plan,
    )


def evaluate_manifest(
    model_spec: str,
    manifest_path: str | Path,
    cfg: EvalConfig | None = None,
    data_cfg: DataConfig | None = None,
    **options,
) -> EvalResult:
    """Score any resolvable model on a manifest (the engine of `fitwhisper evaluate`).

    Rows that fail the data check are an error by default (`data_cfg.bad_rows`), as in
    training: scores on a silently smaller set would not be comparable. `bad_rows="skip"`
    leaves them out, counted and named in the result. `options` are EvalConfig fields
    written over `cfg`.
    """
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.models.resolve import as_resolved, language_choice, load_processor

    cfg = eval_config(cfg, **options)  # bad options fail before any work
    model = as_resolved(model_spec)  # once: processor and model load from the same
    language, why = language_choice(model, cfg.language)
    cfg = dataclasses.replace(cfg, language=language)
    processor = load_processor(model)
    data = usable_rows(
        manifest_path, data_cfg, processor.tokenizer, limit=cfg.max_samples, purpose="scoring"
    )
    token = _language_token(data_cfg)
    res = evaluate_rows(model, processor, data.rows, cfg, token, {"language": why})
    return dataclasses.replace(res, manifest=str(manifest_path), skipped=data.skipped)


def compare_manifest(
    model_spec: str,
    baseline_spec: str,
    manifest_path: str | Path,
    cfg: EvalConfig | None = None,
    data_cfg: DataConfig | None = None,
    **options,
) -> Comparison:
    """Score two models on the same clips with the same metric and normaliser
    (`fitwhisper evaluate MODEL MANIFEST --compare BASELINE`). The data is checked once,
    with the first model's tokenizer; without --language both are prompted and scored in
    the first model's default language, as `evaluate_manifest` scores it alone."""
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.models.resolve import as_resolved, language_choice, load_processor

    cfg = eval_config(cfg, **options)
    model, baseline = as_resolved(model_spec), as_resolved(baseline_spec)
    language, why = language_choice(model, cfg.language)
    if why != "--language":
        why = f"{why}, for both models (--compare: the first model's)"
    cfg = dataclasses.replace(cfg, language=language)
    processor = load_processor(model)
    data = usable_rows(
        manifest_path, data_cfg, processor.tokenizer, limit=cfg.max_samples, purpose="scoring"
    )
    results, token = [], _language_token(data_cfg)
    for spec, proc in ((model, processor), (baseline, load_processor(baseline))):
        res = evaluate_rows(spec, proc, data.rows, cfg, token, {"language": why})
        results.append(dataclasses.replace(res, manifest=str(manifest_path), skipped=data.skipped))
    return Comparison(model=results[0], baseline=results[1])


def evaluate_rows(
    model_spec,
    processor,
    rows: Sequence,
    cfg: EvalConfig,
    language_token: str = "per_row",
    why: Mapping[str, str] | None = None,
) -> EvalResult:
    """Load `model_spec` (a spec or a `ResolvedModel`) and score it on checked `rows`
    (`data.usable.usable_rows`) in fp32; the model is freed afterwards, so two models are
    never held at once. `why`: reasons the caller knows for the plan (evaluate/plan.py);
    its "language" says why `cfg.language` is the prompt's language (default --language)."""
    import torch

    from fitwhisper.codeswitch import configure_no_language_token, rows_for_strategy
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.resolve import load_model

    # fp32, whatever the checkpoint stores: transformers 5 loads dtype="auto", and an
    # fp16-stored model (large-v3, turbo) then meets fp32 features in generate's encoder.
    model = load_model(model_spec, dtype=torch.float32)
    lang = language_for(model, cfg.language)
    # A row's own language wins for its prompt, as in training (codeswitch.py: unless the
    # language-token strategy is fixed or none).
    prompted = rows_for_strategy(rows, language_token)
    per_row = [language_for(model, r.language) if r.language else lang for r in prompted]
    if len(set(per_row)) == 1:
        lang, per_row = per_row[0], None
    configure_generation(model, lang, cfg.task)
    if language_token == "none":
        configure_no_language_token(model, cfg.task)
        lang = None
    dataset = SpeechDataset(prompted, processor, language=lang, task=cfg.task)
    try:
        return evaluate_model(
            model,
            processor,
            dataset,
            [r.text for r in rows],
            [r.id for r in rows],
            # Metric and normaliser follow the clips, not the model: equal for --compare.
            dataclasses.replace(cfg, language=scoring_language(rows, cfg.language)),
            languages=per_row,
            tags=[r.language or cfg.language for r in rows],
            model_name=str(getattr(model_spec, "spec", model_spec)),
            audio=[audio_file(r) for r in rows],
            why={
                **(why or {}),
                "language": _prompt_why(
                    prompted, lang, per_row, language_token, (why or {}).get("language")
                ),
                "dtype": "scoring runs in fp32, whatever the checkpoint stores",
            },
        )
    finally:
        # Free the model before the next one loads (--compare): memory is released between
        # phases, not accumulated.
        del model
        gc.collect()
        _empty_cuda_cache()


def audio_file(row) -> str | None:
    """A manifest row's audio file as a string; None for a clip stored inside a dataset."""
    return str(row.audio) if isinstance(row.audio, Path) else None


# --- helpers ------------------------------------------------------------------------------


def _language_token(data_cfg: DataConfig | None) -> str:
    return data_cfg.language_token if data_cfg else "per_row"


def _prompt_why(prompted, lang, per_row, language_token: str, language_why: str | None) -> str:
    """Why the clips were prompted in the language(s) they were (evaluate_rows' rule)."""
    if language_token == "none":
        return "--language_token none: prompted with no language token"
    if any(r.language for r in prompted) and (per_row or lang is not None):
        return "the manifest's language column (a row's own language wins, as in training)"
    if lang is None:
        return "none: an English-only model, or detected per clip"
    return language_why or "--language"


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
