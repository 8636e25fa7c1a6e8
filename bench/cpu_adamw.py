"""AdamW's step on the CPU: torch's fused kernel (what `train` takes there for --optim
adamw_torch, train/run_plan.py) against the per-tensor loop torch uses on the CPU otherwise
(its foreach kernels are GPU-only), on the real parameters of Whisper models.

    PYTHONPATH=src python bench/cpu_adamw.py [--models offline/tiny.en,offline/base]
        [--steps 20]

Each model's parameters, with random gradients, stepped `steps` times by each
implementation from the same start; the median seconds a step, their ratio, and the largest
difference between the two sets of weights afterwards (the same update, computed in another
order of float operations). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time


def _step_times(params, grads, steps: int, **kind) -> tuple[float, list]:
    import torch

    weights = [p.detach().clone().requires_grad_(True) for p in params]
    for w, g in zip(weights, grads, strict=True):
        w.grad = g
    opt = torch.optim.AdamW(weights, lr=1e-4, weight_decay=0.01, **kind)
    opt.step()  # warm: states allocated
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times), weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="offline/tiny.en,offline/base")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    import torch
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.models.resolve import resolve_model

    print(
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, {args.steps} steps after one warm-up\n"
    )
    print("| model | parameters | per-tensor (s/step) | fused (s/step) | ratio | max weight diff |")
    print("|---|---|---|---|---|---|")
    for spec in args.models.split(","):
        model = WhisperForConditionalGeneration.from_pretrained(resolve_model(spec).path_or_id)
        params = [p for p in model.parameters() if p.requires_grad]
        gen = torch.Generator().manual_seed(0)
        grads = [torch.randn(p.shape, generator=gen) * 1e-3 for p in params]
        loop, a = _step_times(params, grads, args.steps, foreach=False, fused=False)
        fused, b = _step_times(params, grads, args.steps, fused=True)
        diff = max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))
        n = sum(p.numel() for p in params) / 1e6
        ratio = loop / fused
        print(f"| {spec} | {n:.1f}M | {loop:.4f} | {fused:.4f} | {ratio:.1f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
