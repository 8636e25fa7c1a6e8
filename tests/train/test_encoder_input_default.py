"""`--encoder_input auto` (the default): what each run trains on, decided before anything
loads, and what the log says it saves."""

from __future__ import annotations

import re

import pytest

from fitwhisper.cli import main
from fitwhisper.data.training_data import describe_trimming


class _Validated(Exception):
    """Raised in place of validation: the options as train() would run them."""


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch, tiny_whisper_dir, tmp_path):
    """Runs `fitwhisper train` with the given flags up to validation; returns --encoder_input
    as train() resolved it."""
    import fitwhisper.train.validation as validation

    seen: list = []

    def capture(model_cfg, data_cfg, train_cfg, **kwargs) -> None:
        seen.append(train_cfg)
        raise _Validated

    monkeypatch.setattr(validation, "validate", capture)

    def run(*flags: str) -> str:
        with pytest.raises(_Validated):
            main(["train", "--model", str(tiny_whisper_dir), "--train_manifest", "t.jsonl",
                  "--output_dir", str(tmp_path / "run"), *flags])  # fmt: skip
        cfg = seen.pop()
        assert not cfg.short_encoder_input  # folded into encoder_input
        return cfg.encoder_input

    return run


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), "mixed"),
        (("--use_lora",), "mixed"),
        (("--freeze_encoder",), "full"),  # a frozen encoder cannot learn the short window
        (("--freeze_encoder", "--cache_encoder_outputs"), "full"),
        (("--short_encoder_input",), "trimmed"),  # the earlier spelling
        (("--freeze_encoder", "--encoder_input", "mixed"), "mixed"),  # asked for: kept
        (("--encoder_input", "full"), "full"),
        (("--encoder_input", "trimmed"), "trimmed"),
    ],
)
def test_auto_is_mixed_unless_the_encoder_is_frozen(resolved, flags, expected) -> None:
    assert resolved(*flags) == expected


def _items(durations, window_share=0.0):
    """Training items as training_data makes them: clips alone, or clips and windows."""
    from types import SimpleNamespace

    from fitwhisper.data.batching import WithDurations
    from fitwhisper.data.mixed_windows import ClipsAndWindows
    from fitwhisper.data.packing import pack_windows

    if not window_share:
        return WithDurations(list(durations), durations)
    rows = [SimpleNamespace(language=None) for _ in durations]
    windows = pack_windows(rows, durations, [5] * len(durations), several_share=window_share)
    return ClipsAndWindows(SimpleNamespace(rows=rows), None, windows, durations,
                           by_duration=False)  # fmt: skip


def test_the_log_line_says_what_the_trimming_saves() -> None:
    from fitwhisper.config import TrainConfig

    cfg = TrainConfig(per_device_train_batch_size=8)
    line = describe_trimming("mixed", _items([3.0] * 40), cfg, 0.1)  # 0.1 x 3000 + 0.9 x 300
    assert "10% of them kept at 30 s" in line and "about 19%" in line and "5.3x less" in line
    assert "kept at 30 s" not in describe_trimming("trimmed", _items([3.0] * 40), cfg, 0.0)
    # 40 clips of 2.5 s in one batch of 64, clips 33-39 in a window: all of it at 30 s.
    cfg = TrainConfig(per_device_train_batch_size=64)
    windows = describe_trimming("mixed", _items([2.5] * 40, 0.03), cfg, 0.0)
    assert "those holding a window of several clips" in windows and "about 85%" in windows
    assert "clips average 2.5 s" in windows  # the clips', not the items' (a window is 30 s)


def test_the_log_line_replays_the_batching_the_trainer_will_use() -> None:
    from fitwhisper.config import TrainConfig
    from fitwhisper.data.frame_share import frame_share

    # 16 clips of 20 s among 64 of 2 s, batches of 4: in random order most batches draw a
    # long clip and run at 20 s; grouped by duration (within the sampler's megabatches) the
    # long clips share batches, and the log line says so.
    durations = [2.0] * 64 + [20.0] * 16

    def share(**options) -> int:
        cfg = TrainConfig(per_device_train_batch_size=4, **options)
        line = describe_trimming("trimmed", _items(durations), cfg, 0.0)
        return int(re.search(r"about (\d+)% of the frames", line).group(1))

    assert share(group_by_duration=True) < 0.7 * share()
    # With windows, the run's own items give what the demo works out from the clips alone.
    clips = [2.0 + (i % 7) * 0.5 for i in range(200)]
    cfg = TrainConfig(per_device_train_batch_size=8)
    expected = frame_share(clips, [5] * 200, 8, 0.05, 0.03)
    assert f"about {expected:.0%} " in describe_trimming("mixed", _items(clips, 0.03), cfg, 0.05)


def test_export_notes_the_30_s_window_only_for_a_model_trained_trimmed(tmp_path) -> None:
    import json

    from fitwhisper.models.short_window import CONFIG_KEY, thirty_second_note

    def model(recorded) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        config = {"model_type": "whisper"} | ({CONFIG_KEY: recorded} if recorded else {})
        (folder / "config.json").write_text(json.dumps(config))
        return str(folder)

    note = thirty_second_note(model({"mode": "mixed", "full_window_share": 0.05}))
    assert "--encoder_input mixed" in note and "--encoder_window full" in note
    assert "--encoder_input trimmed" in thirty_second_note(model({"mode": "trimmed"}))
    assert thirty_second_note(model({"mode": "full"})) is None
    assert thirty_second_note(model(None)) is None
    assert thirty_second_note("openai/whisper-small") is None  # a Hub id: nothing recorded


def test_the_short_window_is_kept_within_one_point_of_30_s() -> None:
    from fitwhisper.train.window_choice import choose

    assert choose(0.20, 0.20) == "short"
    assert choose(0.20, 0.209) == "short"
    assert choose(0.20, 0.215) == "full"
    assert choose(0.20, 0.05) == "short"


def test_the_final_evaluation_scores_both_windows_and_records_the_choice(
    tiny_whisper_dir, tone_manifest, tmp_path
) -> None:
    import json

    from fitwhisper.train.window_choice import choose

    out = tmp_path / "run"
    code = main(["train", "--model", str(tiny_whisper_dir), "--train_manifest",
                 str(tone_manifest), "--eval_manifest", str(tone_manifest), "--output_dir",
                 str(out), "--max_steps", "1", "--per_device_train_batch_size", "3",
                 "--generation_max_length", "6", "--report_to", "none", "-q"])  # fmt: skip
    assert code == 0
    full = json.loads((out / "eval" / "metrics.json").read_text())
    short = json.loads((out / "eval" / "short_window" / "metrics.json").read_text())
    assert full["n_utterances"] == short["n_utterances"] == 6
    recorded = json.loads((out / "final" / "config.json").read_text())["fitwhisper_encoder_input"]
    assert recorded["mode"] == "mixed"
    assert recorded["inference_window"] == choose(full["wer"], short["wer"])
    assert f"{100 * short['wer']:.2f}% on the short window" in recorded["why"]
