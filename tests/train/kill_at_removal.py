"""Run the fitwhisper command line and SIGKILL the process just before its N-th removal of a
file or folder inside a `checkpoint-*` folder: a kill at an exact moment of checkpoint
rotation, on the real file system.

    python kill_at_removal.py N fitwhisper-arguments...
"""

from __future__ import annotations

import os
import signal
import sys


def _full_path(path, dir_fd) -> str:
    # shutil.rmtree removes by name relative to an open folder (dir_fd); /proc names it.
    path = os.fsdecode(path)
    if dir_fd is None:
        return os.path.abspath(path)
    return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)


def _install(n: int) -> None:
    seen = 0

    def counting(real):
        def removal(path, *args, dir_fd=None, **kwargs):
            nonlocal seen
            if "/checkpoint-" in _full_path(path, dir_fd):
                seen += 1
                if seen == n:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(path, *args, dir_fd=dir_fd, **kwargs)

        return removal

    os.unlink = counting(os.unlink)
    os.remove = counting(os.remove)
    os.rmdir = counting(os.rmdir)


if __name__ == "__main__":
    _install(int(sys.argv[1]))
    from fitwhisper.cli import main

    sys.exit(main(sys.argv[2:]))
