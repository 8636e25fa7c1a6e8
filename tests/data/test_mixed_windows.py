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


def test_windows_and_clips_are_batched_apart_in_random_order(clips: SpeechDataset) -> None:
    import torch

    from fitwhisper.data.batching import LengthGroupedTrainerMixin
    from fitwhisper.train.guard import tagged

    # The sampler reads lengths only: 600 rows without audio.
    rows = [Row(index=i, line=i + 1, audio=None, text=f"clip {i}") for i in range(600)]
    many = SpeechDataset(rows, clips.processor)
    ds, _ = tagged(with_windows(many, [DURATION_S] * 600, _cfg(0.1), language=None), None)

    class _Base:
        def _get_train_sampler(self, train_dataset=None):
            return "random order"

    class _Trainer(LengthGroupedTrainerMixin, _Base):
        group_by_length = False  # no --group_by_duration: the items' kind still groups

    t = _Trainer()
    t.args = SimpleNamespace(
        train_batch_size=4, gradient_accumulation_steps=1, world_size=1, seed=0
    )
    t.train_dataset = ds
    sampler = t._get_train_sampler()
    assert sampler != "random order"
    kinds = [len(ds.base.windows[i].rows) > 1 for i in range(len(ds))]
    assert 20 < sum(kinds) < 60
    order = list(sampler)
    assert sorted(order) == list(range(len(ds)))
    batches = [order[i : i + 4] for i in range(0, len(order), 4)]
    mixed = [b for b in batches if len({kinds[i] for i in b}) > 1]
    # LengthGroupedSampler sorts megabatches of min(n // 16, 50) batches of 4 at a time.
    megabatches = -(-len(ds) // (min(len(ds) // 16, 50) * 4))
    assert len(mixed) <= megabatches, mixed  # only where a megabatch's two kinds meet
    singles = [i for i in order if not kinds[i]]
    assert singles != sorted(singles)  # the clips keep a random order
    torch.manual_seed(1)  # the global RNG plays no part: the seed and the epoch decide
    assert list(sampler) == order  # so a resume draws the same


def test_by_duration_the_sampler_gets_the_real_lengths(clips: SpeechDataset) -> None:
    durations = [DURATION_S + 0.01 * i for i in range(len(clips.rows))]
    ds = with_windows(clips, durations, _cfg(0.03, by_duration=True), language=None)
    assert ds.lengths[0] == pytest.approx(DURATION_S) and ds.lengths[33] == 30.0
    kind_only = with_windows(clips, durations, _cfg(0.03), language=None).lengths
    assert set(kind_only) == {1.0, 30.0}


def test_nothing_to_pack_leaves_the_clips_alone(clips: SpeechDataset) -> None:
    durations = [DURATION_S] * len(clips.rows)
    assert with_windows(clips, durations, _cfg(0.0), language=None) is None
    # Fewer windows than one in 1/share: none of them holds several clips.
    few = SpeechDataset(clips.rows[:20], clips.processor)
    assert with_windows(few, durations[:20], _cfg(0.03), language=None) is None


def test_train_by_default_has_windows_logs_them_and_records_their_share(
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
            "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0  # the defaults: mixed input, --packed_window_share 0.03
    # Window 33 takes the 7 clips left after the 33 alone: 34 items.
    err = capsys.readouterr().err
    assert "7 of the 40 clips train in 1 window(s) of several clips" in err
    assert "34 training items (1 of them windows of several clips)" in err  # the step count's unit
    record = WhisperConfig.from_pretrained(out / "final").fitwhisper_encoder_input
    assert record["mode"] == "mixed" and record["packed_window_share"] == round(1 / 34, 4)
