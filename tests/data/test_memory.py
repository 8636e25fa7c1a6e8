"""Memory stays flat over long manifests: rows hold references, audio is decoded per item."""

from __future__ import annotations

import gc
import json

import numpy as np
import psutil
import pytest
import soundfile as sf

from fitwhisper.config import DataConfig
from fitwhisper.data.check import check_manifest
from fitwhisper.data.features import SpeechDataset
from fitwhisper.data.manifest import load_manifest

N_ROWS = 10_000
MAX_GROWTH_MB = 50


def _rss_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


@pytest.fixture(scope="module")
def big_manifest(tmp_path_factory):
    """10,000 distinct 0.2 s clips (each its own content, so no duplicates) in a JSONL."""
    root = tmp_path_factory.mktemp("big")
    (root / "clips").mkdir()
    rng = np.random.default_rng(0)
    with (root / "m.jsonl").open("w") as f:
        for i in range(N_ROWS):
            clip = (0.1 * rng.standard_normal(3200)).astype(np.float32)
            sf.write(root / "clips" / f"{i}.wav", clip, 16000, subtype="PCM_16")
            f.write(json.dumps({"audio_path": f"clips/{i}.wav", "text": f"clip {i}"}) + "\n")
    return root / "m.jsonl"


@pytest.mark.slow
def test_check_manifest_memory_is_flat(big_manifest):
    manifest = load_manifest(big_manifest)
    cfg = DataConfig()
    head = load_manifest(big_manifest)
    head.rows = head.rows[:1000]
    check_manifest(head, cfg, progress=False)  # warm up: imports, thread pool, caches
    after_1k = _rss_mb()

    report = check_manifest(manifest, cfg, progress=False)
    after_10k = _rss_mb()

    assert report.ok and len(report.rows) == N_ROWS
    assert after_10k - after_1k < MAX_GROWTH_MB, (after_1k, after_10k)


@pytest.mark.slow
def test_speech_dataset_memory_is_flat(big_manifest, en_processor):
    ds = SpeechDataset(load_manifest(big_manifest).rows, en_processor)
    assert len(ds) == N_ROWS  # building the dataset computes nothing
    for i in range(200):
        ds[i]
    after_200 = _rss_mb()

    # 600 more items: an item kept alive holds its 30 s features (80 x 3000 floats, 0.96 MB),
    # so keeping them would grow by about 576 MB, ten times the limit.
    for i in range(200, 800):
        ds[i]
    after_800 = _rss_mb()

    assert after_800 - after_200 < MAX_GROWTH_MB, (after_200, after_800)
