"""The one rule every command that writes goes through: may this output be written?

    from fitwhisper.output_guard import Output, check_outputs
    check_outputs([Output("OUT", a.out, replace=a.force)], {"MODEL": a.model})

A command calls `check_outputs` once, with every path it will write and every path it
reads, before it loads a model or decodes audio; it raises one ConfigError listing every
problem. The rule:

1. No output is, holds or lies inside an input. Paths are compared by what they are on
   disk (device and inode, after links, `..` and `~`), so a symlink, a hard link to an input
   file or another spelling on a case-insensitive file system is the input too. A folder
   that only receives files among the user's own (`transcribe --output_dir`) may hold
   inputs; each file written into it is checked as a file.
2. An output can be written: a folder is not a file, a file's folder exists, both writable.
3. A folder is replaced (`--force`, `--overwrite_output_dir`) only when fitwhisper made it:
   it holds `MARKER`, which every command writes into the folders it makes (`mark`), or,
   for folders written before the marker existed, the record of the command that made it
   (`older_record`: a run's fitwhisper.yaml with the versions it ran with, an export's
   fitwhisper_export.json naming its source, a study's study.db beside its trials). A
   folder merged or imported by an older version holds none of these: it is refused once,
   with the hint to move it away.
   `replace_folder` is the only place that removes an output folder, and checks again.

`tests/cli/test_output_guard.py` takes the commands from the parser and fails for any
command with an output option (a field whose `path` is `new_file` or `new_folder`) that
does not pass it here.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fitwhisper.errors import ConfigError

MARKER = "fitwhisper_output.json"  # {"command": ..., "version": ...}: fitwhisper made this

Named = Mapping[str, str | Path | None] | Iterable[tuple[str, str | Path | None]]
Kind = Literal["new_folder", "folder", "files_into", "file"]


@dataclass(frozen=True)
class Output:
    """One path a command writes.

    Attributes:
        name: how the user gave it (`OUT`, `--output_dir`), for the messages.
        path: the path; None or "" when the user gave none (skipped).
        kind: `new_folder` a folder written whole, which must be new or empty unless
            replaced (export, merge); `folder` a folder the command keeps writing into
            (a run, an evaluation, a study); `files_into` a folder that receives files among
            the user's (transcripts); `file` one file.
        replace: the user asked to replace what is there (`replace_flag`).
        replace_flag: the option that asks it, for the messages.
        suffixes: for a file, the suffixes an existing file may have to be replaced (a page
            is rewritten freely; any other file is not ours to replace); empty: any.
        in_checked_folder: a file inside an output folder checked on its own (a transcript
            in --output_dir, which is made later): only rule 1 applies to it.
    """

    name: str
    path: str | Path | None
    kind: Kind = "folder"
    replace: bool = False
    replace_flag: str = "--force"
    suffixes: tuple[str, ...] = ()
    in_checked_folder: bool = False


def check_outputs(outputs: Iterable[Output], inputs: Named) -> None:
    """Raise one ConfigError naming every output that may not be written (the rule in the
    module docstring); write nothing."""
    found = output_problems(outputs, inputs)
    if found:
        raise ConfigError(
            "; ".join(found) + ("" if len(found) == 1 else f" ({len(found)} problems)"),
            hint=_hint(found),
        )


def output_problems(outputs: Iterable[Output], inputs: Named) -> list[str]:
    """One sentence per output that may not be written (for callers that report them with
    other problems, as train's validation does)."""
    ids = _Identities()
    at: dict[tuple[int, int], tuple[str, str | Path]] = {}  # each input on disk
    under: dict[tuple[int, int], tuple[str, str | Path]] = {}  # each folder holding one
    for name, inp in _pairs(inputs):
        if not inp or (key := ids.of(Path(inp).expanduser())) is None:
            continue  # not on disk (a Hub id, an offline name): nothing to harm
        at.setdefault(key, (name, inp))
        for parent in ids.resolved(Path(inp).expanduser()).parents:
            if (pkey := ids.of(parent)) is not None:
                under.setdefault(pkey, (name, inp))
    found = []
    for out in outputs:
        if not out.path or not str(out.path).strip():
            continue
        why = _overlap(out, at, under, ids)
        if not out.in_checked_folder:
            why = why or _usable(out) or _existing(out)
        if why:
            found.append(why)
    return found


def made_by(folder: str | Path) -> str | None:
    """The command that made `folder`, from its MARKER or an older record; None for a
    folder fitwhisper did not make (or an empty one)."""
    folder = Path(folder)
    try:
        return json.loads((folder / MARKER).read_text(encoding="utf-8"))["command"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return older_record(folder) or ("export" if _older_export_of_formats(folder) else None)


def older_record(folder: Path) -> str | None:
    """The command whose record, written before MARKER existed, `folder` holds; each record
    is checked for what only fitwhisper writes in it (a user's own `fitwhisper.yaml` of
    options is not a run)."""
    try:
        export = json.loads((folder / "fitwhisper_export.json").read_text(encoding="utf-8"))
        if isinstance(export, dict) and "source" in export:
            return "export"
    except (OSError, ValueError):
        pass
    try:
        import yaml

        run = yaml.safe_load((folder / "fitwhisper.yaml").read_text(encoding="utf-8"))
        if isinstance(run, dict) and "fitwhisper" in (run.get("versions") or {}):
            return "train"
    except (OSError, ValueError, yaml.YAMLError):
        pass
    if (folder / "study.db").is_file() and (
        (folder / "trials").is_dir() or (folder / "trials.md").is_file()
    ):
        return "tune"
    return None


def _older_export_of_formats(folder: Path) -> bool:
    """An export of several formats written before MARKER: each subfolder one format's
    export (with its record), beside them only the model card and the re-scoring report."""
    try:
        entries = list(folder.iterdir())
    except OSError:
        return False
    formats = [e for e in entries if e.is_dir()]
    return bool(formats) and all(
        older_record(e) == "export" if e.is_dir() else e.name in ("README.md", "export_report.json")
        for e in entries
    )


def mark(folder: str | Path, command: str) -> None:
    """Record in `folder` that `command` made it, so a later --force may replace it."""
    import fitwhisper

    record = {"command": command, "version": fitwhisper.__version__}
    Path(folder, MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")


def claim_folder(folder: str | Path, command: str, ignore: tuple[str, ...] = ()) -> bool:
    """Create output folder `folder` (and its parents) for `command`, marking it as
    fitwhisper's when it is new or empty (files named in `ignore` aside: the lock the
    command holds): never a folder that already holds someone's files (a later --force
    would then replace them). Returns whether it marked it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / MARKER).exists() or any(p.name not in ignore for p in folder.iterdir()):
        return False
    mark(folder, command)
    return True


def as_if_made_by_mkdir(folder: str | Path) -> None:
    """Give `folder` the permissions a plain mkdir would (the umask's): a temporary folder
    (`tempfile.mkdtemp`, readable by its owner only) renamed into place as an output must
    not stay private."""
    umask = os.umask(0)
    os.umask(umask)
    Path(folder).chmod(0o777 & ~umask)


def replace_folder(folder: str | Path, flag: str = "--force") -> None:
    """Remove output folder `folder` to write it afresh: only a folder fitwhisper made (or an
    empty one); ConfigError for any other, with nothing removed."""
    folder = Path(folder)
    if not folder.exists():
        return
    if any(folder.iterdir()) and made_by(folder) is None:
        raise ConfigError(
            _not_ours("the output folder", folder, flag), hint=_hint(["did not write"])
        )
    shutil.rmtree(folder)


# --- the parts of the rule --------------------------------------------------------------------


def _overlap(out: Output, at, under, ids: _Identities) -> str | None:
    o = Path(out.path).expanduser()
    found = None
    if (key := ids.of(o)) is not None:
        if key in at:
            found = (at[key], "is")
        elif key in under and out.kind not in ("files_into", "file"):
            found = (under[key], "holds")
    if found is None:
        for parent in ids.resolved(o).parents:
            if (pkey := ids.of(parent)) in at:
                found = (at[pkey], "lies inside")
                break
    if found is None:
        return None
    (in_name, inp), how = found
    return (
        f"{out.name} {out.path} {how} the input {in_name} {inp}: writing it could overwrite "
        "or delete what you gave, so nothing was done"
    )


def _usable(out: Output) -> str | None:
    if out.kind == "file":
        return file_problem(out.path, out.name)
    return folder_problem(out.path, out.name)


def _existing(out: Output) -> str | None:
    p = Path(out.path).expanduser()
    if out.kind == "file":
        if out.suffixes and p.is_file() and p.suffix.lower() not in out.suffixes:
            return (
                f"{out.name} {out.path} exists and is not a {'/'.join(out.suffixes)} file this "
                "command writes; it would be replaced"
            )
        return None
    if out.kind == "files_into" or not p.is_dir() or not any(p.iterdir()):
        return None
    if out.replace:
        return None if made_by(p) else _not_ours(out.name, p, out.replace_flag)
    if out.kind == "new_folder":
        return (
            f"{out.name} {out.path} exists and is not empty; pass {out.replace_flag} to replace it"
        )
    return None


def _not_ours(name: str, folder: Path, flag: str) -> str:
    return (
        f"{name} {folder} holds files that fitwhisper did not write (no {MARKER} in it): "
        f"{flag} replaces only a folder fitwhisper made, never one it did not make"
    )


def _hint(found: list[str]) -> str:
    if all("did not write" in f for f in found):
        return "choose another output folder, or move that folder away yourself"
    if all("exists and is not empty" in f for f in found):
        return "choose another output folder, or pass --force to replace it"
    return "choose an output path outside every input, in a folder you can write"


class _Identities:
    """(device, inode) of paths, cached: the same parents are asked for every transcript."""

    def __init__(self) -> None:
        self._ids: dict[Path, tuple[int, int] | None] = {}
        self._resolved: dict[Path, Path] = {}

    def of(self, p: Path) -> tuple[int, int] | None:
        if p not in self._ids:
            try:
                # After links and `..` as the OS will meet them (a missing folder before `..`
                # included), then by what it is on disk.
                st = os.stat(os.path.realpath(p))
                self._ids[p] = (st.st_dev, st.st_ino)
            except (OSError, ValueError):
                self._ids[p] = None
        return self._ids[p]

    def resolved(self, p: Path) -> Path:
        """`p` after links and `..`; its parent resolved once for all its siblings."""
        if p.name in ("", ".", ".."):
            return p.resolve()
        parent = p.parent
        if parent not in self._resolved:
            self._resolved[parent] = parent.resolve()
        return self._resolved[parent] / p.name


def _pairs(named: Named) -> Iterable[tuple[str, str | Path | None]]:
    return named.items() if isinstance(named, Mapping) else named


# --- whether a path can be written at all -------------------------------------------------


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
