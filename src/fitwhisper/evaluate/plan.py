"""What a scoring run decided for one model on one set of clips, and why: every "auto" of
the scoring options answered once, recorded as OUT/eval_plan.json beside metrics.json (as
`train` records RUN/run_plan.json).

The answers come from the one place that decides each (`models.resolve.language_choice`,
`models.short_window.window_choice`, `evaluate.scorer`); this object only carries them to
the record and the terminal.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PLAN_FILE = "eval_plan.json"


@dataclass(frozen=True)
class EvalPlan:
    """How one model was scored."""

    model: str
    language: str | None  # the language token of the prompt; None: detected, or English-only
    clip_languages: tuple[str, ...]  # prompts in the clips' own languages, when they differ
    scoring_language: str | None  # the clips' (their own column, else `language`)
    metric: str
    normalizer: str
    encoder_window: str  # full (30 s) or short (each batch encoded on its longest clip)
    expected_script: str | None
    output_script: str | None
    dtype: str
    batch_size: int
    generation: str
    why: dict[str, str] = field(default_factory=dict)

    def write(self, out_dir: Path) -> Path:
        path = Path(out_dir) / PLAN_FILE
        data = dataclasses.asdict(self)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def summary_lines(self) -> list[str]:
        """The decisions a reader of the terminal summary needs, one line each."""
        if self.clip_languages:
            prompt = "each clip in its own (" + ", ".join(self.clip_languages) + ")"
        else:
            prompt = self.language or "detected per clip"
        return [
            f"language        {prompt} ({self.why.get('language', 'given')})",
            f"encoder window  {self.encoder_window} ({self.why.get('encoder_window', 'given')})",
            f"decoding        {self.generation}",
        ]


def decided(
    model,
    cfg,
    metric: str,
    normalizer,
    *,
    window: tuple[str, str],
    expected_script: str | None,
    languages: Sequence[str | None] | None,
    model_name: str,
    why: Mapping[str, str] | None,
) -> EvalPlan:
    """The plan of a scoring `evaluate_model` has set up: `cfg` is its EvalConfig (its
    language the scoring language), `window` the encoder window and why, `languages` the
    clips' prompts when they differ, `why` the reasons the caller knows (the prompt's
    language, the dtype, a window it chose), which win over the ones worked out here."""
    from fitwhisper.whisper_facts import decoding

    gen = model.generation_config
    scored_as = f"auto: for {cfg.language or 'English'} clips"
    return EvalPlan(
        model=model_name,
        language=gen.language,
        clip_languages=tuple(dict.fromkeys(languages)) if len(set(languages or ())) > 1 else (),
        scoring_language=cfg.language,
        metric=metric,
        normalizer=normalizer.describe(),
        encoder_window=window[0],
        expected_script=expected_script,
        output_script=cfg.output_script,
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        batch_size=cfg.batch_size,
        generation=f"{decoding(cfg.beam_size)}, "
        f"at most {cfg.generation_max_length or gen.max_length} tokens",
        why={
            "language": "the model's generation config",
            "metric": "--metric" if cfg.metric else scored_as,
            "normalizer": "--normalizer" if cfg.normalizer != "auto" else scored_as,
            "encoder_window": window[1],
            **(why or {}),  # the caller knows better
        },
    )
