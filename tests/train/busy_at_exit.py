"""Two processes joined as `fitwhisper train` joins them, ending while a gloo thread works.

    torchrun --nproc_per_node 2 busy_at_exit.py

Rank 1 leaves an all-reduce running (rank 0 joins it a second later), as the process group
a DistributedDataParallel model keeps alive can be at the end of a run, and both end the
way the command line ends a process (ranks.end_process).
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from fitwhisper.train import ranks

if __name__ == "__main__":
    ranks.start()
    work = dist.all_reduce(torch.ones(1_000_000), async_op=True)
    del work  # not waited for: the gloo thread finishes it while this process ends
    if ranks.is_main():
        time.sleep(1.0)
    sys.exit(ranks.end_process(0))
