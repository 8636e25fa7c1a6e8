"""The run record: RUN/fitwhisper.yaml, what a run used, so it can be read, reused and
reproduced (`--config RUN/fitwhisper.yaml` runs it again).

It holds the resolved options, the manifests' paths and hashes, the versions of the
libraries that shape a run, and the code revision.
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
from pathlib import Path

import yaml

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.data.augment import from_config

# Per-invocation commands, not options of the run: a record reused with --config must not
# resume or delete anything by itself.
_NOT_RECORDED = ("resume", "resume_despite_changes", "overwrite_output_dir")


def manifest_hashes(
    cfg: TrainConfig, data_cfg: DataConfig | None = None
) -> dict[str, dict[str, str | None]]:
    """Path and sha256 of each manifest file (None for folders: audiofolder, save_to_disk)."""
    rehearsal = data_cfg.rehearsal_manifest if data_cfg else None
    return {
        split: {"path": str(path), "sha256": sha256(path)}
        for split, path in (
            ("train", cfg.train_manifest),
            ("eval", cfg.eval_manifest),
            ("rehearsal", rehearsal),
            ("regression", cfg.regression_manifest),
        )
        if path
    }


def write_run_record(
    out: Path,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    language,
    *,
    manifests: dict | None = None,
    resumed_from: Path | None = None,
) -> None:
    import fitwhisper

    train_options = {
        k: v for k, v in dataclasses.asdict(train_cfg).items() if k not in _NOT_RECORDED
    }
    record = {
        "model": dataclasses.asdict(model_cfg),
        "data": dataclasses.asdict(data_cfg),
        "train": train_options,
        "resolved": {
            "language": language,
            # What --augment and its overrides came to (data/augment.py); the model card shows it.
            "augmentation": from_config(train_cfg).summary(),
            "resumed_from": str(resumed_from) if resumed_from else None,
        },
        "manifests": manifests or {},
        "versions": {
            "fitwhisper": fitwhisper.__version__,
            "python": platform.python_version(),
            **_library_versions(),
        },
        "code_revision": _code_revision(),
    }
    (out / "fitwhisper.yaml").write_text(yaml.safe_dump(record, sort_keys=False))


def _library_versions() -> dict[str, str]:
    """Installed versions of the libraries that shape a run (absent ones left out)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "peft", "accelerate", "datasets"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def _code_revision() -> str | None:
    import subprocess

    try:
        here = Path(__file__).resolve().parent
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        return rev.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def sha256(path: str | Path) -> str | None:
    p = Path(path)
    if not p.is_file():
        return None
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
