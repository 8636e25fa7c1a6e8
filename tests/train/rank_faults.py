"""Run the fitwhisper command line with a fault on one process of a multi-process run.

    torchrun --nproc_per_node 2 rank_faults.py FAULT RANK STEP fitwhisper-arguments...

From its STEP-th training forward pass on (counted from 1), the process with rank RANK
does FAULT: `oom` raises torch.OutOfMemoryError in the forward pass for any batch larger
than one clip, as a GPU that is a little too small would; `oom_backward` raises it in the
backward pass of such a batch, once the decoder's gradients are made and DDP has marked
them ready (with gradient checkpointing's recomputation, OOMs land there); `kill` SIGKILLs
the process (a machine that dies), whatever its batch; `nangrad` makes every gradient of
the pass NaN while its loss stays finite. The other ranks run normally.
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

    class _OomInBackward(torch.autograd.Function):
        """Identity forward; its backward raises, as the allocator would there."""

        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            raise torch.OutOfMemoryError("injected: CUDA out of memory (rank_faults.py, backward)")

    def fail_backward(module, args, output):
        # The encoder's output: backward reaches it after every decoder gradient is made.
        output.last_hidden_state = _OomInBackward.apply(output.last_hidden_state)
        return output

    def forward(self, *args, **kwargs):
        nonlocal calls
        if self.training:
            calls += 1
            if calls >= step:
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                features = kwargs.get("input_features")
                if features is not None and features.shape[0] > 1:
                    if fault == "oom":
                        msg = "injected: CUDA out of memory (rank_faults.py)"
                        raise torch.OutOfMemoryError(msg)
                    if fault == "oom_backward":
                        hook = self.model.encoder.register_forward_hook(fail_backward)
                        try:
                            return real(self, *args, **kwargs)
                        finally:
                            hook.remove()
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
