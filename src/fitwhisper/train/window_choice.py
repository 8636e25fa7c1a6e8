"""After trimmed or mixed training (`--encoder_input`, mixed by default): the encoder window
`--encoder_window auto` gives the model at inference, chosen by measurement.

The final evaluation scores the held-out clips on 30 s windows (what every other engine
feeds a model); a model trained on trimmed input is then scored on its short window too,
and keeps the short window when its error there is at most `TOLERANCE` above the 30 s one
(the issue's bound for short-window CER), else 30 s. Unmeasured (no held-out clips) it keeps
30 s: a short run may not have learnt the short window yet (tiny.en after 4 steps on digit
strings: 83% WER short, 42% at 30 s). The choice and its figures go into final/config.json
(`fitwhisper_encoder_input`); a LoRA run's final/ is an adapter, whose base config is not
saved, so auto keeps 30 s there and `--encoder_window short` asks for the short window.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from fitwhisper.models.short_window import record_inference_window, trained_window

log = logging.getLogger(__name__)

TOLERANCE = 0.01  # short-window error at most 1 point above the 30 s one


def choose(full_error: float, short_error: float) -> str:
    """ "short" when the short window scores within TOLERANCE of 30 s, else "full"."""
    return "short" if short_error <= full_error + TOLERANCE else "full"


def settle_window(model, final_dir: Path, score_short, full_score) -> dict[str, float]:
    """Choose and record the inference window of a model trained on trimmed input.

    Args:
        model: the trained model (its config gets the choice too).
        final_dir: RUN/final/, whose config.json is rewritten with the choice.
        score_short: () -> the held-out result on the short window (RUN/eval/short_window/),
            or None when the run has no held-out clips.
        full_score: the final 30 s result, or None.

    Returns:
        metrics to report: `short_window_<metric>` when measured.
    """
    if trained_window(model.config) == "full":
        return {}
    if full_score is None:
        window, why = "full", "not measured: the run had no held-out clips (--eval_manifest)"
        metrics = {}
        log.info(
            "%s; the model keeps 30 s windows at inference. `fitwhisper evaluate %s MANIFEST "
            "--encoder_window short` (and `full`) measure its short window, "
            "`--encoder_window short` uses it",
            why,
            final_dir,
        )
    else:
        short = score_short()
        metric, full_err, short_err = full_score.metric, full_score.normalized, short.normalized
        window = choose(full_err, short_err)
        why = (
            f"held-out {metric.upper()} {100 * short_err:.2f}% on the short window, "
            f"{100 * full_err:.2f}% at 30 s"
        )
        metrics = {f"short_window_{metric}": short_err}
        log.info(
            "%s: the model %s at inference (--encoder_window auto; the short window is kept "
            "within %g point of 30 s)",
            why,
            "encodes short clips on their own length" if window == "short" else "keeps 30 s",
            100 * TOLERANCE,
        )
    record_inference_window(model.config, window, why)
    _rewrite_config(Path(final_dir) / "config.json", model.config)
    return metrics


def _rewrite_config(path: Path, config) -> None:
    """The recorded choice into `path` (absent for a LoRA adapter), replaced atomically."""
    from fitwhisper.models.short_window import CONFIG_KEY

    if not path.is_file():
        return
    data = json.loads(path.read_text())
    data[CONFIG_KEY] = getattr(config, CONFIG_KEY)
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
