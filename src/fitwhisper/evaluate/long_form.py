"""`fitwhisper evaluate --long_form`: each row one long recording (minutes, not a 30 s clip),
transcribed the way `fitwhisper transcribe` does it (its engine, its 30 s windows, its
conditioning on the previous text) and scored as one text against the row's reference: a
transcript (`text`), or timed segments (a `segments` column, an SRT/VTT file beside the
recording). Where the reference has times, the mean boundary error says how far the
model's segment boundaries lie from them.

Boundary error: for every reference segment, the distance from its start to the nearest
start of a transcribed segment, and from its end to the nearest end; the mean over all of
them, in seconds (0: every reference boundary has a transcribed one at the same time). A
transcript with fewer, longer segments than the reference is charged for the boundaries it
lacks; one with extra boundaries is not (they are in the text score's insertions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from fitwhisper.config import DataConfig, EvalConfig
from fitwhisper.data.segments import Segment


def boundary_distances(reference: Sequence[Segment], hypothesis: Sequence) -> list[float]:
    """Per reference boundary (start, end of each segment), seconds to the nearest
    hypothesis boundary of the same kind; empty when either side has no segment."""
    if not reference or not hypothesis:
        return []
    starts = [h.start for h in hypothesis]
    ends = [h.end for h in hypothesis]
    out = []
    for r in reference:
        out.append(min(abs(r.start - s) for s in starts))
        out.append(min(abs(r.end - e) for e in ends))
    return out


def evaluate_long_form(
    model_spec: str,
    manifest_path: str | Path,
    transcriber: Callable[[], Callable],
    cfg: EvalConfig | None = None,
    data_cfg: DataConfig | None = None,
):
    """Score `model_spec` on the long recordings of `manifest_path`, one text per row.

    Rows are checked as every command checks them, except that a recording may be of any
    length and its reference of any number of tokens; rows with segments stay whole.

    Args:
        transcriber: called once the rows are checked, returns `transcribe(name, audio)`
            -> a transcript with `text`, `segments` (start, end) and `language`: the way
            `fitwhisper transcribe` does it (transcribe/run.py `recording_transcriber`,
            which the CLI passes: scoring sits below transcription in the layers).

    Returns:
        An `EvalResult` whose clips are the recordings, with `long_form` figures: the mean
        boundary error and the boundaries it was measured on.
    """
    from fitwhisper.data.audio import load_row_audio
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.evaluate.generate import audio_file
    from fitwhisper.evaluate.results import EvalResult
    from fitwhisper.evaluate.scorer import scorer_for
    from fitwhisper.scoring import score

    cfg = cfg or EvalConfig()
    data_cfg = dataclasses.replace(data_cfg or DataConfig(), max_audio_len=float("inf"))
    data = usable_rows(manifest_path, data_cfg, None, purpose="scoring", cut=False)
    rows = data.rows[: cfg.max_samples] if cfg.max_samples else data.rows
    transcribe = transcriber()  # the model loads after the data check, never before
    hypotheses, distances, per_row, languages = [], [], [], []
    for row in rows:
        transcript = transcribe(row.id, load_row_audio(row))
        hypotheses.append(transcript.text.strip())
        languages.append(transcript.language)
        found = boundary_distances(row.segments or (), transcript.segments)
        distances += found
        per_row.append(sum(found) / len(found) if found else None)
    language = cfg.language or next((lang for lang in languages if lang), None)
    metric, normalizer = scorer_for(dataclasses.replace(cfg, language=language))
    references = [r.text or "" for r in rows]
    return EvalResult(
        score=score(references, hypotheses, metric, normalizer),
        references=tuple(references),
        hypotheses=tuple(hypotheses),
        ids=tuple(r.id for r in rows),
        normalizer=normalizer,
        model=str(model_spec),
        manifest=str(manifest_path),
        skipped=data.skipped,
        output_script=cfg.output_script,
        audio=tuple(audio_file(r) for r in rows),
        long_form={
            "mean_boundary_error_s": sum(distances) / len(distances) if distances else None,
            "boundaries": len(distances),
            "boundary_error_s_per_recording": per_row,
            "transcribed_as": "fitwhisper transcribe's long-form path (transformers engine)",
        },
    )
