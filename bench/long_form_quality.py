"""Long-form quality: bench/quality.py's held-out speakers joined into recordings of minutes.

    PYTHONPATH=src python bench/quality.py --set en --recipes zero-shot,defaults,standard \
        --long_form --work W

Run through `bench/quality.py --long_form`, after its rows are trained and scored as single
clips. The held-out clips, speaker after speaker in manifest order, are joined into
recordings of about equal length, each of at least MIN_RECORDING_S of speech where the
set has that much, a seeded pause of PAUSE_S between clips and LEAD_S of silence at each
end; each clip is a reference segment with its known times: where its speech starts and
ends (its first and last 10 ms frame within SPEECH_DB of its loudest), not its file's
edges, since the recorded clips hold about 0.4 s of silence at each end (speechocean762),
which would otherwise count against every model's boundaries.

Every row's model transcribes every recording the way `fitwhisper transcribe` does by
default (`transcribe.run.recording_transcriber`: the transformers engine, Whisper's
sequential long-form windows with segment timestamps, conditioning on the previous text,
beam search of 5), once without a prompt and once with
`--initial_prompt` holding the recording's domain words (PROMPT_WORDS of its longest
distinct reference words, as a user lists the names and terms a recording holds).

Pairing by clip: each recording's transcript is aligned with its clips' references joined
(each normalised as the single-clip scoring normalises it), and every edit is charged to the
clip whose reference words it touches (an insertion between two clips to the earlier one),
so a long-form error is a sum over the same clips and units as the single-clip one, and
differences get the paired bootstrap by clip (clips within one recording are not
independent, so the intervals are on the narrow side). The single-clip figure beside each
row is the same model scored clip by clip at the same beam of 5.

Per row the table gives: single-clip and long-form error, their difference, long-form
against the standard recipe's, the mean boundary error (evaluate/long_form.py's
definition), the clips that lost at least half their words in long-form but not as single
clips (words dropped at window joins or after a pause), the transcript's segments per
reference segment (about 1 where timestamps are alive; far below where a model lost them),
and long-form error with the prompt, against without.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SAMPLE_RATE = 16000
MIN_RECORDING_S = 120.0
PAUSE_S = (0.5, 2.0)
LEAD_S = 0.5
PROMPT_WORDS = 12
BEAM = 5  # `fitwhisper transcribe`'s default
SPEECH_DB = 35.0  # a frame this far below the clip's loudest is silence


@dataclass
class Recording:
    name: str
    audio: str
    clips: list[str]  # clip ids (resolved audio paths), in time order
    texts: list[str]
    times: list[tuple[float, float]]


@dataclass
class LongFormOutcome:
    """One model on every recording, with and without its domain prompt."""

    key: str
    errors: list[int]  # per held-out clip, charged as the module docstring says
    units: list[int]
    deletions: list[int]
    prompted_errors: list[int]
    boundary_errors: list[float] = field(default_factory=list)  # seconds, every boundary
    segments: int = 0  # transcribed segments, all recordings
    reference_segments: int = 0
    repeats_dropped: int = 0


def build_recordings(eval_rows: list[dict], folder: Path, seed: int) -> list[Recording]:
    """The held-out clips joined into recordings written as WAV files under `folder`."""
    import numpy as np
    import soundfile as sf

    from fitwhisper.data.audio import load_audio

    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    clips = [
        (str(Path(r["audio"]).resolve()), r["text"], load_audio(r["audio"])) for r in eval_rows
    ]
    total = sum(len(a) for _, _, a in clips) / SAMPLE_RATE
    # As many recordings of about equal length as hold MIN_RECORDING_S of speech each.
    n = max(1, int(total // MIN_RECORDING_S))
    target = total / n
    groups: list[list] = [[]]
    spoken = 0.0
    for clip in clips:
        if spoken >= target and len(groups) < n:
            groups.append([])
            spoken = 0.0
        groups[-1].append(clip)
        spoken += len(clip[2]) / SAMPLE_RATE
    recordings = []
    for i, group in enumerate(groups):
        pieces = [np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32)]
        times, at = [], LEAD_S
        for j, (_, _, audio) in enumerate(group):
            if j:
                pause = rng.uniform(*PAUSE_S)
                pieces.append(np.zeros(int(pause * SAMPLE_RATE), np.float32))
                at += int(pause * SAMPLE_RATE) / SAMPLE_RATE
            pieces.append(audio)
            lead, tail = speech_extent(audio)
            times.append((round(at + lead, 3), round(at + tail, 3)))
            at += len(audio) / SAMPLE_RATE
        pieces.append(np.zeros(int(LEAD_S * SAMPLE_RATE), np.float32))
        path = folder / f"recording-{i:02d}.wav"
        sf.write(path, np.concatenate(pieces), SAMPLE_RATE)
        recordings.append(
            Recording(
                name=path.stem,
                audio=str(path),
                clips=[c for c, _, _ in group],
                texts=[t for _, t, _ in group],
                times=times,
            )
        )
    manifest = folder / "recordings.jsonl"  # the same recordings as `evaluate --long_form` reads
    with manifest.open("w") as f:
        for r in recordings:
            segments = [
                {"start": s, "end": e, "text": t}
                for (s, e), t in zip(r.times, r.texts, strict=True)
            ]
            f.write(json.dumps({"audio": r.audio, "text": " ".join(r.texts), "segments": segments}))
            f.write("\n")
    return recordings


def speech_extent(audio) -> tuple[float, float]:
    """Seconds from a clip's start to where its speech starts and to where it ends: its
    first and last 10 ms frame within SPEECH_DB of its loudest (the whole clip if silent)."""
    import numpy as np

    frame = SAMPLE_RATE // 100
    n = len(audio) // frame
    if n == 0:
        return 0.0, len(audio) / SAMPLE_RATE
    power = np.mean(np.square(audio[: n * frame].reshape(n, frame), dtype=np.float64), axis=1)
    loud = np.flatnonzero(power >= power.max() * 10 ** (-SPEECH_DB / 10))
    if power.max() == 0 or len(loud) == 0:
        return 0.0, len(audio) / SAMPLE_RATE
    return float(loud[0]) / 100, float(loud[-1] + 1) / 100


def domain_prompt(texts: list[str]) -> str:
    """PROMPT_WORDS of the recording's longest distinct words, as a user lists its terms."""
    words = {w.strip(".,!?;:\"'").lower() for t in texts for w in t.split()}
    longest = sorted((w for w in words if w), key=lambda w: (-len(w), w))[:PROMPT_WORDS]
    return ", ".join(sorted(longest)) + "."


def charge_to_clips(
    clip_refs: list[list[str]], hypothesis: list[str]
) -> tuple[list[int], list[int]]:
    """Per clip: the edits (and the deletions among them) of the recording's alignment that
    touch its reference units; an insertion between clips goes to the earlier clip."""
    import jiwer

    owner = [i for i, units in enumerate(clip_refs) for _ in units]
    errors, deletions = [0] * len(clip_refs), [0] * len(clip_refs)
    if not owner:
        return errors, deletions
    if not hypothesis:
        return [len(u) for u in clip_refs], [len(u) for u in clip_refs]
    reference = " ".join(u for units in clip_refs for u in units)
    for chunk in jiwer.process_words(reference, " ".join(hypothesis)).alignments[0]:
        if chunk.type == "insert":
            at = owner[max(chunk.ref_start_idx - 1, 0)]
            errors[at] += chunk.hyp_end_idx - chunk.hyp_start_idx
        elif chunk.type in ("substitute", "delete"):
            for k in range(chunk.ref_start_idx, chunk.ref_end_idx):
                errors[owner[k]] += 1
                deletions[owner[k]] += chunk.type == "delete"
    return errors, deletions


def transcribe_all(
    key: str,
    model: str,
    recordings: list[Recording],
    language: str | None,
    normalizer: Callable[[str], str],
    clip_order: list[str],
    units_of: Callable[[str], list[str]],
) -> LongFormOutcome:
    """The row's model on every recording, without and with its domain prompt."""
    from fitwhisper.data.audio import load_audio
    from fitwhisper.data.segments import Segment
    from fitwhisper.evaluate.long_form import boundary_distances
    from fitwhisper.transcribe.run import recording_transcriber

    index = {c: i for i, c in enumerate(clip_order)}
    n = len(clip_order)
    out = LongFormOutcome(key, [0] * n, [0] * n, [0] * n, [0] * n)
    plain = recording_transcriber(model, language=language, task="transcribe", output_script=None)
    for rec in recordings:
        audio = load_audio(rec.audio)
        refs = [units_of(normalizer(t)) for t in rec.texts]
        prompted = recording_transcriber(
            model,
            language=language,
            task="transcribe",
            output_script=None,
            initial_prompt=domain_prompt(rec.texts),
        )
        for transcriber, prompt in ((plain, False), (prompted, True)):
            t = transcriber(rec.name, audio)
            errors, deletions = charge_to_clips(refs, units_of(normalizer(t.text)))
            for clip, e, d, r in zip(rec.clips, errors, deletions, refs, strict=True):
                if prompt:
                    out.prompted_errors[index[clip]] = e
                else:
                    out.errors[index[clip]], out.deletions[index[clip]] = e, d
                    out.units[index[clip]] = len(r)
            if not prompt:
                reference = [Segment(s, e, "") for s, e in rec.times]
                out.boundary_errors += boundary_distances(reference, t.segments)
                out.segments += len(t.segments)
                out.reference_segments += len(reference)
                out.repeats_dropped += t.extra.get("repeats_dropped", 0)
    return out


def measure(
    ds,
    outcomes: list,
    single_at_beam: Callable[[str, str], object],
    folder: Path,
    seed: int,
    eval_rows: list[dict],
) -> str:
    """bench/quality.py's long-form section: each outcome's model on the recordings.

    Args:
        single_at_beam: (row key, model) -> that model's single-clip Outcome at beam BEAM.
    """
    from fitwhisper.evaluate.scorer import make_scorer
    from fitwhisper.scoring import _units

    recordings = build_recordings(eval_rows, folder / "recordings", seed)
    metric, normalizer = make_scorer(ds.language or "en")
    singles, longs = {}, {}
    for o in outcomes:
        kept = folder / f"{o.key}.json"
        single = single_at_beam(o.key, o.model)
        conditions = {
            "model": o.model,
            "clips": single.ids,
            "recordings": [asdict(r) for r in recordings],
        }
        saved = json.loads(kept.read_text()) if kept.is_file() else {}
        if saved.get("conditions") == conditions:
            longs[o.key] = LongFormOutcome(**saved["outcome"])
            print(f"[{ds.key}] long-form {o.key}: kept from {kept}", flush=True)
        else:
            print(f"[{ds.key}] long-form {o.key} ...", flush=True)
            longs[o.key] = transcribe_all(
                o.key,
                o.model,
                recordings,
                ds.language,
                normalizer,
                single.ids,
                lambda text: _units(text, metric),
            )
            kept.write_text(json.dumps({"conditions": conditions, "outcome": asdict(longs[o.key])}))
        singles[o.key] = single
    return format_section(ds, recordings, outcomes, singles, longs, metric, seed)


def _weights_digest(model: str) -> str | None:
    """sha256 of a model folder's weights; None for a named model (offline/..., a Hub id)."""
    import hashlib

    files = sorted(Path(model).glob("*.safetensors")) if Path(model).is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def format_section(ds, recordings, outcomes, singles, longs, metric, seed) -> str:
    import soundfile

    from fitwhisper.report.stats import paired_bootstrap

    def rate(errors, units) -> str:
        return f"{100 * sum(errors) / max(sum(units), 1):.1f}"

    def diff(a_errors, b_errors, units) -> str:
        b = paired_bootstrap(a_errors, b_errors, units, seed=seed)
        if b["low"] is None:
            return f"{100 * b['difference']:+.1f}"
        return f"{100 * b['difference']:+.1f} ({100 * b['low']:+.1f} to {100 * b['high']:+.1f})"

    m = metric.upper()
    head = [
        "model",
        f"single clips {m} %",
        f"long-form {m} %",
        "long-form minus single, points (95% CI)",
        "long-form vs standard recipe, points (95% CI)",
        "mean boundary error s",
        "clips half lost",
        "segments per reference segment",
        f"with domain prompt {m} %",
        "prompt minus none, points (95% CI)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    standard = longs.get("standard")
    for o in outcomes:
        s, lf = singles[o.key], longs[o.key]
        assert lf.units == s.units, f"{o.key}: long-form and single-clip units differ"
        lost = sum(
            d * 2 >= u > 0 and se * 2 < u
            for d, u, se in zip(lf.deletions, lf.units, s.errors, strict=True)
        )
        boundary = lf.boundary_errors
        cells = [
            o.key,
            rate(s.errors, s.units),
            rate(lf.errors, lf.units),
            diff(s.errors, lf.errors, lf.units),
            ""
            if standard is None or o.key == "standard"
            else diff(standard.errors, lf.errors, lf.units),
            f"{sum(boundary) / len(boundary):.2f}" if boundary else "",
            str(lost),
            f"{lf.segments / max(lf.reference_segments, 1):.2f}",
            rate(lf.prompted_errors, lf.units),
            diff(lf.errors, lf.prompted_errors, lf.units),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    minutes = [soundfile.info(r.audio).duration / 60 for r in recordings]
    clips = sum(len(r.clips) for r in recordings)
    return "\n".join(
        [
            f"### Long-form: `{ds.model}`'s rows on the held-out speakers joined into recordings",
            "",
            f"{clips} held-out clips joined into {len(recordings)} recordings of "
            f"{min(minutes):.1f}-{max(minutes):.1f} min (pauses of {PAUSE_S[0]:g}-"
            f"{PAUSE_S[1]:g} s, seed {seed}), transcribed as `fitwhisper transcribe` does by "
            f"default (beam {BEAM}, segment timestamps, conditioning on the previous text); "
            f"single clips scored at the same beam. Errors charged to clips and paired by "
            f"clip (bench/long_form_quality.py). Prompt: the recording's {PROMPT_WORDS} "
            "longest distinct words.",
            "",
            *lines,
        ]
    )
