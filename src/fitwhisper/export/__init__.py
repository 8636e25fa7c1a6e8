"""Export a model for other runtimes and check it still scores the same.

    fitwhisper export MODEL OUT [--quantization int8] [--manifest M]

- `ct2`: `export_ct2`, a model (LoRA adapters merged) as a CTranslate2 folder for
  faster-whisper; the conversion itself is `fitwhisper.models.ct2_export`'s
- `rescoring`: `rescore`, the source and its export on the same manifest rows, scored as
  `fitwhisper evaluate` scores

Names are loaded on first use, so `import fitwhisper.export` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module that defines it
_EXPORTS = {
    "ExportResult": "fitwhisper.export.ct2",
    "export_ct2": "fitwhisper.export.ct2",
    "Rescore": "fitwhisper.export.rescoring",
    "rescore": "fitwhisper.export.rescoring",
    "QUANTIZATIONS": "fitwhisper.models.ct2_export",
    "Quantization": "fitwhisper.models.ct2_export",
    "cached_ct2": "fitwhisper.models.ct2_export",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:  # PEP 562: import the defining module on first use
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
