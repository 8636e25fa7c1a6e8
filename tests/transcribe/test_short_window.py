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
    # 1.5 s = 150 frames for the longer clip and the 1 s margin; generation runs on it too.
    assert _encoder_widths(TransformersEngine(str(trimmed_model), opts, "cpu"), audios) == [250]
    full = TranscribeOptions(vad=False, timestamps=timestamps, max_new_tokens=4,
                             encoder_window="full")  # fmt: skip
    assert _encoder_widths(TransformersEngine(str(trimmed_model), full, "cpu"), audios) == [3000]
    # A model trained on 30 s windows keeps them unless told.
    assert _encoder_widths(TransformersEngine(str(tiny_whisper_dir), opts, "cpu"), audios) == [3000]


def _ct2_widths(engine, audios) -> list[int]:
    """The frame counts faster-whisper's encoder was given while `engine` transcribed."""
    widths: list[int] = []
    encode = engine.model.encode

    def recording(features):
        widths.append(features.shape[-1])
        return encode(features)

    engine.model.encode = recording
    texts = engine.transcribe([f"clip{i}" for i in range(len(audios))], audios)
    assert [t.duration_s for t in texts] == [len(a) / 16_000 for a in audios]
    return sorted(set(widths))


def test_the_ct2_engine_encodes_short_clips_on_their_length_for_a_model_that_chose_it(
    trimmed_model: Path, tiny_whisper_dir: Path, tmp_path: Path
) -> None:
    """The ct2 engine (what --engine auto runs on CPU) follows the recorded window too, from
    the model's config or from a folder `fitwhisper export` wrote; --encoder_window full and
    a model trained on 30 s windows keep 30 s; a lone clip takes the short window too."""
    pytest.importorskip("faster_whisper")
    from fitwhisper.cli import main
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.options import TranscribeOptions
    from fitwhisper.transcribe.run import EngineChoice, make_engine

    rng = np.random.default_rng(0)
    audios = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16_000, 24_000)]
    ct2 = EngineChoice("ct2", "cpu", "test")

    def widths(model: Path, clips=audios, **options) -> list[int]:
        options = {"vad": False, "max_new_tokens": 4, "compute_type": "float32", **options}
        return _ct2_widths(make_engine(resolve_model(str(model)), TranscribeOptions(**options),
                                       ct2), clips)  # fmt: skip

    assert widths(trimmed_model) == [250]  # 1.5 s and the 1 s margin
    assert widths(trimmed_model, audios[:1]) == [200]
    # A file over 30 s, alone or beside a clip, is decoded in 30 s windows as before.
    long = 0.1 * rng.standard_normal(31 * 16_000).astype(np.float32)
    assert widths(trimmed_model, [long]) == [3000]
    assert widths(trimmed_model, [long, audios[0]]) == [200, 3000]
    assert widths(trimmed_model, encoder_window="full") == [3000]
    assert widths(tiny_whisper_dir) == [3000]
    assert widths(tiny_whisper_dir, encoder_window="short") == [250]
    exported = tmp_path / "ct2"
    assert main(["export", str(trimmed_model), str(exported), "--quantization", "float32"]) == 0
    assert widths(exported, compute_type="auto") == [250]  # the folder as it is
