"""Storage failures during the work (a full disk, no permission, a read-only file system)
told as such, whatever library raised them. Whether an output may be written at all, checked
before the work, is `fitwhisper.output_guard`'s."""

from __future__ import annotations

import errno
import re
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
_FULL_HINT = (
    "free disk space or choose an output folder on another disk, then run the command again "
    "(what it was writing was not kept half-written)"
)
_TRAINING_FULL = (
    "free disk space or choose a folder on another disk (a run's checkpoints are its largest "
    "files: --save_total_limit keeps fewer); a training run stopped this way continues with "
    "--resume from its last whole checkpoint"
)


def as_storage_error(
    e: BaseException, path: str | Path | None = None, *, training: bool = False
) -> StorageError | None:
    """A StorageError for a failed write the user can fix (full disk, no permission, a
    read-only file system), whatever library raised it; None for anything else.

    Args:
        path: what was being written, when the error itself does not say.
        training: a training run was writing (its hint: fewer checkpoints, --resume);
            otherwise an export, a transcript or a page (nothing half-written is kept).
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
            hint=_TRAINING_FULL if training else _FULL_HINT,
        )
    if isinstance(e, OSError) and e.errno in _FORBIDDEN:
        return StorageError(
            f"no access to{where}: {e.strerror}",
            hint="check that path's permissions (or a read-only disk), or choose a folder you "
            "can write",
        )
    return None
