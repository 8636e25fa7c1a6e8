"""`fitwhisper tune --folds ...` that SIGKILLs itself right after fold K of a trial saves a
checkpoint (after every callback's on_save, so the checkpoint is marked whole): a
cross-validated tune killed mid-trial, with earlier folds scored.

    python kill_in_fold.py K tune --output_dir ... (the tune's arguments)
"""

from __future__ import annotations

import os
import signal
import sys

from transformers.trainer_callback import CallbackHandler

from fitwhisper.cli import main

FOLD = f"fold-{sys.argv[1]}"
real_on_save = CallbackHandler.on_save


def saved_then_die(self, args, state, control):
    control = real_on_save(self, args, state, control)
    if os.path.basename(args.output_dir) == FOLD:
        os.kill(os.getpid(), signal.SIGKILL)
    return control


CallbackHandler.on_save = saved_then_die
sys.exit(main(sys.argv[2:]))
