"""A small Whisper configuration on disk (no weights): what `--model FOLDER` plans from."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "vocab_size": 51864,
    "num_mel_bins": 80,
    "max_source_positions": 1500,
    "max_target_positions": 448,
}


def write_config(folder: Path, **overrides) -> Path:
    from transformers import WhisperConfig

    folder.mkdir(parents=True, exist_ok=True)
    WhisperConfig(**{**SMALL, **overrides}).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def small_dims() -> dict:
    return dict(SMALL)


@pytest.fixture(scope="session")
def config_dir_factory(tmp_path_factory: pytest.TempPathFactory):
    """Writes a small config with some fields changed: `factory(encoder_layers=6)`."""
    return lambda **overrides: write_config(tmp_path_factory.mktemp("whisper-cfg"), **overrides)


@pytest.fixture(scope="session")
def small_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """config.json of a 2+2-layer Whisper with d_model 64 and the real vocabulary."""
    return write_config(tmp_path_factory.mktemp("small-whisper"))
