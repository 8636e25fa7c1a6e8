"""What `--packed_window_share` costs in encoder frames as the data set grows.

    PYTHONPATH=src .venv/bin/python bench/window_frames_by_size.py [--sizes 80 400 2000 10000]

No training: the real AISHELL S0150 sentences of ../shared/data (their durations and
transcripts, drawn with replacement up to each size) are batched as a run would batch them
(`fitwhisper.data.frame_share`: the pipeline's own window packing and transformers'
`LengthGroupedSampler`; a batch holding a window runs at 30 s, and `--full_window_share`
of the others), and the encoder frames fed are counted: each batch's items times its
window, as a share of the standard recipe's (every clip padded to 30 s), averaged over
epochs, for mixed input without windows and with them. Frames are what trimming saves, not
a timing: the decoder and the optimizer cost the same in both.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
AISHELL = REPO.parent / "shared" / "data" / "aishell-s0150"


def _sentences() -> tuple[list[str], list[float]]:
    import soundfile as sf

    rows = [json.loads(x) for x in (AISHELL / "manifest.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["kind"] == "sentence"]
    return [r["text"] for r in rows], [sf.info(str(AISHELL / r["audio"])).duration for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[48, 80, 160, 400, 2000, 10000])
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--full_window_share", type=float, default=0.05)
    ap.add_argument("--packed_window_share", type=float, default=0.03)
    ap.add_argument("--epochs", type=int, default=10)
    a = ap.parse_args()
    from fitwhisper.data.frame_share import frame_share
    from fitwhisper.data.packing import pack_windows
    from fitwhisper.models.resolve import as_resolved, load_processor

    tokenizer = load_processor(as_resolved("offline/base")).tokenizer
    texts, durations = _sentences()
    tokens = [len(tokenizer(t, add_special_tokens=False).input_ids) for t in texts]
    print(f"AISHELL S0150 sentences ({len(texts)}, mean {np.mean(durations):.1f} s) drawn with "
          f"replacement to each size; {a.full_window_share:.0%} of batches at 30 s; "
          f"--packed_window_share {a.packed_window_share}; {a.epochs} epochs\n")  # fmt: skip
    print(
        "| clips | batch | windows of several clips (clips in them) | encoder frames: "
        "single clips | with windows | with / without |"
    )
    print("|---|---|---|---|---|---|")
    for n in a.sizes:
        pick = np.random.default_rng(0).choice(len(texts), n, replace=True)
        durs, toks = [durations[i] for i in pick], [tokens[i] for i in pick]
        rows = [type("R", (), {"language": None})() for _ in range(n)]
        several = [w for w in pack_windows(rows, durs, toks, several_share=a.packed_window_share)
                   if len(w.rows) > 1]  # fmt: skip
        for batch in a.batch:
            alone = frame_share(durs, toks, batch, a.full_window_share, epochs=a.epochs)
            mixed = frame_share(durs, toks, batch, a.full_window_share, a.packed_window_share,
                                epochs=a.epochs)  # fmt: skip
            print(f"| {n} | {batch} | {len(several)} ({sum(len(w.rows) for w in several)}) "
                  f"| {alone:.1%} | {mixed:.1%} | {mixed / alone:.2f}x |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
