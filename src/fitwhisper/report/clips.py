"""The clip table: each scored clip with its alignment, audio, duration, speaker and the
signs of a hallucinated output, as compact rows the page renders."""

from __future__ import annotations

import base64
import csv
import json
import mimetypes
import os
from collections import Counter
from pathlib import Path

from fitwhisper.scoring import aligned_units

# One row of the page's table, in this order (rows are lists: 5,000 clips stay small).
COLUMNS = (
    "id",
    "audio",
    "duration",
    "speaker",
    "language",
    "errors",
    "units",
    "rate",
    "S",
    "D",
    "I",
    "ops",
    "flags",
    "before_errors",
)
SHORT_CLIP_S = 1.0  # text on a clip shorter than this is suspect
REPEAT_N, REPEAT_TIMES = 2, 3  # an n-gram said this many times in a row, and not in the reference
SPEAKER_KEYS = ("speaker", "speaker_id", "client_id", "spk")


def read_jsonl(path: Path) -> list[dict]:
    """The rows of a JSON-lines file. Lines end at "\n" only: a transcript may hold U+2028,
    U+0085 and other characters `str.splitlines` would split at. A line that does not parse
    is left out and named (`fitwhisper.report.unreadable`)."""
    from fitwhisper.report.unreadable import note

    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as e:
            note(path, f"line {n}: {e}")
    return rows


def clip_rows(
    predictions: list[dict],
    metric: str,
    report_dir: Path,
    *,
    meta: dict[str, dict] | None = None,
    before: list[dict] | None = None,
    embed_audio: bool = False,
) -> list[list]:
    """The table's rows (`COLUMNS`), worst first.

    meta: per clip id, what the run's data report or the manifest knows (audio, duration,
        speaker, language); before: the same clips scored by the starting model.
    """
    meta = meta or {}
    before_errors = {u["id"]: u["errors"] for u in before or ()}
    rows = []
    for u in predictions:
        m = meta.get(u["id"], {})
        audio = u.get("audio") or m.get("audio")
        duration = m.get("duration") or _duration(audio)
        ops = aligned_units(u["reference_normalized"], u["hypothesis_normalized"], metric)
        rows.append(
            [
                u["id"],
                _audio_src(audio, report_dir, embed_audio),
                duration,
                m.get("speaker"),
                u.get("language") or m.get("language"),
                u["errors"],
                u["ref_units"],
                u["errors"] / u["ref_units"] if u["ref_units"] else None,
                u["substitutions"],
                u["deletions"],
                u["insertions"],
                [list(op) for op in ops],
                hallucination_signs(u, duration),
                before_errors.get(u["id"]),
            ]
        )
    rows.sort(key=lambda r: (-r[5], -(r[7] or 0), r[0]))
    return rows


def hallucination_signs(utt: dict, duration: float | None) -> list[str]:
    """What in one clip's output looks invented: a phrase repeated in a row that the
    reference does not repeat, text on a very short clip, generation cut at its limit."""
    signs = []
    hyp, ref = utt["hypothesis_normalized"].split(), utt["reference_normalized"].split()
    if _max_repeat(hyp) >= REPEAT_TIMES > _max_repeat(ref):
        signs.append("repeats")
    if hyp and duration is not None and duration < SHORT_CLIP_S:
        signs.append("text on a short clip")
    if utt.get("hit_limit"):
        signs.append("hit the generation limit")
    return signs


def _max_repeat(words: list[str]) -> int:
    """The most times any 1..REPEAT_N-gram occurs back to back."""
    best = 1 if words else 0
    for n in range(1, REPEAT_N + 1):
        for start in range(len(words) - n):
            times, i = 1, start + n
            while words[i : i + n] == words[start : start + n]:
                times, i = times + 1, i + n
            best = max(best, times)
    return best


def confusions(rows: list[list], top: int = 20) -> list[list]:
    """The most frequent substitutions, deletions and insertions: [op, ref, hyp, count]."""
    counts = Counter(
        (op, r, h) for row in rows for op, r, h in row[COLUMNS.index("ops")] if op != "="
    )
    return [[op, r, h, n] for (op, r, h), n in counts.most_common(top)]


def data_report_meta(run_dir: Path) -> dict[str, dict]:
    """Per clip id, the audio file, duration and language the run's data check measured
    (RUN/data_report_eval.csv)."""
    path = run_dir / "data_report_eval.csv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as f:
        return {
            r["id"]: {
                "audio": r.get("audio") or None,
                "duration": float(r["duration_s"]) if r.get("duration_s") else None,
                "language": r.get("language") or None,
            }
            for r in csv.DictReader(f)
        }


def manifest_meta(manifest: str | None, base: Path) -> dict[str, dict]:
    """Per clip id (the id column, else the audio as written), the speaker column of a
    JSONL or CSV manifest, where it has one."""
    if not manifest:
        return {}
    path = Path(manifest) if Path(manifest).is_absolute() else base / manifest
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".csv", ".tsv"):
        return {}
    try:
        if path.suffix.lower() == ".jsonl":
            rows = read_jsonl(path)
        else:
            with path.open(encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ","))
    except (OSError, ValueError):
        return {}
    out = {}
    for r in rows:
        if not isinstance(r, dict):
            continue
        speaker = next((r[k] for k in SPEAKER_KEYS if r.get(k)), None)
        key = r.get("id") or r.get("audio_path") or r.get("audio") or r.get("file_name")
        if speaker is not None and isinstance(key, str):
            out[key] = {"speaker": str(speaker)}
    return out


def _duration(audio: str | None) -> float | None:
    if not audio:
        return None
    try:
        import soundfile

        return round(soundfile.info(audio).duration, 3)
    except Exception:  # an unreadable file: the table shows no duration
        return None


def _audio_src(audio: str | None, report_dir: Path, embed: bool) -> str | None:
    """The player's source: the file relative to the report, or the file itself (base64)."""
    if not audio or not Path(audio).is_file():
        return None
    if embed:
        kind = mimetypes.guess_type(audio)[0] or "audio/wav"
        data = base64.b64encode(Path(audio).read_bytes()).decode("ascii")
        return f"data:{kind};base64,{data}"
    rel = os.path.relpath(Path(audio).resolve(), report_dir.resolve())
    return "/".join(rel.split(os.sep))
