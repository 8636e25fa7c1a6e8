"""Merge a LoRA adapter into its base: a full model that needs neither PEFT nor the base (T12).

Run with `fitwhisper merge ADAPTER OUT`. ADAPTER is a LoRA run's `final/` (or the run
folder); OUT gets weights, config, generation config (language and task) and processor,
and loads with `from_pretrained` and the transformers ASR pipeline.

The base is loaded unquantised (float32) even when the adapter was trained on an 8-bit or
4-bit base, so the merged model is the adapter on full-precision weights.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fitwhisper.errors import ModelLoadError
from fitwhisper.output_guard import Output, check_outputs, mark, replace_folder

if TYPE_CHECKING:
    from fitwhisper.models.resolve import ResolvedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MergeResult:
    """What `merge_adapter` wrote."""

    out: Path
    adapter: Path
    base: str  # the base as the adapter names it
    n_params: int


def merge_adapter(
    adapter: str | Path | ResolvedModel, out: str | Path, *, overwrite: bool = False
) -> MergeResult:
    """Fold the LoRA adapter at `adapter` (a folder, or the model spec already resolved)
    into its base model and save the result in `out`.

    Raises:
        ModelLoadError: `adapter` holds no LoRA adapter, or its base cannot be loaded.
        ConfigError: `out` may not be written (`fitwhisper.output_guard`): it exists and
            `overwrite` is off, fitwhisper did not make it, or it is an input.
    """
    import torch

    from fitwhisper.models.resolve import as_resolved, load_model, load_processor

    resolved = as_resolved(adapter)
    if resolved.adapter is None:
        raise ModelLoadError(
            f"{resolved.spec} holds no LoRA adapter (no adapter_config.json)",
            hint="pass a LoRA run's final/ folder (trained with --use_lora, --use_8bit or "
            "--use_4bit); a full fine-tune is already a complete model",
        )
    dest = Path(out)
    # Before the conversion, not after it; never over the adapter or its own base model.
    inputs = [*merge_inputs(resolved.adapter), ("ADAPTER as given", resolved.spec)]
    check_outputs([Output("OUT", dest, "new_folder", replace=overwrite)], inputs)
    replace_folder(dest)

    # 1. Base in float32 plus adapter (with the adapter's generation config).
    model = load_model(resolved, dtype=torch.float32)
    # 2. W + (alpha / r) * B @ A into each target layer; the LoRA layers are removed.
    merged = model.merge_and_unload()
    # 3. A plain transformers folder with the processor the run used.
    merged.save_pretrained(dest)
    load_processor(resolved).save_pretrained(dest)
    mark(dest, "merge")
    base = json.loads((resolved.adapter / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ]
    n_params = sum(p.numel() for p in merged.parameters())
    log.info("merged %s into its base %s -> %s", resolved.adapter, base, dest)
    return MergeResult(out=dest, adapter=resolved.adapter, base=base, n_params=n_params)


def merge_inputs(adapter: str | Path) -> list[tuple[str, str | Path | None]]:
    """What merging `adapter` reads, for the output guard, without loading anything: the
    adapter as given and the base model its adapter_config.json names (a folder on disk is
    an input too: merging onto it would delete the model the adapter needs)."""
    found: list[tuple[str, str | Path | None]] = [("ADAPTER", adapter)]
    for folder in (Path(adapter), Path(adapter) / "final"):
        try:
            config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
        if isinstance(base, str) and base:
            found.append(("ADAPTER's base model", base))
        break
    return found
