"""Run the fitwhisper command line with a fault on one process of a multi-process run.

    torchrun --nproc_per_node 2 rank_faults.py oom|kill|nangrad RANK STEP fitwhisper-arguments...

From its STEP-th training forward pass on (counted from 1), the process with rank RANK
either raises torch.OutOfMemoryError for any batch larger than one clip (`oom`: as a GPU
that is a little too small would), SIGKILLs itself (`kill`: a machine that dies), or
makes every gradient of the pass NaN while its loss stays finite (`nangrad`).
The other ranks run normally.
"""

from __future__ import annotations

import os
import signal
import sys


def _install(fault: str, rank: int, step: int) -> None:
    import torch
    from transformers import WhisperForConditionalGeneration

    if int(os.environ.get("RANK", "0")) != rank:
        return
    real = WhisperForConditionalGeneration.forward
    calls = 0

    def forward(self, *args, **kwargs):
        nonlocal calls
        if self.training:
            calls += 1
            if calls >= step:
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                features = kwargs.get("input_features")
                if fault == "oom" and features is not None and features.shape[0] > 1:
                    raise torch.OutOfMemoryError("injected: CUDA out of memory (rank_faults.py)")
        out = real(self, *args, **kwargs)
        if fault == "nangrad" and self.training and calls >= step:
            out.loss.register_hook(lambda g: g * float("nan"))
        return out

    WhisperForConditionalGeneration.forward = forward


if __name__ == "__main__":
    fault, rank, step, *argv = sys.argv[1:]
    _install(fault, int(rank), int(step))
    from fitwhisper.cli import main

    sys.exit(main(argv))
