"""Export a model for other runtimes and check it still scores the same.

    fitwhisper export MODEL OUT [--format ct2,ggml,onnx,openai] [--manifest M]

- `formats`: the formats, their engines, and `export_formats` (LoRA merged once, each
  format written aside and renamed into place)
- `ct2`, `ggml`, `onnx_format`, `openai_format`: each writes its format
  (`write_<format>`) and runs it in its own engine (`transcribe_<format>`; for ggml in
  `ggml_run`, with ggml's quantiser in `ggml_quant`; for onnx in `onnx_run`)
- `rescoring`: `rescore`, the source and its exports on the same rows and a long file,
  scored as `fitwhisper evaluate` scores
- `card`: the model card's Exports section

Names are loaded on first use, so `import fitwhisper.export` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module that defines it
_EXPORTS = {
    "ExportResult": "fitwhisper.export.ct2",
    "export_ct2": "fitwhisper.export.ct2",
    "FORMATS": "fitwhisper.export.formats",
    "export_formats": "fitwhisper.export.formats",
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
