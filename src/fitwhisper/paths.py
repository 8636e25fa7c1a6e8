"""Output paths checked before the work (a folder that is a file, or cannot be written, is
named at once rather than after hours of training or transcription), and storage failures
during the work (a full disk) told as such. Whether an output may be written at all (never
onto an input, --force only over what fitwhisper made) is `fitwhisper.output_guard`'s."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

from fitwhisper.errors import StorageError

# Storage the user has to fix (full, or not theirs to write), not a bug of ours.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_FORBIDDEN = {errno.EROFS, errno.EACCES, errno.EPERM}
# Writers that wrap the OS error in their own exception: safetensors ("... (os error 28)"),
# torch.save's zip writer (its position check fails after a short write).
_WRAPPED_FULL = re.compile(
    r"os error (28|27|122)\b|No space left|File too large|Disk quota exceeded"
)
_TORCH_SHORT_WRITE = "unexpected pos"


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


def require_folder(path: str | Path, what: str) -> None:
    """Raise a ConfigError unless `path` can be a writable folder (see `folder_problem`)."""
    from fitwhisper.errors import ConfigError

    if (why := folder_problem(path, what)) is not None:
        raise ConfigError(why, hint=f"choose a {what} folder you can write")


def file_problem(path: str | Path, what: str) -> str | None:
    """Why a file cannot be written at `path` (its folder must exist), or None."""
    path = Path(path).expanduser()
    if path.is_dir():
        return f"{what} {path} is a folder, not a file"
    if path.parent.exists() and not path.parent.is_dir():
        return f"{what} {path}: {path.parent} is not a folder"
    if not path.parent.is_dir():
        return f"{what} {path}: {path.parent} does not exist, so nothing could be written"
    return folder_problem(path.parent, what)


def as_storage_error(e: BaseException, path: str | Path | None = None) -> StorageError | None:
    """A StorageError for a failed write the user can fix (full disk, no permission, a
    read-only file system), whatever library raised it; None for anything else.

    Args:
        path: what was being written, when the error itself does not say.
    """
    if isinstance(e, StorageError):
        return e
    named = e.filename if isinstance(e, OSError) and e.filename else path
    where = f" {named}" if named else ""
    full = (isinstance(e, OSError) and e.errno in _FULL) or (
        not isinstance(e, OSError)
        and (_WRAPPED_FULL.search(str(e)) or _TORCH_SHORT_WRITE in str(e))
    )
    if full:
        why = e.strerror if isinstance(e, OSError) else str(e).splitlines()[0]
        return StorageError(
            f"could not write{where}: {why} (is the disk full?)",
            hint="free disk space or choose a folder on another disk (a run's checkpoints are "
            "its largest files: --save_total_limit keeps fewer); a training run stopped this "
            "way continues with --resume from its last whole checkpoint",
        )
    if isinstance(e, OSError) and e.errno in _FORBIDDEN:
        return StorageError(
            f"no access to{where}: {e.strerror}",
            hint="check that path's permissions (or a read-only disk), or choose a folder you "
            "can write",
        )
    return None
