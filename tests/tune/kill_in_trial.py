"""`fitwhisper tune ...` that SIGKILLs itself right after trial N saves its checkpoint at
step S: a tune killed mid-trial, with that trial's checkpoint complete on disk.

    python kill_in_trial.py N S tune --output_dir ... (the tune's arguments)
"""

from __future__ import annotations

import os
import signal
import sys

from fitwhisper.cli import main
from fitwhisper.tune import trials

TRIAL, STEP = int(sys.argv[1]), int(sys.argv[2])


def on_save(self, args, state, control, **kwargs):
    if self.trial.number == TRIAL and state.global_step == STEP:
        os.kill(os.getpid(), signal.SIGKILL)


trials.PruningReporter.on_save = on_save
sys.exit(main(sys.argv[3:]))
