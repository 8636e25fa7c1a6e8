"""The acceptance test's small English run, with any training options, and its long file.

    PYTHONPATH=src:. python bench/small_run_long_form.py WORK [--seed N] [-- TRAIN OPTIONS]

Trains `offline/tiny.en` as tests/test_default_training_windows.py does (48 digit strings
of the shared FSDD recordings, 24 steps of 8 items at 5e-5, bf16 autocast), plus the
options after `--`, then prints the held-out WER at 30 s and on the short window and
`bench/long_form_check.py`'s verdict on the 76 s file of the 16 held-out strings (pauses,
8 s of silence, 8 s of noise). About 45 s a run on 2 cores. Used to compare single clips
alone (`--packed_window_share 0`), `--packed_window_share 0.03` (the default since
2026-11-27) and `--encoder_input full` over seeds (bench/RESULTS-train-speed.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("work", help="A folder for the data and the run.")
    ap.add_argument("--seed", type=int, default=0)
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    extra = argv[cut + 1 :]
    sys.path.insert(0, str(REPO))
    from tests.digit_strings import make_digit_strings
    from tests.test_default_training_windows import _held_out, _long_file, _train

    work = Path(a.work)
    data = make_digit_strings(REPO.parent / "shared" / "data" / "fsdd-train", work / "digits",
                              n_train=48, n_eval=16)  # fmt: skip
    t0 = time.perf_counter()
    model = _train(data, work / "run", *extra, "--seed", str(a.seed))
    train_s = time.perf_counter() - t0
    at_30, _ = _held_out(model, data, "full", work / "ev-full")
    short, _ = _held_out(model, data, "short", work / "ev-short")
    long = _long_file(model, data)
    print(f"options {extra or '(defaults)'}, seed {a.seed}: trained in {train_s:.0f} s; "
          f"held-out WER {100 * at_30:.1f}% at 30 s, {100 * short:.1f}% on the short window; "
          f"long file WER {100 * long['error']:.1f}%, {long['segments']} segments, "
          f"clips lost {long['clips_lost']}, text in silence/noise {long['in_quiet']}, "
          f"repeats {long['repeats']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
