"""The held-out clips scored by generation: before training (RUN/eval/before/, the base's
figure the model card compares with) and after (RUN/eval/, the run's metrics.json).

Both on the 30 s windows every inference engine feeds a model, also after trimmed training
(whose short window is scored as well, train/window_choice.py), with the run's expected
output script, so the two figures differ by the training alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fitwhisper.config import EvalConfig, ModelConfig, TrainConfig

log = logging.getLogger(__name__)

# Why the held-out clips are scored at each window (the record beside the metrics).
WINDOW_WHY = {
    "full": "30 s, as every engine feeds the model",
    "short": "scored beside 30 s to choose the window inference uses (train/window_choice.py)",
}


def score_held_out(
    model,
    processor,
    data,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    out_dir: Path,
    *,
    language: str | None,
    when: str,
    window: str = "full",
    model_name: str = "",
):
    """Score `data.eval_rows` with `model`, write predictions and metrics.json to `out_dir`;
    `language` is the run plan's scoring language (it picks metric and normaliser); `when`
    names the moment in the log ("before fine-tuning", "final"); `window` the encoder
    window (full: 30 s; short: each batch's longest clip); `model_name` what the metrics
    file names as the model scored."""
    import dataclasses

    from fitwhisper.chinese_script import expected_script
    from fitwhisper.evaluate import audio_file, evaluate_model

    rows = data.eval_rows
    cfg = EvalConfig(
        language=language,
        batch_size=train_cfg.per_device_eval_batch_size,
        generation_max_length=train_cfg.generation_max_length,
        # The model's own output (no conversion): its script share is the point.
        expected_script=expected_script(model_cfg.output_script) or "auto",
        encoder_window=window,
    )
    res = evaluate_model(
        model,
        processor,
        data.eval_ds,
        [r.text for r in rows],
        [r.id for r in rows],
        cfg,
        collator=data.collator,
        audio=[audio_file(r) for r in rows],
        model_name=model_name,
        why={
            "language": "the run's (RUN/run_plan.json)",
            "encoder_window": WINDOW_WHY[window],
        },
    )
    res = dataclasses.replace(res, manifest=str(train_cfg.eval_manifest or ""))
    res.write(out_dir)
    log.info(
        "%s %s on %d held-out clips: %.2f%% (%s)",
        when,
        res.score.metric.upper(),
        len(rows),
        100 * res.score.normalized,
        res.score.normalizer,
    )
    return res
