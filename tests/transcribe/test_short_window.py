"""Short clips on a window of their own length (`transcribe --encoder_window`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def trimmed_model(tiny_whisper_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as a run trained with --encoder_input mixed saves it, after its final
    evaluation chose the short window."""
    from transformers import WhisperConfig

    from fitwhisper.models.short_window import record_inference_window, record_training_window

    out = tmp_path_factory.mktemp("trimmed") / "model"
    shutil.copytree(tiny_whisper_dir, out)
    config = WhisperConfig.from_pretrained(out)
    holder = type("M", (), {"config": config})()
    record_training_window(holder, "mixed", 0.1)
    record_inference_window(config, "short", "held-out WER 10% short, 10% at 30 s")
    config.save_pretrained(out)
    return out


def _encoder_widths(engine, audios) -> list[int]:
    widths: list[int] = []
    engine.model.get_encoder().register_forward_pre_hook(
        lambda m, args, kw: widths.append((args[0] if args else kw["input_features"]).shape[-1]),
        with_kwargs=True,
    )
    engine.transcribe([f"clip{i}" for i in range(len(audios))], audios)
    return sorted(set(widths))


@pytest.mark.parametrize("timestamps", ["segment", "none"])
def test_a_trimmed_model_transcribes_short_clips_on_their_length(
    trimmed_model: Path, tiny_whisper_dir: Path, timestamps: str
) -> None:
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    rng = np.random.default_rng(0)
    audios = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16_000, 24_000)]
    opts = TranscribeOptions(vad=False, timestamps=timestamps, max_new_tokens=4)
    # 1.5 s = 150 frames for the longer clip; generation runs on it too.
    assert _encoder_widths(TransformersEngine(str(trimmed_model), opts, "cpu"), audios) == [150]
    full = TranscribeOptions(vad=False, timestamps=timestamps, max_new_tokens=4,
                             encoder_window="full")  # fmt: skip
    assert _encoder_widths(TransformersEngine(str(trimmed_model), full, "cpu"), audios) == [3000]
    # A model trained on 30 s windows keeps them unless told.
    assert _encoder_widths(TransformersEngine(str(tiny_whisper_dir), opts, "cpu"), audios) == [3000]
