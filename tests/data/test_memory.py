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
# check-data over 9,000 more rows: each clip's content hash and place for duplicates (~0.2 MB)
# and allocator noise; holding the rows and their results would take about 10 MB.
FLAT_CHECK_MB = 5


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


@pytest.mark.slow
def test_check_data_holds_no_row_it_has_checked(big_manifest, tmp_path, capsys):
    """`check-data` reads rows as it checks them and writes each result to its report as it
    comes: checking 10,000 rows takes no more memory than checking 1,000."""
    from fitwhisper.cli import main

    def check(limit: int) -> float:
        report = tmp_path / f"report-{limit}.csv"
        assert main(["check-data", str(big_manifest), "--limit", str(limit), "--report",
                     str(report), "-q"]) == 0  # fmt: skip
        assert len(report.read_text().splitlines()) == limit + 1  # a header, a line per row
        return _rss_mb()

    check(1000)  # warm up: imports, thread pool, the check's cache
    after_1k = check(1000)
    after_10k = check(N_ROWS)
    assert f"{N_ROWS:,} rows checked" in capsys.readouterr().out
    assert after_10k - after_1k < FLAT_CHECK_MB, (after_1k, after_10k)
