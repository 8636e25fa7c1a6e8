"""A model fine-tuned on packed windows still writes timestamps on
audio longer than 30 s (`fitwhisper transcribe --engine transformers`: transformers'
long-form `generate` with timestamps).

    PYTHONPATH=src python bench/packed_timestamps.py RUN/final EVAL.jsonl [--seconds 45]

Joins held-out clips of the manifest (1 s of silence between) until the audio passes
`--seconds`, and prints each generated segment with its times, next to where each clip
really starts.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("manifest")
    ap.add_argument("--seconds", type=float, default=45.0)
    a = ap.parse_args(argv)
    import soundfile

    from fitwhisper.cli import main
    from fitwhisper.data.audio import load_audio

    torch.set_num_threads(2)
    rows = [json.loads(x) for x in Path(a.manifest).read_text().splitlines() if x]
    pieces, starts, at = [], [], 0
    for r in rows:
        clip = load_audio(Path(r["audio"]))
        starts.append((at / 16_000, r["text"]))
        pieces += [clip, np.zeros(16_000, dtype=np.float32)]
        at += len(clip) + 16_000
        if at / 16_000 > a.seconds:
            break
    audio = np.concatenate(pieces)
    with tempfile.TemporaryDirectory() as tmp:
        wav, out = Path(tmp) / "long.wav", Path(tmp) / "long.json"
        soundfile.write(str(wav), audio, 16_000)
        argv = ["transcribe", str(wav), "--model", a.model, "--engine", "transformers",
                "--output_format", "json", "--output_file", str(out), "-q"]  # fmt: skip
        if main(argv) != 0:
            return 1
        segments = json.loads(out.read_text())["segments"]
    print(f"audio: {len(audio) / 16_000:.1f} s, {len(starts)} clips")
    print("clips start at: " + ", ".join(f"{s:.2f}" for s, _ in starts))
    for seg in segments:
        print(f"[{seg['start']:6.2f} -> {seg['end']:6.2f}] {seg['text'].strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
