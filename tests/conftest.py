"""Shared fixtures: an isolated model cache, a tiny random Whisper, generated and real speech.

The tiny model keeps Whisper's real front end (80 mel bins, 1500 encoder positions, so 30 s
windows) and the real tiny.en tokenizer, with everything else shrunk so a training step takes
milliseconds. Real weights come from the offline packages (`offline/tiny.en`, `offline/base`)
and real recordings from `../shared/data`; tests that need either are marked slow.

Tests marked `deepspeed` need the optional deepspeed package: `make test` (no deepspeed, the
default install) skips them, and `make test-deepspeed` runs them alone in a venv with it,
where FITWHISPER_DEEPSPEED_TESTS=required turns any skip of theirs into a failure, so they
cannot silently stop running.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DEEPSPEED_REQUIRED = os.environ.get("FITWHISPER_DEEPSPEED_TESTS") == "required"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DEEPSPEED_REQUIRED or importlib.util.find_spec("deepspeed") is not None:
        return
    skip = pytest.mark.skip(reason="needs the deepspeed package; `make test-deepspeed` runs it")
    for item in items:
        if item.get_closest_marker("deepspeed"):
            item.add_marker(skip)


_BACKGROUND: dict = {}  # node id -> tests.background.Started


def pytest_collection_finish(session: pytest.Session) -> None:
    # Every module the suite imports is loaded by now and lives to the end of the session:
    # keep the collector from walking those objects again at each gc.collect(), which
    # accelerate and fitwhisper call at the start and end of every training run.
    gc.freeze()
    from tests import background

    _BACKGROUND.update(background.start({item.nodeid for item in session.items}))


def pytest_sessionfinish(session: pytest.Session) -> None:
    gc.unfreeze()  # collected as usual at exit (bindings report objects never freed)
    from tests import background

    background.stop(_BACKGROUND)


@pytest.fixture
def background_result(request: pytest.FixtureRequest):
    """The output of this test's background job (tests/background.py), or None where the
    job was not started (the test then computes it itself)."""
    started = _BACKGROUND.get(request.node.nodeid)
    return started.result if started else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    # An xfail (a known intermittent failure) ran, so it counts; any other skip does not.
    if (DEEPSPEED_REQUIRED and report.skipped and not hasattr(report, "wasxfail")
            and item.get_closest_marker("deepspeed")):  # fmt: skip
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} was skipped under FITWHISPER_DEEPSPEED_TESTS=required "
            f"({report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr}); "
            "the DeepSpeed tests must run here: install the deepspeed extra and build its ops "
            "(make test-deepspeed does both)"
        )
    return report


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Converted offline models go to a per-session cache, never to the user's home.

    FITWHISPER_TEST_CACHE, when set, names a folder to reuse across sessions (faster local
    runs); CI leaves it unset.
    """
    cache = os.environ.get("FITWHISPER_TEST_CACHE") or str(tmp_path_factory.mktemp("cache"))
    os.environ["FITWHISPER_CACHE"] = cache
    os.environ["HF_HUB_OFFLINE"] = "1"  # the Hub is never reached from tests
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return Path(cache)


@pytest.fixture(scope="session")
def tiny_en_processor():
    """The real tiny.en processor (tokenizer repaired by the importer)."""
    from fitwhisper.models.resolve import load_processor

    return load_processor("offline/tiny.en")


@pytest.fixture(scope="session")
def tiny_whisper_dir(tmp_path_factory: pytest.TempPathFactory, tiny_en_processor) -> Path:
    """A saved tiny random English Whisper: a transformers folder any resolver accepts."""
    out = tmp_path_factory.mktemp("tiny-whisper")
    return _save_tiny_whisper("offline/tiny.en", tiny_en_processor, out)


@pytest.fixture(scope="session")
def tiny_multilingual_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random multilingual Whisper with the real offline/base tokenizer."""
    from fitwhisper.models.resolve import load_processor

    out = tmp_path_factory.mktemp("tiny-multilingual")
    return _save_tiny_whisper("offline/base", load_processor("offline/base"), out)


def _save_tiny_whisper(real_spec: str, processor, out: Path) -> Path:
    """A tiny random Whisper (d_model 64, 2+2 layers) with the real model's vocabulary,
    special tokens, generation config and processor; 80 mels and 1500 positions as in
    every real size."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    from fitwhisper.models.resolve import resolve_model

    real = resolve_model(real_spec).path_or_id
    real_cfg = WhisperConfig.from_pretrained(real)
    cfg = WhisperConfig(
        vocab_size=real_cfg.vocab_size,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        pad_token_id=real_cfg.pad_token_id,
        bos_token_id=real_cfg.bos_token_id,
        eos_token_id=real_cfg.eos_token_id,
        decoder_start_token_id=real_cfg.decoder_start_token_id,
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg)
    model.generation_config = GenerationConfig.from_pretrained(real)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    assert len(processor.tokenizer) <= cfg.vocab_size
    return out


def write_tone(path: Path, seconds: float, *, sr: int = 16_000, freq: float = 440.0) -> Path:
    """A tone with a little noise, so it is neither silent nor identical to another file."""
    import soundfile

    rng = np.random.default_rng(abs(hash((str(path), seconds, freq))) % 2**32)
    t = np.arange(int(seconds * sr)) / sr
    audio = 0.3 * np.sin(2 * np.pi * freq * t) + 0.01 * rng.standard_normal(t.size)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), audio.astype(np.float32), sr)
    return path


@pytest.fixture
def tone_manifest(tmp_path: Path) -> Path:
    """A JSONL manifest of 6 distinct tone clips (1-2 s) with short English transcripts."""
    rows = []
    for i in range(6):
        rel = f"clips/tone_{i}.wav"
        write_tone(tmp_path / rel, 1.0 + 0.2 * i, freq=300.0 + 50 * i)
        rows.append({"audio_path": rel, "text": f"tone number {i} is playing"})
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` (real recordings); tests needing it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real recordings not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def mandarin_lora(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """One LoRA fine-tune of real offline/base on real Mandarin for the session
    (tests/shared_runs.py): its tests read the run and write elsewhere."""
    from tests.shared_runs import train_mandarin_lora

    return train_mandarin_lora(shared_data, tmp_path_factory.mktemp("mandarin-lora"))


@pytest.fixture(scope="session")
def mandarin_lora_exports(mandarin_lora, shared_data: Path, tmp_path_factory):
    """That run exported to every format with re-scoring, and merged (tests/shared_runs.py):
    the export acceptance test reads the report, the ONNX tests the graphs and the merged
    source."""
    from tests.shared_runs import export_mandarin_lora

    root = tmp_path_factory.mktemp("mandarin-exports")
    return export_mandarin_lora(mandarin_lora, shared_data, root)
