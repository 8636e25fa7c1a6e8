"""Greedy against beam search through `fitwhisper transcribe` itself: the engine, window,
voice activity detection and int8 export it picks by default, on a manifest's clips.

    PYTHONPATH=src python bench/transcribe_beam.py --model RUN/final --manifest eval.jsonl \
        [--language en] [--beams 1,5] [--out table.md]

bench/quality.py's -beam5 rows score a model by `evaluate` (transformers, 30 s input);
this is the path a user's transcripts take. Each beam size transcribes every clip in one
`fitwhisper transcribe` call (wall time includes loading the model, the same for each);
the error is over all clips with the scorer `evaluate` would use for the language, and the
difference to the first beam size is paired by clip (fitwhisper.report.stats).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--manifest", required=True, help="JSONL rows with audio and text")
    ap.add_argument("--language", default=None)
    ap.add_argument("--beams", default="1,5", help="Beam sizes, the first the baseline.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--transcribe_args",
        default="",
        help="More `fitwhisper transcribe` options for every run, e.g. '--no_vad'.",
    )
    ap.add_argument("--out", default=None, help="Also write the markdown here.")
    a = ap.parse_args(argv)

    from fitwhisper.evaluate import make_scorer
    from fitwhisper.report.stats import paired_bootstrap
    from fitwhisper.scoring import utterance_errors

    rows = [json.loads(x) for x in Path(a.manifest).read_text().splitlines() if x.strip()]
    metric, norm = make_scorer(a.language)
    work = Path(tempfile.mkdtemp(prefix="fw-beam-"))
    listed = work / "audio.txt"
    listed.write_text("".join(r["audio"] + "\n" for r in rows))
    measured = []
    for beams in (int(b) for b in a.beams.split(",")):
        out = work / f"beam-{beams}"
        cmd = [sys.executable, "-m", "fitwhisper", "transcribe", "--model", a.model,
               "--beam_size", str(beams), "--threads", str(a.threads), "--audio_list",
               str(listed), "--output_dir", str(out), "--output_format", "json", "-q"]  # fmt: skip
        cmd += ["--language", a.language] if a.language else []
        cmd += shlex.split(a.transcribe_args)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        engine = next(x for x in done.stderr.splitlines() if x.startswith("engine "))
        errors = []
        for r in rows:
            text = json.loads((out / f"{Path(r['audio']).stem}.json").read_text())["text"]
            errors.append(utterance_errors(norm(r["text"]), norm(text), metric))
        measured.append((beams, seconds, errors, engine))

    units = [e.ref_units for e in measured[0][2]]
    base_errors = [e.substitutions + e.deletions + e.insertions for e in measured[0][2]]
    lines = [
        f"`python bench/transcribe_beam.py {' '.join(argv or sys.argv[1:])}`: {len(rows)} "
        f"clips, {measured[0][3]}",
        "",
        f"| decoding | {metric.upper()} % | vs beam {measured[0][0]}, points (95% CI) | wall s |",
        "|---|---|---|---|",
    ]
    for beams, seconds, errors, _ in measured:
        e = [x.substitutions + x.deletions + x.insertions for x in errors]
        rate = 100 * sum(e) / max(sum(units), 1)
        diff = ""
        if beams != measured[0][0]:
            d = paired_bootstrap(base_errors, e, units)
            diff = f"{100 * d['difference']:+.1f} ({100 * d['low']:+.1f} to {100 * d['high']:+.1f})"
        lines.append(f"| beam {beams} | {rate:.1f} | {diff} | {seconds:.0f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
