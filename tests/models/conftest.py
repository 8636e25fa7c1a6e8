"""CTranslate2 copies of the tiny random Whisper, made with ctranslate2's own converter."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def make_ct2(
    tmp_path_factory: pytest.TempPathFactory, tiny_whisper_dir: Path
) -> Callable[[str], Path]:
    """`make_ct2(quantization)` -> a CTranslate2 folder of `tiny_whisper_dir` (made once each)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    made: dict[str, Path] = {}

    def make(quantization: str) -> Path:
        if quantization not in made:
            out = tmp_path_factory.mktemp("ct2") / quantization
            converter = ctranslate2.converters.TransformersConverter(
                str(tiny_whisper_dir), copy_files=["tokenizer.json"]
            )
            converter.convert(str(out), quantization=quantization)
            made[quantization] = out
        return made[quantization]

    return make
