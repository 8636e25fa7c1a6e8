"""Run the fitwhisper command line under a launcher with accelerate's state as CUDA makes it.

    torchrun --nproc_per_node 2 cuda_like_state.py fitwhisper-arguments...

On GPUs every `PartialState` made under a launcher, also one made by evaluation arguments
on rank 0 alone, describes the whole process group (MULTI_GPU): a Trainer's `predict` made
there shards the clips and gathers from ranks that never join. On the CPU accelerate says
DistributedType.NO unless asked for the CPU, which hides that. Here any state made under the
launcher is multi-process (MULTI_CPU over gloo), as on GPUs. Rank 0 prints what evaluation
arguments made on it alone then see, so a test knows the patch took.
"""

from __future__ import annotations

import os
import sys
import tempfile


def _install() -> None:
    from accelerate.state import DistributedType, PartialState

    real = PartialState._prepare_backend

    def prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        if int(os.environ.get("LOCAL_RANK", -1)) != -1:
            return "gloo", DistributedType.MULTI_CPU
        return real(self, cpu, sagemaker_dp, backend)

    PartialState._prepare_backend = prepare_backend

    from fitwhisper.train import ranks

    real_start = ranks.start

    def start() -> None:
        real_start()
        if ranks.world_size() > 1 and ranks.is_main():
            from transformers import Seq2SeqTrainingArguments

            with tempfile.TemporaryDirectory() as tmp:
                args = Seq2SeqTrainingArguments(output_dir=tmp, report_to="none")
                print(f"evaluation arguments on rank 0 alone see {args.world_size} processes",
                      flush=True)  # fmt: skip

    ranks.start = start


if __name__ == "__main__":
    _install()
    from fitwhisper.cli import main

    sys.exit(main(sys.argv[1:]))
