"""One command per output folder: `train` and `evaluate` hold an exclusive lock on the
folder they write while they run.

A second command into the same folder is refused at once, naming the process that holds it
(two evaluations into one folder would each report the other's metrics.json).
The lock is the kernel's (POSIX `flock` on RUN/.fitwhisper.lock), so a run that crashes or
is killed releases it with its process: a stale lock file never blocks a later run.

`output_folder` also keeps user errors from leaving anything behind: the folders it created
are removed again if the run fails before it wrote anything but the lock.

`waiting_for(path)` is the other kind: a lock the next process waits for instead of being
refused (the offline model cache's conversion, a study's set-up).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fitwhisper.errors import ConfigError

LOCK_FILE = ".fitwhisper.lock"


@contextlib.contextmanager
def output_folder(
    out: Path, work: str = "training run", ignore: tuple[str, ...] = ()
) -> Iterator[Path]:
    """Create `out` if needed and hold its lock for the block; `work` names what writes it
    (a "training run", an "evaluation") in the refusal. Files named in `ignore` do not
    count as written (the output guard's marker): a folder made here that holds only them
    is removed on failure too.

    Raises:
        ConfigError: another process holds the folder.
    """
    created = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    # Under torchrun every process runs `train`; the main one holds the folder for them all.
    main_process = int(os.environ.get("RANK", "0")) == 0
    try:
        with _locked(out / LOCK_FILE, work) if main_process else contextlib.nullcontext():
            yield out
    except BaseException:
        for folder in created:
            with contextlib.suppress(OSError):
                if all(p.name in ignore for p in folder.iterdir()):
                    for name in ignore:
                        (folder / name).unlink(missing_ok=True)
            if not _empty(folder):
                break
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


@contextlib.contextmanager
def _locked(path: Path, work: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the folder is not guarded there
        yield
        return
    while True:
        f = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            f.close()
            raise ConfigError(
                f"{path.parent} is in use by another {work} ({holder}); two in one folder "
                "would overwrite each other's results",
                hint=f"wait for that {work.split()[-1]} to end (or stop it), or write into "
                "another --output_dir",
            ) from None
        # The previous holder may have removed the file between our open and our lock:
        # then we hold a lock on a name nobody sees; take the new file instead.
        if _same_file(f, path):
            break
        f.close()
    try:
        f.seek(0)
        f.truncate()
        f.write(json.dumps(_me()) + "\n")
        f.flush()
        yield
    finally:
        # Remove the name while still holding the lock, so nobody locks a file about to go.
        with contextlib.suppress(OSError):
            path.unlink()
        f.close()


@contextlib.contextmanager
def waiting_for(path: Path) -> Iterator[None]:
    """An exclusive lock between processes on `path`, waited for (POSIX flock; on Windows
    none: callers keep their files whole by other means, such as atomic renames)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _me() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv[:1] + sys.argv[1:4]),
    }


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError):
        return "a process that has not yet said which"


def _same_file(f, path: Path) -> bool:
    try:
        return os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
    except OSError:
        return False


def _empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except OSError:
        return False
