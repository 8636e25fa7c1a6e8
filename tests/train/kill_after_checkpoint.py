"""Run the fitwhisper command line and SIGKILL the process the moment checkpoint-N becomes
complete (its marker renamed into place): a crash right after a checkpoint, at the same step
on every machine, however busy.

    python kill_after_checkpoint.py N fitwhisper-arguments...
"""

from __future__ import annotations

import os
import signal
import sys

from fitwhisper.train.checkpoints import MARKER


def _install(step: int) -> None:
    real = os.replace
    whole = os.path.join(f"checkpoint-{step}", MARKER)

    def replace(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if os.fsdecode(dst).endswith(whole):
            os.kill(os.getpid(), signal.SIGKILL)

    os.replace = replace


if __name__ == "__main__":
    _install(int(sys.argv[1]))
    from fitwhisper.cli import main

    sys.exit(main(sys.argv[2:]))
