"""Scoring by real generation: the model writes its transcript, we compare (WER, CER, MER).

Training-time evaluation and `fitwhisper evaluate` both go through `Seq2SeqTrainer` with
`predict_with_generate` and the same scorer, so a checkpoint's WER is the same number
wherever it is computed. Never teacher-forced.

- `scorer`: metric and normaliser for a language (`make_scorer`), Trainer's `metrics_fn`
- `generate`: a loaded model over a dataset (`evaluate_model`), a model over checked rows
  (`evaluate_rows`), a manifest (`evaluate_manifest`), two models side by side
  (`compare_manifest`)
- `plan`: what a scoring decided (language, metric, encoder window, dtype) and why:
  OUT/eval_plan.json
- `results`: `EvalResult` and `Comparison`, and the files and tables they write
- `long_form`: `evaluate --long_form`: long recordings transcribed as `transcribe` does
  it, scored as one text each, with the mean segment boundary error
- `language_id`: how often a model detects each clip's language (the forgetting guard's
  before and after)

`fitwhisper evaluate MODEL MANIFEST [--compare OTHER]` runs them; options are `EvalConfig`.
"""

from fitwhisper.evaluate.generate import (
    audio_file,
    compare_manifest,
    eval_config,
    evaluate_manifest,
    evaluate_model,
    evaluate_rows,
)
from fitwhisper.evaluate.results import UNITS, Comparison, EvalResult, model_slug
from fitwhisper.evaluate.scorer import (
    decode,
    make_scorer,
    metrics_fn,
    resolve_expected_script,
    scorer_for,
    scoring_language,
)

__all__ = [
    "UNITS",
    "Comparison",
    "EvalResult",
    "audio_file",
    "compare_manifest",
    "decode",
    "eval_config",
    "evaluate_manifest",
    "evaluate_model",
    "evaluate_rows",
    "make_scorer",
    "metrics_fn",
    "model_slug",
    "resolve_expected_script",
    "scorer_for",
    "scoring_language",
]
