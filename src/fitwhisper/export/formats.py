"""The export formats: what writes each one, the engine that runs it, and how it is loaded.

    fitwhisper export MODEL OUT --format ct2 ggml onnx openai

One format is written into OUT itself (as `export MODEL OUT` always did, for ct2); several
go to OUT/<format>/. The source is resolved and a LoRA adapter merged into its base once,
then every format's refusals that need no weights (`check_<format>`) are checked before
any is written, so a model one format cannot take is refused before minutes of writing the
others. Each format is written into a temporary sibling and renamed into place, so a failed
conversion leaves no half-written folder; the temporary folders a killed export left
(`.<dest>-<pid>-*`, the converter's `.export-<pid>-*`) are removed by the next export.
Every format carries the fine-tune's language and task (a Mandarin fine-tune stays Mandarin
in an engine given no language).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from fitwhisper.errors import ConfigError
from fitwhisper.models.ct2_export import EXPORT_INFO
from fitwhisper.output_guard import (
    Output,
    as_if_made_by_mkdir,
    check_outputs,
    mark,
    replace_folder,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Format:
    name: str
    engine: str  # the runtime that loads it, as its users know it
    loads_with: str  # one line a user copies
    module: str  # defines write_<name>
    runs_in: str  # defines transcribe_<name>
    needs: tuple[str, ...]  # modules that writing and running it import


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "ct2",
            "faster-whisper (CTranslate2)",
            "faster_whisper.WhisperModel('OUT')",
            "fitwhisper.export.ct2",
            "fitwhisper.export.ct2",
            ("ctranslate2", "faster_whisper"),
        ),
        Format(
            "ggml",
            "whisper.cpp (pywhispercpp)",
            "whisper-cli -m OUT/ggml-model.bin",
            "fitwhisper.export.ggml",
            "fitwhisper.export.ggml_run",
            ("pywhispercpp",),
        ),
        Format(
            "onnx",
            "onnxruntime",
            "onnxruntime.InferenceSession('OUT/encoder_model.onnx')",
            "fitwhisper.export.onnx_format",
            "fitwhisper.export.onnx_run",
            ("onnx", "onnxscript", "onnxruntime"),
        ),
        Format(
            "openai",
            "openai-whisper",
            "whisper.load_model('OUT/model.pt')",
            "fitwhisper.export.openai_format",
            "fitwhisper.export.openai_format",
            ("whisper",),
        ),
    )
}


@dataclass(frozen=True)
class Written:
    """One format written: where, from what, and its size."""

    format: str
    out: Path
    source: str
    size_mb: float


def checker(fmt: str):
    """`check_<fmt>(model_dir, **options)`: raises the ConfigError `write_<fmt>` would, but
    before anything is written."""
    return getattr(importlib.import_module(FORMATS[fmt].module), f"check_{fmt}")


def writer(fmt: str):
    return getattr(importlib.import_module(FORMATS[fmt].module), f"write_{fmt}")


def runner(fmt: str):
    """`transcribe_<fmt>(dest, audios, *, language, task, timestamps) -> [{"text",
    "language", "segments"}]`: the format run in its own engine."""
    return getattr(importlib.import_module(FORMATS[fmt].runs_in), f"transcribe_{fmt}")


def destinations(out: Path, formats: Sequence[str]) -> dict[str, Path]:
    """OUT for one format, OUT/<format>/ for several."""
    if len(formats) == 1:
        return {formats[0]: out}
    return {f: out / f for f in formats}


def export_outputs(out: str | Path, formats: Sequence[str], overwrite: bool) -> list[Output]:
    """What an export writes, for the output guard: OUT, written whole for one format; for
    several, OUT/<format>/ each written whole, in an OUT that may hold other things."""
    dests = destinations(Path(out), formats)
    if len(dests) == 1:
        return [Output("OUT", out, "new_folder", replace=overwrite)]
    folders = [Output(f"OUT/{f}", d, "new_folder", replace=overwrite) for f, d in dests.items()]
    return [Output("OUT", out, "folder"), *folders]


def check_formats(formats: Sequence[str]) -> list[str]:
    """The formats asked for, once each, in the order given; ConfigError for an unknown one."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ConfigError(
            f"unknown --format {', '.join(unknown)}", hint="use " + ", ".join(FORMATS)
        )
    formats = list(dict.fromkeys(formats)) or ["ct2"]
    missing = {f: m for f in formats for m in FORMATS[f].needs if find_spec(m) is None}
    if missing:
        listed = ", ".join(f"{f} needs {m}" for f, m in missing.items())
        extra = "ct2" if set(missing) == {"ct2"} else "export"
        raise ConfigError(
            f"--format: {listed}, which is not installed",
            hint=f"pip install 'fitwhisper[{extra}]' (each format is checked in its own engine)",
        )
    return formats


def export_formats(
    model_spec,
    out: str | Path,
    formats: Sequence[str] = ("ct2",),
    *,
    quantization: str = "int8",
    ggml_dtype: str = "f16",
    overwrite: bool = False,
) -> list[Written]:
    """Write `model_spec` in each of `formats` (see the module docstring for the layout).

    Raises:
        ConfigError: an unknown format, or an OUT that may not be written
            (`fitwhisper.output_guard`: not empty without `overwrite`, not made by
            fitwhisper, or an input).
        ModelLoadError / DivergenceError: the source cannot be loaded, or has non-finite
            weights (a diverged run is never exported).
    """
    from fitwhisper.export.ct2 import export_ct2
    from fitwhisper.models.resolve import as_resolved

    formats = check_formats(formats)
    out = Path(out)
    dests = destinations(out, formats)
    model = as_resolved(model_spec)
    # Before any conversion, not after it: OUT writable, never over the source, replaced
    # only when an earlier export made it.
    check_outputs(export_outputs(out, formats, overwrite), source_paths(model_spec, model))
    for dest in dests.values():
        replace_folder(dest)
    remove_stale_work(dests.values())
    # A run's model card sits beside its weights, or beside a LoRA adapter.
    card_from = Path(str(model.adapter or model.path_or_id))
    options = {"ct2": {"quantization": quantization}, "ggml": {"dtype": ggml_dtype}}
    written = []
    with merged_source(model) as source:
        # Every format that would refuse the model refuses it now, before any is written.
        for fmt in dests:
            checker(fmt)(Path(source.path_or_id), **options.get(fmt, {}))
        for fmt, dest in dests.items():
            if fmt == "ct2":
                r = export_ct2(source, dest, quantization=quantization, overwrite=True)
                _copy_card(card_from, dest)
                mark(dest, "export")
                written.append(Written("ct2", dest, model.spec, r.size_mb))
                continue
            kwargs = {"dtype": ggml_dtype} if fmt == "ggml" else {}
            with _aside(dest) as work:
                writer(fmt)(Path(source.path_or_id), work, **kwargs)
                _copy_card(card_from, work)
                # The record by which a later --force knows the folder as an export.
                record = {"format": fmt, "source": model.spec}
                (work / EXPORT_INFO).write_text(json.dumps(record, indent=2) + "\n")
            written.append(Written(fmt, dest, model.spec, _size_mb(dest)))
            mark(dest, "export")
    return written


@contextlib.contextmanager
def merged_source(model) -> Iterator:
    """The model as a plain transformers folder: a LoRA adapter merged into its base in a
    temporary folder (removed afterwards); checked for NaN/Inf weights."""
    from fitwhisper.models.ct2_export import refuse_nonfinite
    from fitwhisper.models.resolve import ResolvedModel, resolve_model

    if model.kind == "hub":  # a Hub id: from the Hub cache, as a folder
        from huggingface_hub import snapshot_download

        model = ResolvedModel(model.spec, "transformers_dir", Path(snapshot_download(model.spec)))
    if model.adapter is None:
        refuse_nonfinite(Path(model.path_or_id), model.spec)
        yield model
        return
    from fitwhisper.models.merge import merge_adapter

    with tempfile.TemporaryDirectory(prefix=".fitwhisper-merge-") as tmp:
        merged = merge_adapter(model, Path(tmp) / "merged").out
        refuse_nonfinite(Path(merged), model.spec)
        resolved = resolve_model(merged)
        yield ResolvedModel(model.spec, resolved.kind, resolved.path_or_id)


def remove_stale_work(dests) -> list[Path]:
    """Remove the temporary folders an export stopped part way (killed, power cut) left
    beside `dests`: `_aside`'s `.<dest>-<pid>-XXXXXXXX` and the CTranslate2 converter's
    `.export-<pid>-XXXXXXXX`, recognised by name, unless that process still runs (an export
    beside this one). Says in the log what it removed; returns those folders."""
    from fitwhisper.models.ct2_export import WORK_PREFIX

    removed = []
    for dest in {Path(d) for d in dests}:
        if not dest.parent.is_dir():
            continue
        names = "|".join(re.escape(p) for p in (f".{dest.name}-", WORK_PREFIX))
        pattern = re.compile(rf"(?:{names})(?:(\d+)-)?[a-z0-9_]{{8}}")
        for folder in dest.parent.iterdir():
            m = pattern.fullmatch(folder.name)
            if not m or not folder.is_dir() or folder in removed:
                continue
            if m.group(1) and _running(int(m.group(1))):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.warning(
            "removed %d temporary folder(s) an earlier export left when it was stopped part "
            "way: %s",
            len(removed),
            ", ".join(str(f) for f in sorted(removed)),
        )
    return removed


def transcribe_with(fmt: str, dest: Path, audios: list[np.ndarray], **kwargs) -> list[dict]:
    return runner(fmt)(Path(dest), audios, **kwargs)


# --- helpers ------------------------------------------------------------------------------


def source_paths(model_spec, model) -> dict[str, Path | str | None]:
    """The source's paths on disk as the user named them and as they resolved (a run folder
    names its final/; a LoRA adapter its base), for the rule that no output overlaps them."""
    return {
        "MODEL": str(getattr(model_spec, "spec", model_spec)),
        "MODEL (resolved)": model.path_or_id if model.kind != "hub" else None,
        "MODEL (adapter)": model.adapter,
    }


@contextlib.contextmanager
def _aside(dest: Path) -> Iterator[Path]:
    """A temporary sibling of `dest`, renamed to `dest` when the block succeeds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The pid in the name tells a later export whether this one still runs.
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}-{os.getpid()}-", dir=dest.parent))
    try:
        yield work
        as_if_made_by_mkdir(work)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(work, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process starts no export until the last one is done
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _copy_card(source: Path, dest: Path) -> None:
    """The source's model card and run record travel with every export."""
    for name in ("README.md", "fitwhisper.yaml"):
        if (source / name).is_file() and not (dest / name).exists():
            shutil.copyfile(source / name, dest / name)


def _size_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6
