"""Output paths checked before the work: a folder that is a file, or cannot be written, is
named at once rather than after hours of training or transcription."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def folder_problem(path: str | Path, what: str) -> str | None:
    """Why `path` cannot become a writable folder (created if missing), or None.

    Writes nothing: the nearest existing ancestor is probed with a temporary file that is
    removed at once (permissions alone mislead for root, ACLs and read-only disks).
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        return f"{what} {path} is a file, not a folder"
    parent = path
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        return f"{what} {path} cannot be made: {parent} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fitwhisper-probe-")
    except OSError as e:
        return f"{what} {path} cannot be written: {parent}: {e.strerror}"
    os.close(fd)
    os.unlink(probe)
    return None


def file_problem(path: str | Path, what: str) -> str | None:
    """Why a file cannot be written at `path` (its folder must exist), or None."""
    path = Path(path).expanduser()
    if path.is_dir():
        return f"{what} {path} is a folder, not a file"
    if not path.parent.is_dir():
        return f"{what} {path}: the folder {path.parent} does not exist"
    return folder_problem(path.parent, what)
