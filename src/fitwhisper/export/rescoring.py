"""Re-score exports against their source: `fitwhisper export ... --manifest M`.

The source model (transformers, greedy) and each export, run in its own engine (greedy,
no temperature fallback, no voice activity detection), transcribe the same manifest rows,
scored with the metric and normaliser of `fitwhisper evaluate`, so a difference is the
export's alone. Then a long file (the first clips joined with a second of silence
between them, up to about a minute) is transcribed with timestamps by each: its error
rate, its segment count, and whether its times run forward inside the file.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fitwhisper.scoring import Score
from fitwhisper.whisper_facts import SAMPLE_RATE

LONG_FILE_S = 60.0  # about two 30 s windows: the long-form path, and the seam between them
GAP_S = 1.0


@dataclass(frozen=True)
class LongFile:
    """One engine's transcript of the long file, with timestamps."""

    score: Score
    segments: int
    times_ok: bool  # starts never go back, each end >= its start, all inside the file

    def as_dict(self) -> dict:
        m = self.score.metric
        return {m: self.score.normalized, "segments": self.segments, "times_ok": self.times_ok}


@dataclass(frozen=True)
class Scored:
    """A model (the source or one export) on the rows and on the long file."""

    name: str
    engine: str
    score: Score
    seconds: float
    long_file: LongFile | None = None
    folder: str | None = None
    languages: dict[str, int] | None = None  # the language each clip was decoded in

    def as_dict(self) -> dict:
        out = {"engine": self.engine, **self.score.as_dict(), "seconds": self.seconds}
        if self.languages is not None:
            out["languages"] = self.languages
        if self.folder:
            out["folder"] = self.folder
        if self.long_file is not None:
            out["long_file"] = self.long_file.as_dict()
        return out


@dataclass(frozen=True)
class Rescore:
    """The source and its exports on the same rows, same metric and normaliser."""

    source: Scored
    exports: list[Scored]
    n_rows: int
    long_file_s: float = 0.0
    long_file_clips: int = 0
    source_plan: dict | None = None  # how the source was scored, and why (evaluate/plan.py)
    metric: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric", self.source.score.metric)

    def difference(self, s: Scored) -> float:
        return s.score.normalized - self.source.score.normalized

    def as_dict(self) -> dict:
        m = self.metric
        formats = {}
        for s in self.exports:
            formats[s.name] = {
                **s.as_dict(),
                "difference": {m: self.difference(s)},
                "speed_vs_source": self.source.seconds / s.seconds if s.seconds else None,
            }
        return {
            "metric": m,
            "normalizer": self.source.score.normalizer,
            "rows": self.n_rows,
            "long_file": {"seconds": self.long_file_s, "clips": self.long_file_clips},
            "source": self.source.as_dict(),
            "formats": formats,
            **({"source_plan": self.source_plan} if self.source_plan else {}),
        }

    def format(self) -> str:
        """The side-by-side table printed by `fitwhisper export --manifest`."""
        m = self.metric.upper()
        lines = [
            f"{m} ({self.source.score.normalizer}) on {self.n_rows} rows; long file "
            f"{self.long_file_s:.0f} s ({self.long_file_clips} clips) with timestamps",
            f"  {'format':8} {'engine':30} {m:>7} {'change':>7} {'seconds':>8} {'speed':>6}"
            f" {'long ' + m:>9} {'segments':>8} {'times':>5}",
        ]
        for s in [self.source, *self.exports]:
            change = "" if s is self.source else f"{100 * self.difference(s):+.2f}"
            speed = self.source.seconds / s.seconds if s.seconds else 0.0
            lf = s.long_file
            long_cols = f"{'-':>9} {'-':>8} {'-':>5}"
            if lf:
                ok = "ok" if lf.times_ok else "BAD"
                long_cols = f"{100 * lf.score.normalized:8.2f}% {lf.segments:8d} {ok:>5}"
            lines.append(
                f"  {s.name:8} {s.engine:30} {100 * s.score.normalized:6.2f}% {change:>7} "
                f"{s.seconds:8.1f} {speed:5.2f}x {long_cols}"
            )
        return "\n".join(lines)


def scoring_rows(
    source_spec, manifest: str | Path, max_samples: int | None = None, *, processor=None
) -> list:
    """The manifest's rows to score on, checked as `fitwhisper evaluate` checks them; the
    export checks them before it writes anything.

    Raises:
        DataError: the manifest cannot be read, or no row (or a bad one, by the bad-row
            policy) is usable.
    """
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.models.resolve import as_resolved, load_processor

    processor = processor or load_processor(as_resolved(source_spec))
    return usable_rows(
        manifest, None, processor.tokenizer, limit=max_samples, purpose="scoring"
    ).rows


def rescore(
    source_spec,
    exports: dict[str, Path],
    manifest: str | Path,
    *,
    language: str | None = None,
    max_samples: int | None = None,
    batch_size: int = 8,
    opencc: str | None = None,
    long_file: bool = True,
    rows: list | None = None,
) -> Rescore:
    """Score the source and each export (format -> folder) on the same manifest rows;
    `opencc` converts both sides' script before scoring, as `evaluate --opencc` does.
    `language` None: each export's engine uses the language its files record, and the
    source (and the metric) the one its generation config records. `rows`: those
    `scoring_rows` returned, when the caller checked the manifest already."""
    import dataclasses

    from fitwhisper.config import EvalConfig
    from fitwhisper.data.audio import load_audio
    from fitwhisper.evaluate import evaluate_rows, scorer_for, scoring_language
    from fitwhisper.export.formats import FORMATS, runner
    from fitwhisper.models.resolve import as_resolved, language_choice, load_processor
    from fitwhisper.scoring import score

    # One check of the rows, one scorer: every model sees the same clips, scored alike.
    source_model = as_resolved(source_spec)
    processor = load_processor(source_model)
    # No language given: the source is prompted with the fine-tune's recorded one (as its
    # exports' engines find it in their own files, which is checked: they get no language)
    # and it picks the metric (CER for a Mandarin fine-tune).
    source_language, language_why = language_choice(source_model, language)
    if rows is None:
        rows = scoring_rows(source_model, manifest, max_samples, processor=processor)
    # 30 s windows for the source too, as every engine reads them (a model trained on
    # trimmed input would otherwise be scored on its short window).
    cfg = EvalConfig(
        language=source_language, batch_size=batch_size, opencc=opencc, encoder_window="full"
    )
    t0 = time.perf_counter()
    why = {"language": language_why, "encoder_window": "30 s, as every export's engine reads"}
    source_res = evaluate_rows(source_model, processor, rows, cfg, why=why)
    source_s = time.perf_counter() - t0
    metric, norm = scorer_for(
        dataclasses.replace(cfg, language=scoring_language(rows, source_language))
    )
    audios = [load_audio(r.audio) for r in rows]
    long_audio, long_ref, n_long = _long_file(audios, [r.text for r in rows])
    duration = len(long_audio) / SAMPLE_RATE

    def judge(text: str, segments: list[dict]) -> LongFile:
        return LongFile(
            score([long_ref], [text], metric, norm), len(segments), _times_ok(segments, duration)
        )

    source_long = None
    if long_file:
        text, segments = _source_long_file(source_model, long_audio, source_language)
        source_long = judge(text, segments)
    source = Scored("source", "transformers", source_res.score, source_s, source_long)
    scored = []
    for fmt, folder in exports.items():
        run = runner(fmt)
        t0 = time.perf_counter()
        outs = run(Path(folder), audios, language=language, timestamps=False)
        seconds = time.perf_counter() - t0
        s = score([r.text for r in rows], [o["text"] for o in outs], metric, norm)
        lf = None
        if long_file:
            (o,) = run(Path(folder), [long_audio], language=language, timestamps=True)
            lf = judge(o["text"], o["segments"])
        langs = dict(Counter(str(o.get("language")) for o in outs))
        scored.append(Scored(fmt, FORMATS[fmt].engine, s, seconds, lf, str(folder), langs))
    return Rescore(
        source,
        scored,
        len(rows),
        duration if long_file else 0.0,
        n_long if long_file else 0,
        dataclasses.asdict(source_res.plan) if source_res.plan else None,
    )


def _long_file(audios: list[np.ndarray], texts: list[str]) -> tuple[np.ndarray, str, int]:
    """The first clips joined with GAP_S of silence, up to about LONG_FILE_S."""
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), dtype=np.float32)
    parts, refs, total = [], [], 0.0
    for audio, text in zip(audios, texts, strict=True):
        if parts and total + len(audio) / SAMPLE_RATE > LONG_FILE_S:
            break
        parts += [audio.astype(np.float32), gap]
        refs.append(text)
        total += len(audio) / SAMPLE_RATE + GAP_S
    return np.concatenate(parts), " ".join(refs), len(refs)


def _source_long_file(model, audio: np.ndarray, language: str | None) -> tuple[str, list[dict]]:
    """The source's own long-form transcript with timestamps (transformers' sequential
    algorithm, through fitwhisper's transformers engine, greedy like the exports)."""
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    opts = TranscribeOptions(
        language=language,
        beam_size=1,
        timestamps="segment",
        temperature_fallback=False,
        condition_on_previous_text=False,
        vad=False,
        batch_size=1,
        mode="sequential",
    )
    (t,) = TransformersEngine(model, opts, "cpu").transcribe(["long"], [audio])
    segments = [{"start": s.start, "end": s.end, "text": s.text} for s in t.segments]
    return " ".join(s["text"].strip() for s in segments), segments


def _times_ok(segments: list[dict], duration: float) -> bool:
    """Segment times run forward and stay inside the file (a second of slack at the end)."""
    last = 0.0
    for s in segments:
        start, end = float(s["start"]), float(s["end"])
        if start < last - 0.01 or end < start or end > duration + 1.0:
            return False
        last = start
    return bool(segments)
