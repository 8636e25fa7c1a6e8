"""`--encoder_input mixed`: a few 30 s windows of several clips, timestamped, among the
single clips, batched apart from them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from tests.conftest import write_tone

from fitwhisper.data.features import SpeechDataset
from fitwhisper.data.manifest import Row
from fitwhisper.data.mixed_windows import describe, with_windows

DURATION_S = 2.5


@pytest.fixture
def clips(tiny_whisper_dir: Path, tmp_path: Path) -> SpeechDataset:
    from transformers import WhisperProcessor

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    rows = [Row(index=i, line=i + 1, text=f"clip {i}",
                audio=write_tone(tmp_path / f"c{i:02d}.wav", DURATION_S, freq=200 + 10 * i))
            for i in range(80)]  # fmt: skip
    return SpeechDataset(rows, processor)


def _cfg(share: float, by_duration: bool = False) -> SimpleNamespace:
    return SimpleNamespace(packed_window_share=share, packed_single_clip_share=0.4,
                           group_by_duration=by_duration)  # fmt: skip


def test_a_share_of_items_are_timestamped_30_s_windows_the_rest_the_clips_themselves(
    clips: SpeechDataset,
) -> None:
    durations = [DURATION_S] * len(clips.rows)
    ds = with_windows(clips, durations, _cfg(0.03), language=None)
    # 80 clips of 2.5 s: window 33 holds clips 33-44 (30 s), window 66 the last 3; the
    # other 65 clips stay alone.
    assert len(ds) == 67 and ds.n_windows == 2
    assert [len(w.rows) for w in ds.windows if len(w.rows) > 1] == [12, 3]
    assert ds.windows[33].rows == tuple(range(33, 45))
    assert sorted(r for w in ds.windows for r in w.rows) == list(range(80))  # none lost
    assert "15 of the 80 clips train in 2 window(s) of several clips" in describe(ds)

    tok = clips.processor.tokenizer
    packed = ds[33]
    assert packed["frames"] == 3000  # kept at 30 s whatever the batch
    text = tok.decode(packed["labels"], decode_with_timestamps=True)
    assert "<|notimestamps|>" not in text
    assert text.count("<|0.00|>") == 1 and "<|30.00|>" in text  # 12 x 2.5 s, from 0 to 30 s
    assert [f"clip {i}" in text for i in ds.windows[33].rows] == [True] * 12

    alone = ds[5]  # an item that is one clip: exactly the run's own example of it
    own = clips[ds.windows[5].rows[0]]
    np.testing.assert_array_equal(alone["input_features"], own["input_features"])
    assert alone["labels"] == own["labels"] and alone["frames"] == 250


def _many(clips: SpeechDataset, n: int = 600, durations=None):
    # The sampler reads kinds and lengths only: rows without audio.
    rows = [Row(index=i, line=i + 1, audio=None, text=f"clip {i}") for i in range(n)]
    many = SpeechDataset(rows, clips.processor)
    durations = [DURATION_S] * n if durations is None else durations
    return with_windows(many, durations, _cfg(0.1), language=None)


def test_windows_ride_together_in_batches_at_30_s_in_random_order(clips: SpeechDataset) -> None:
    import torch

    from fitwhisper.data.mixed_windows import KindBatches, single_full_share
    from fitwhisper.train.guard import tagged

    ds, _ = tagged(_many(clips), None)  # as the trainer sees it
    kinds = ds.is_window
    n_windows = sum(kinds)
    assert 20 < n_windows < 60 and n_windows % 4 != 0  # the windows' last batch is topped up
    sampler = KindBatches(kinds, 4, seed=7)
    batches = list(sampler)
    assert len(batches) == len(sampler) == -(-len(ds) // 4)  # as many as Trainer counts
    assert sorted(i for b in batches for i in b) == list(range(len(ds)))  # each item once
    with_windows_ = [b for b in batches if any(kinds[i] for i in b)]
    assert len(with_windows_) == -(-n_windows // 4)  # windows share batches only with windows
    assert sum(len({kinds[i] for i in b}) > 1 for b in batches) == 1  # but the last
    positions = [k for k, b in enumerate(batches) if b in with_windows_]
    assert positions != list(range(len(positions)))  # spread over the epoch
    singles = [i for b in batches for i in b if not kinds[i]]
    assert singles != sorted(singles)  # the clips keep a random order
    assert list(sampler) == batches  # the seed and epoch decide it: a resume draws the same
    sampler.set_epoch(1)
    assert list(sampler) != batches  # the next epoch draws anew
    torch.manual_seed(0)
    assert list(KindBatches(kinds, 4, seed=8)) != batches  # the run's seed, not torch's RNG
    assert list(KindBatches(kinds, 4, seed=7)) == batches

    # The windows' batches count among the 30 s batches: 150 batches, 10 of them windows',
    # so for 10% in all 5 of the other 140 stay at 30 s; for 5% none need to.
    assert single_full_share(0.1, 37, 563, 4) == pytest.approx(5 / 140)
    assert single_full_share(0.05, 37, 563, 4) == 0.0
    assert single_full_share(0.05, 0, 600, 4) == 0.05  # no windows: as asked


def test_by_duration_single_clips_are_batched_with_clips_of_similar_length(
    clips: SpeechDataset,
) -> None:
    from fitwhisper.data.mixed_windows import KindBatches

    durations = [1.0 + (7 * i % 600) / 60 for i in range(600)]  # 1-11 s, shuffled
    ds = _many(clips, durations=durations)
    assert ds.lengths[0] == pytest.approx(1.0) and max(ds.lengths) == 30.0  # windows: 30 s
    grouped = list(KindBatches(ds.is_window, 4, lengths=ds.lengths, group=4))
    random = list(KindBatches(ds.is_window, 4))

    def spread(batches):  # mean spread of durations within a batch of single clips
        singles = [b for b in batches if not ds.is_window[b[0]]]
        return np.mean([np.ptp([ds.lengths[i] for i in b]) for b in singles])

    assert spread(grouped) < spread(random) / 5
    assert sum(len({ds.is_window[i] for i in b}) > 1 for b in grouped) == 1


def test_nothing_to_pack_leaves_the_clips_alone(clips: SpeechDataset) -> None:
    durations = [DURATION_S] * len(clips.rows)
    assert with_windows(clips, durations, _cfg(0.0), language=None) is None
    # Fewer windows than one in 1/share: none of them holds several clips.
    few = SpeechDataset(clips.rows[:20], clips.processor)
    assert with_windows(few, durations[:20], _cfg(0.03), language=None) is None


def test_train_with_windows_logs_them_and_records_their_share(
    tiny_whisper_dir: Path, tmp_path: Path, capsys
) -> None:
    import json

    from transformers import WhisperConfig

    from fitwhisper.cli import main

    manifest = tmp_path / "train.jsonl"
    manifest.write_text("".join(
        json.dumps({"audio": str(write_tone(tmp_path / f"t{i:02d}.wav", 1.0, freq=200 + 9 * i)),
                    "text": f"tone {i}"}) + "\n" for i in range(40)
    ))  # fmt: skip
    out = tmp_path / "run"
    argv = ["train", "--model", str(tiny_whisper_dir), "--train_manifest", str(manifest),
            "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "4",
            "--report_to", "none", "--encoder_input", "mixed",
            "--packed_window_share", "0.03"]  # fmt: skip
    assert main(argv) == 0
    # Window 33 takes the 7 clips left after the 33 alone: 34 items.
    assert "7 of the 40 clips train in 1 window(s) of several clips" in capsys.readouterr().err
    record = WhisperConfig.from_pretrained(out / "final").fitwhisper_encoder_input
    assert record["packed_window_share"] == round(1 / 34, 4)


def test_two_processes_share_the_kind_batches_between_them(clips: SpeechDataset) -> None:
    from accelerate.data_loader import BatchSamplerShard

    from fitwhisper.data.mixed_windows import KindBatches

    ds = _many(clips, n=203)
    sampler = KindBatches(ds.is_window, 4, seed=3)
    # How `accelerator.prepare` deals batches to two processes (even_batches: the shorter
    # rank repeats the epoch's first batches).
    ranks = [list(BatchSamplerShard(sampler, num_processes=2, process_index=r)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == -(-len(sampler) // 2)
    assert {i for r in ranks for b in r for i in b} == set(range(len(ds)))
    assert [b for pair in zip(*ranks, strict=True) for b in pair][: len(sampler)] == list(sampler)
