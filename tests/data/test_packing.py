"""Packed windows, length-grouped batches and the short encoder window."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.conftest import write_tone

from fitwhisper.data.manifest import Row
from fitwhisper.data.packing import PackedDataset, Window, pack_windows


def _rows(n: int, language: str | None = None) -> list[Row]:
    return [Row(index=i, line=i + 1, audio=None, text=f"t{i}", language=language) for i in range(n)]


def test_windows_keep_order_and_stay_within_30_s_and_448_tokens() -> None:
    rows = _rows(7)
    durations = [10.0, 9.0, 10.5, 29.9, 3.0, 3.0, 3.0]
    windows = pack_windows(rows, durations, [5] * 7)
    # 10 + 9 fit; 10.5 would make 29.5 + alignment: fits; 29.9 alone; the three 3 s clips.
    assert [w.rows for w in windows] == [(0, 1, 2), (3,), (4, 5, 6)]
    assert all(w.duration_s <= 30.0 for w in windows)
    assert windows[0].duration_s == pytest.approx(29.5, abs=0.06)

    # Label room: 4 prefix/eos tokens + (text + 2 timestamps) per clip <= max_label_tokens.
    windows = pack_windows(rows[:4], [1.0] * 4, [100] * 4, max_label_tokens=300)
    assert [w.rows for w in windows] == [(0, 1), (2, 3)]


def test_a_share_of_windows_holds_one_clip_labelled_as_plain_text(
    tiny_multilingual_dir: Path,
) -> None:
    from transformers import WhisperProcessor

    rows = _rows(24)
    windows = pack_windows(rows, [10.0] * 24, [3] * 24, single_clip_share=0.25)
    # Windows 3 and 7 (every 4th, evenly spread) hold one clip; the others hold three.
    assert [len(w.rows) for w in windows] == [3, 3, 3, 1, 3, 3, 3, 1, 3, 1]
    assert [r for w in windows for r in w.rows] == list(range(24))  # nothing lost, in order
    assert len(pack_windows(rows, [10.0] * 24, [3] * 24)) == 8

    processor = WhisperProcessor.from_pretrained(tiny_multilingual_dir)
    ds = PackedDataset(rows, windows[2:4], processor, timestamp_fraction=1.0)
    # Several clips: timestamped (all, at fraction 1.0); one clip: plain text.
    assert [ds.timestamped(i) for i in range(2)] == [True, False]


def test_a_language_change_closes_the_window() -> None:
    rows = _rows(2, "zh") + [
        Row(index=2, line=3, audio=None, text="x", language="en"),
        Row(index=3, line=4, audio=None, text="y", language="en"),
    ]
    windows = pack_windows(rows, [2.0] * 4, [3] * 4, language="zh")
    assert [w.rows for w in windows] == [(0, 1), (2, 3)]


def test_packed_labels_are_whisper_timestamped_segments(
    tiny_multilingual_dir: Path, tmp_path: Path
) -> None:
    from transformers import WhisperProcessor

    processor = WhisperProcessor.from_pretrained(tiny_multilingual_dir)
    tok = processor.tokenizer
    rows = []
    for i, (sec, text) in enumerate(((1.01, "你好"), (2.0, "世界"))):
        path = write_tone(tmp_path / f"c{i}.wav", sec, freq=300 + 100 * i)
        rows.append(Row(index=i, line=i + 1, audio=path, text=text, language="zh"))
    windows = pack_windows(rows, [1.01, 2.0], [2, 2], language="zh")
    assert len(windows) == 1
    item = PackedDataset(rows, windows, processor, language="zh", timestamp_fraction=1.0)[0]

    assert item["input_features"].shape == (80, 3000)
    labels = item["labels"]
    names = tok.convert_ids_to_tokens(labels[:3])
    assert names == ["<|startoftranscript|>", "<|zh|>", "<|transcribe|>"]
    assert tok.convert_tokens_to_ids("<|notimestamps|>") not in labels
    assert labels[-1] == tok.eos_token_id
    # A clip ends at its own end (1.01 s, nearest token 1.00); the next starts on the 20 ms
    # boundary after it (1.02 s).
    text = tok.decode(labels, decode_with_timestamps=True, skip_special_tokens=False)
    assert "<|0.00|>你好<|1.00|><|1.02|>世界<|3.02|>" in text, text
    # Plain decoding (what WER/CER scoring sees) is the joined transcript.
    assert tok.decode(labels, skip_special_tokens=True) == "你好世界"

    # At fraction 0.5, every second window is plain text after <|notimestamps|>.
    mixed = PackedDataset(rows, windows * 4, processor, language="zh", timestamp_fraction=0.5)
    assert [mixed.timestamped(i) for i in range(4)] == [False, True, False, True]
    plain = mixed[0]["labels"]
    assert tok.convert_ids_to_tokens(plain[:4])[3] == "<|notimestamps|>"
    assert tok.decode(plain, skip_special_tokens=True) == "你好世界"
    assert not any(t >= tok.convert_tokens_to_ids("<|0.00|>") for t in plain)


def test_plain_text_joins_english_clips_with_a_space(tiny_whisper_dir: Path, tmp_path) -> None:
    from transformers import WhisperProcessor

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    paths = [write_tone(tmp_path / f"c{i}.wav", 0.5) for i in range(2)]
    rows = [Row(index=i, line=i + 1, audio=p, text=t) for i, (p, t) in
            enumerate(zip(paths, ("one two", "three"), strict=True))]  # fmt: skip
    ds = PackedDataset(rows, [Window((0, 1), 1.0)], processor, timestamp_fraction=0.0)
    assert processor.tokenizer.decode(ds[0]["labels"], skip_special_tokens=True) == "one two three"


def test_timestamped_english_segments_start_with_whisper_s_space(
    tiny_whisper_dir: Path, tmp_path
) -> None:
    # As Whisper writes them (" It was"): a model trained on segments without it returns
    # them without, and a transcript's words glue at every segment join.
    from transformers import WhisperProcessor

    tok = (processor := WhisperProcessor.from_pretrained(tiny_whisper_dir)).tokenizer
    paths = [write_tone(tmp_path / f"c{i}.wav", 0.5) for i in range(2)]
    rows = [Row(index=i, line=i + 1, audio=p, text=t) for i, (p, t) in
            enumerate(zip(paths, ("one two", " three"), strict=True))]  # fmt: skip
    labels = PackedDataset(rows, [Window((0, 1), 1.0)], processor, timestamp_fraction=1.0)[0]
    text = tok.decode(labels["labels"], decode_with_timestamps=True, skip_special_tokens=True)
    assert text == "<|0.00|> one two<|0.50|><|0.50|> three<|1.00|>"


def test_audio_of_a_window_is_its_clips_in_order(tiny_whisper_dir: Path, tmp_path: Path) -> None:
    from transformers import WhisperProcessor

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    fe = processor.feature_extractor
    paths = [write_tone(tmp_path / f"c{i}.wav", 0.64, freq=300 + 200 * i) for i in range(2)]
    rows = [Row(index=i, line=i + 1, audio=p, text="a") for i, p in enumerate(paths)]
    item = PackedDataset(rows, [Window((0, 1), 1.28)], processor)[0]
    import soundfile

    joined = np.concatenate([soundfile.read(p, dtype="float32")[0] for p in paths])
    expect = fe(joined, sampling_rate=16_000, return_tensors="np").input_features[0]
    np.testing.assert_allclose(item["input_features"], expect, atol=1e-5)


def test_short_encoder_input_slices_positions_and_leaves_30_s_input_alone(
    tiny_whisper_dir: Path,
) -> None:
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.models.short_window import allow_short_input

    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir).eval()
    enc = model.get_encoder()
    full = torch.randn(1, 80, 3000)
    with torch.no_grad():
        before = enc(full).last_hidden_state
        with pytest.raises(ValueError, match="3000"):
            enc(full[..., :600])
        allow_short_input(model)
        after = enc(full).last_hidden_state
        short = enc(full[..., :600]).last_hidden_state
    assert torch.equal(before, after)
    assert short.shape == (1, 300, 64)
    # Stock settings are back after each call (saved configs stay those of the model).
    assert model.config.max_source_positions == 1500
    assert enc.embed_positions.num_embeddings == 1500


def test_trimmed_collator_cuts_a_batch_to_its_longest_clip(tiny_whisper_dir: Path) -> None:
    from transformers import WhisperProcessor

    from fitwhisper.data.batching import TrimmedCollator
    from fitwhisper.data.features import WhisperCollator

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    base = WhisperCollator(processor, 50257)
    feats = [np.random.rand(80, 3000).astype(np.float32) for _ in range(2)]
    items = [
        {"input_features": feats[0], "labels": [1, 2], "frames": 101},
        {"input_features": feats[1], "labels": [1], "frames": 57},
    ]
    batch = TrimmedCollator(base)(items)
    assert batch["input_features"].shape == (2, 80, 102)  # even: conv stride 2
    np.testing.assert_array_equal(batch["input_features"][0].numpy(), feats[0][:, :102])
    # Evaluation items carry no frame count (Trainer collates them with this collator too):
    # they keep the full 30 s.
    evaluation = [{"input_features": f, "labels": [1]} for f in feats]
    assert TrimmedCollator(base)(evaluation)["input_features"].shape == (2, 80, 3000)


def test_mixed_input_keeps_about_its_share_of_batches_at_30_s(tiny_whisper_dir: Path) -> None:
    """--encoder_input mixed: a batch stays 30 s by a checksum of its labels, so the same
    batch decides the same every time (resume, ranks, workers), and the share holds."""
    from transformers import WhisperProcessor

    from fitwhisper.data.batching import TrimmedCollator, stays_full
    from fitwhisper.data.features import WhisperCollator

    rng = np.random.default_rng(0)
    batches = [[{"labels": list(rng.integers(0, 50_000, size=12))} for _ in range(4)]
               for _ in range(2000)]  # fmt: skip
    kept = [stays_full(b, 0.1) for b in batches]
    assert 0.08 < sum(kept) / len(kept) < 0.12
    assert kept == [stays_full(b, 0.1) for b in batches]  # the same choice again
    assert not any(stays_full(b, 0.0) for b in batches[:50])
    assert all(stays_full(b, 1.0) for b in batches[:50])

    processor = WhisperProcessor.from_pretrained(tiny_whisper_dir)
    feats = np.random.rand(80, 3000).astype(np.float32)
    full = next(b for b, k in zip(batches, kept, strict=True) if k)
    trim = next(b for b, k in zip(batches, kept, strict=True) if not k)
    collate = TrimmedCollator(WhisperCollator(processor, 50257), full_share=0.1)

    def widths(batch):
        return collate([{"input_features": feats, "labels": x["labels"], "frames": 101}
                        for x in batch])["input_features"].shape[-1]  # fmt: skip

    assert widths(full) == 3000 and widths(trim) == 102


def test_a_model_trained_on_trimmed_input_records_it(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import WhisperConfig

    from fitwhisper.cli import main
    from fitwhisper.models.short_window import trained_window

    out = tmp_path / "run"
    argv = ["train", "--model", str(tiny_whisper_dir), "--train_manifest", str(tone_manifest),
            "--output_dir", str(out), "--max_steps", "1", "--per_device_train_batch_size", "2",
            "--report_to", "none", "--encoder_input", "mixed", "--full_window_share", "0.2",
            "-q"]  # fmt: skip
    assert main(argv) == 0
    config = WhisperConfig.from_pretrained(out / "final")
    assert trained_window(config) == "mixed"
    assert config.fitwhisper_encoder_input == {
        "mode": "mixed",
        "full_window_share": 0.2,
        # No held-out clips: the short window was not measured, so auto keeps 30 s.
        "inference_window": "full",
        "why": "not measured: the run had no held-out clips (--eval_manifest)",
    }
    assert trained_window(WhisperConfig.from_pretrained(tiny_whisper_dir)) == "full"


def test_train_with_every_speed_option_runs_and_logs_the_packing(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys
) -> None:
    from fitwhisper.cli import main

    out = tmp_path / "run"
    argv = [
        "train", "--model", str(tiny_whisper_dir), "--train_manifest", str(tone_manifest),
        "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-3", "--report_to", "none", "--group_by_duration",
        "--short_encoder_input", "--attn_implementation", "eager", "--pack_clips",
    ]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    # Six tone clips of 1.0-2.0 s: 9 s in all, one window; two steps of it are two epochs.
    assert "packed 6 clips into 1 window(s) of up to 30 s (6.0 clips per window" in err
    assert "; 1 packed windows; 2 optimizer steps (2.0 epochs)" in err
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    record = (out / "fitwhisper.yaml").read_text()
    # The earlier spelling is recorded as what ran.
    assert "pack_clips: true" in record and "encoder_input: trimmed" in record


def test_evaluation_encodes_short_clips_on_their_length_after_trimmed_training(
    tiny_whisper_dir: Path, tone_manifest: Path
) -> None:
    """auto: a model whose training chose the short window is scored on a window as long as
    each batch's longest clip and a 1 s margin (tones of 1-2 s: 300 frames); one trained on
    30 s windows, or --encoder_window full, keeps 3000 frames. Generation runs on the short
    window too (transformers' generate would pad it back to 30 s)."""
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import evaluate_model
    from fitwhisper.models.generation import configure_generation
    from fitwhisper.models.resolve import load_processor
    from fitwhisper.models.short_window import record_inference_window, record_training_window

    processor = load_processor(str(tiny_whisper_dir))
    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir).eval()
    configure_generation(model, None, "transcribe")
    rows = load_manifest(tone_manifest).rows
    ds = SpeechDataset(rows, processor, language=None, task="transcribe")
    widths: list[int] = []
    model.get_encoder().register_forward_pre_hook(
        lambda m, args, kw: widths.append((args[0] if args else kw["input_features"]).shape[-1]),
        with_kwargs=True,
    )

    def score(**options):
        widths.clear()
        evaluate_model(model, processor, ds, [r.text for r in rows], [r.id for r in rows],
                       language="en", batch_size=3, generation_max_length=4, **options)  # fmt: skip
        return sorted(set(widths))

    assert score() == [3000]  # trained on 30 s windows
    record_training_window(model, "mixed", 0.1)
    assert score() == [3000]  # trained trimmed, short window not measured: 30 s
    record_inference_window(model.config, "short", "measured")
    # Batches of 3 tones: 1.0-1.4 s and 1.6-2.0 s, each and 1 s.
    assert score() == [240, 300]
    assert score(encoder_window="full") == [3000]
    assert score(encoder_window="short") == [240, 300]
