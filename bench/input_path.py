"""The training input path alone, in clips per second: real clips decoded, augmented,
turned into log-mel features and labels and batched as `train`'s default batches them
(trimmed to each batch's longest clip), by data-loader workers, with and without
augmentation, the log-mel made in the loader (`--log_mel cpu`) or by the trainer for the
whole batch (`--log_mel device`, here run on this CPU in the main process).

    PYTHONPATH=src python bench/input_path.py [--clips 96] [--workers 0 1 2] [--batch 8]

Real Mandarin sentences (../shared/data/aishell-s0150, mean 5.2 s) with offline/base's
processor. Each row is the best of `--passes` passes over the clips, workers started as
the trainer starts them (once per epoch), after one untimed warm-up pass of the row's own
setup. The last column divides by what the defaults' training step consumes for
offline/base on this CPU (`--step_clips_per_s`, from bench/RESULTS-train-speed.md), the
issue's target being 4x.
Prints a Markdown table; bench/RESULTS-input-path.md holds one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# offline/base's default step (--encoder_input mixed, batch 8, fp32, 2 threads):
# bench/RESULTS-train-speed.md, Mandarin, 2.33 clips/s.
BASE_STEP_CLIPS_PER_S = 2.33


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=96)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--step_clips_per_s", type=float, default=BASE_STEP_CLIPS_PER_S)
    parser.add_argument("--passes", type=int, default=2, help="timed passes; the best counts")
    args = parser.parse_args()

    import torch

    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.models.resolve import load_processor

    manifest = SHARED / "aishell-s0150" / "manifest.jsonl"
    kinds = [json.loads(line)["kind"] for line in manifest.read_text().splitlines()]
    rows = load_manifest(manifest).rows
    rows = [r for r, kind in zip(rows, kinds, strict=True) if kind == "sentence"][: args.clips]
    processor = load_processor("offline/base")
    load_before = os.getloadavg()
    lines = [
        "| workers | augmentation | log-mel | clips/s | audio s/s | x base step |",
        "|---|---|---|---|---|---|",
    ]
    seconds = sum(_duration(r) for r in rows)
    for augment in ("none", "medium"):
        for log_mel in ("cpu", "device"):
            for workers in args.workers:
                rate = _clips_per_second(
                    rows, processor, augment, log_mel, workers, args.batch, args.passes
                )
                lines.append(
                    f"| {workers} | {augment} | {log_mel} | {rate:.1f} | "
                    f"{rate * seconds / len(rows):.0f} | {rate / args.step_clips_per_s:.1f} |"
                )
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads in the main process, 1 per worker); "
        f"{len(rows)} AISHELL S0150 sentences, {seconds / len(rows):.1f} s mean, batch "
        f"{args.batch}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} "
        "after.\n"
    )
    print("\n".join(lines))
    print(
        f"\nx base step: clips/s over {args.step_clips_per_s} clips/s, what offline/base's "
        "default training step takes on this CPU (bench/RESULTS-train-speed.md)."
    )


def _duration(row) -> float:
    import soundfile

    return soundfile.info(str(row.audio)).duration


def _clips_per_second(rows, processor, augment, log_mel_on, workers, batch, passes) -> float:
    """The best of `passes` timed passes over `rows` after one untimed, as training draws
    them (the best: other work on a shared machine only ever slows a pass down)."""
    from torch.utils.data import DataLoader

    from fitwhisper.data.augment import PRESETS, Augmenter
    from fitwhisper.data.batching import TrimmedCollator, WithDurations
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.data.log_mel import log_mel

    augmenter = Augmenter(PRESETS[augment], seed=0) if augment != "none" else None
    ds = SpeechDataset(rows, processor, language="zh", augment=augmenter, log_mel=log_mel_on)
    items = WithDurations(ds, [_duration(r) for r in rows])
    start_id = processor.tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    loader = DataLoader(
        items,
        batch_size=batch,
        num_workers=workers,
        collate_fn=TrimmedCollator(WhisperCollator(processor, start_id)),
        prefetch_factor=2 if workers else None,
    )
    fe = processor.feature_extractor
    times = []
    for _ in range(1 + passes):  # a warm-up pass, then the timed ones
        start = time.perf_counter()
        for b in loader:
            if "input_audio" in b:  # the trainer's side of --log_mel device
                log_mel(b["input_audio"], fe, b["mel_masks"])
        times.append(time.perf_counter() - start)
    return len(rows) / min(times[1:])


if __name__ == "__main__":
    main()
