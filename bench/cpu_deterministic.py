"""A training step on the CPU with torch's deterministic kernels (what `train` runs there,
train/run_plan.py) against torch's defaults, and whether each repeats bit for bit.

    PYTHONPATH=src python bench/cpu_deterministic.py [--models offline/tiny.en] [--pairs 6]

One model, one fixed batch (8 clips of 30 s, 40 label tokens), forward, backward and the
fused AdamW step `train` takes on the CPU; the two settings alternate step by step in one
process (so load on the machine falls on both alike), `pairs` steps each after one warm-up.
Prints the median seconds a step and their ratio, then how many different gradients of the
decoder's position embedding each setting gives over 50 repeats of one backward (the
gradient that made two runs of one command differ). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import statistics
import time


def _step_times(model, pairs: int) -> dict[bool, float]:
    import torch

    from fitwhisper.train.run import deterministic_kernels

    gen = torch.Generator().manual_seed(0)
    features = torch.randn(8, model.config.num_mel_bins, 3000, generator=gen)
    labels = torch.randint(0, model.config.vocab_size - 1, (8, 40), generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=True)
    model.train()
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(2 * (pairs + 1)):
        on = bool(i % 2)
        with deterministic_kernels(on):
            start = time.perf_counter()
            model(input_features=features, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad()
            if i >= 2:  # the first pair warms up
                times[on].append(time.perf_counter() - start)
    return {on: statistics.median(t) for on, t in times.items()}


def _distinct_gradients(model, repeats: int = 50) -> dict[bool, int]:
    import torch

    from fitwhisper.train.run import deterministic_kernels

    table = model.model.decoder.embed_positions
    positions = torch.arange(40).expand(8, 40)
    upstream = torch.randn(8, 40, table.weight.shape[1], generator=torch.Generator().manual_seed(1))
    seen: dict[bool, set[str]] = {False: set(), True: set()}
    for on in (False, True):
        with deterministic_kernels(on):
            for _ in range(repeats):
                table.weight.grad = None
                table(positions[:, :1], position_ids=positions).backward(upstream)
                seen[on].add(hashlib.sha256(table.weight.grad.numpy().tobytes()).hexdigest())
    table.weight.grad = None
    return {on: len(s) for on, s in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="offline/tiny.en")
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()

    import torch
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.models.resolve import resolve_model

    print(
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, {args.pairs} steps of each after one warm-up pair\n"
    )
    print(
        "| model | default (s/step) | deterministic (s/step) | ratio | position gradients "
        "in 50 repeats: default / deterministic |"
    )
    print("|---|---|---|---|---|")
    for spec in args.models.split(","):
        model = WhisperForConditionalGeneration.from_pretrained(resolve_model(spec).path_or_id)
        t = _step_times(model, args.pairs)
        n = _distinct_gradients(model)
        print(
            f"| {spec} | {t[False]:.2f} | {t[True]:.2f} | {t[True] / t[False]:.2f}x | "
            f"{n[False]} / {n[True]} |"
        )


if __name__ == "__main__":
    main()
