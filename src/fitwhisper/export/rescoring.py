"""Re-score an export against its source: `fitwhisper export ... --manifest M`.

The source model (transformers, greedy) and the exported one (faster-whisper, greedy)
transcribe the same manifest rows and are scored with the same metric and normaliser as
`fitwhisper evaluate`, so the difference is the export's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fitwhisper.scoring import Score


@dataclass(frozen=True)
class Rescore:
    """The source and the exported model on the same rows, same metric and normaliser."""

    source: Score
    exported: Score
    n_rows: int

    def as_dict(self) -> dict:
        m = self.source.metric
        return {
            "metric": m,
            "normalizer": self.source.normalizer,
            "rows": self.n_rows,
            "source": self.source.as_dict(),
            "exported": self.exported.as_dict(),
            "difference": {m: self.exported.normalized - self.source.normalized},
        }

    def format(self) -> str:
        m = self.source.metric.upper()
        d = 100 * (self.exported.normalized - self.source.normalized)
        return (
            f"{m} ({self.source.normalizer}) on {self.n_rows} rows: "
            f"source {100 * self.source.normalized:.2f}%, "
            f"exported {100 * self.exported.normalized:.2f}%  ({d:+.2f} points)"
        )


def rescore(
    source_spec: str,
    exported: str | Path,
    manifest: str | Path,
    *,
    language: str | None = None,
    max_samples: int | None = None,
    batch_size: int = 8,
    device: str = "cpu",
    opencc: str | None = None,
) -> Rescore:
    """Score the source model and its export on the same manifest rows (greedy, no
    temperature fallback, no timestamps: the settings of `fitwhisper evaluate`); `opencc`
    converts both sides' script before scoring, as `evaluate --opencc` does."""
    import dataclasses

    from fitwhisper.config import EvalConfig
    from fitwhisper.data.audio import load_audio
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.evaluate import evaluate_rows, scorer_for, scoring_language
    from fitwhisper.models.resolve import as_resolved, load_processor
    from fitwhisper.scoring import score
    from fitwhisper.transcribe.ct2_engine import CT2Engine
    from fitwhisper.transcribe.options import TranscribeOptions

    # One check of the rows, one scorer: the two models see the same clips, scored alike.
    source_model = as_resolved(source_spec)
    processor = load_processor(source_model)
    rows = usable_rows(
        manifest, None, processor.tokenizer, limit=max_samples, purpose="scoring"
    ).rows
    cfg = EvalConfig(language=language, batch_size=batch_size, opencc=opencc)
    source = evaluate_rows(source_model, processor, rows, cfg)
    # Every clip decoded whole, as evaluate decodes it for the source: no VAD in between.
    opts = TranscribeOptions(
        language=language,
        timestamps="none",
        temperature_fallback=False,
        condition_on_previous_text=False,
        batch_size=batch_size,
        vad=False,
    )
    engine = CT2Engine(exported, opts, device)
    texts = [
        t.text for t in engine.transcribe([r.id for r in rows], [load_audio(r.audio) for r in rows])
    ]
    metric, norm = scorer_for(dataclasses.replace(cfg, language=scoring_language(rows, language)))
    exported_score = score([r.text for r in rows], texts, metric, norm)
    return Rescore(source.score, exported_score, len(rows))
