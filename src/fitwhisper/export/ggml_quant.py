"""ggml's own block quantisation for `write_ggml(dtype="q8_0" ...)`: `ggml_quantize_chunk`,
called through ctypes in the libggml-base that pywhispercpp's wheel ships (the function
whisper.cpp's `quantize` tool calls), so the blocks are byte-for-byte ggml's; no quantiser
is on PyPI otherwise."""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

import numpy as np

from fitwhisper.errors import ConfigError

QUANT_BLOCK = 32  # values per block in every q* type fitwhisper writes


class Quantiser:
    """ggml's own block quantisation (`ggml_quantize_chunk`), from the libggml-base that
    pywhispercpp's wheel ships: the quantiser whisper.cpp's `quantize` tool calls."""

    def __init__(self, ggml_type: int) -> None:
        self.type = ggml_type
        self.lib = _libggml_base()

    def __call__(self, name: str, array: np.ndarray) -> bytes:
        rows, per_row = array.shape
        if per_row % QUANT_BLOCK:
            raise ConfigError(
                f"{name}: rows of {per_row} values cannot be cut into blocks of {QUANT_BLOCK}",
                hint="export this model as f16",
            )
        src = np.ascontiguousarray(array, dtype=np.float32)
        dst = np.empty(self.lib.ggml_row_size(self.type, per_row) * rows, dtype=np.uint8)
        written = self.lib.ggml_quantize_chunk(
            self.type, src.ctypes.data, dst.ctypes.data, 0, rows, per_row, None
        )
        if written != dst.size:
            raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, not {dst.size}")
        return dst.tobytes()


def _libggml_base() -> ctypes.CDLL:
    hint = "pip install pywhispercpp (its wheel ships ggml's quantiser), or export as f16"
    spec = importlib.util.find_spec("_pywhispercpp")
    if spec is None or spec.origin is None:
        raise ConfigError("quantised ggml export needs pywhispercpp", hint=hint)
    site = Path(spec.origin).parent
    # auditwheel's vendored copy (the one _pywhispercpp links on Linux) first
    candidates = [
        *sorted(site.glob("pywhispercpp.libs/libggml-base*")),
        *site.glob("libggml-base*"),
    ]
    for path in candidates:
        try:
            lib = ctypes.CDLL(str(path))
            fn = lib.ggml_quantize_chunk
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        fn.argtypes += [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        fn.restype = ctypes.c_size_t
        lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        lib.ggml_row_size.restype = ctypes.c_size_t
        return lib
    raise ConfigError(f"no libggml-base with ggml_quantize_chunk next to {site}", hint=hint)
