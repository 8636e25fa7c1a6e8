"""The input path (train/input_plan.py): a run resumed with data-loader workers and the
log-mel made by the trainer (`--log_mel device`) trains on the batches of the run without
either; the run plan records the loader's settings with reasons; the data-wait
share reaches each training log, and a GPU run that keeps waiting is told once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from fitwhisper.cli import main
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.data.log_mel import TOLERANCE
from fitwhisper.train.data_wait import WARN_AFTER, WARN_SHARE, DataWait
from fitwhisper.train.input_plan import TARGET_CLIPS_PER_S, decide_input
from fitwhisper.train.run_plan import decide, resolve_options


def _argv(model: Path, manifest: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model",
        str(model),
        "--train_manifest",
        str(manifest),
        "--output_dir",
        str(out),
        "--logging_steps",
        "1",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--save_total_limit",
        "none",
        "--learning_rate",
        "1e-3",
        "--seed",
        "0",
        "--augment",
        "strong",
        "--per_device_train_batch_size",
        "2",
        "--max_steps",
        "4",
        "--no-score_before",
        "-q",
        *extra,
    ]


def _log(run: Path) -> dict[int, dict]:
    state = json.loads((run / "trainer_state.json").read_text())
    return {e["step"]: e for e in state["log_history"] if "loss" in e}


@pytest.mark.slow  # a small run end to end, and its second half again
def test_a_run_resumed_with_workers_and_device_log_mel_trains_on_the_same_batches(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, monkeypatch
) -> None:
    from fitwhisper.train.trainer import DeviceLogMelMixin

    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    waveforms: list[bool] = []  # whether each batch came as waveforms
    prepare = DeviceLogMelMixin._prepare_inputs

    def noting(self, inputs):
        waveforms.append("input_audio" in inputs)
        made = prepare(self, inputs)
        seen.append((made["input_features"].clone(), made["labels"].clone()))
        return made

    monkeypatch.setattr(DeviceLogMelMixin, "_prepare_inputs", noting)
    # 6 clips, batch 2: three steps an epoch, so step 4 is in epoch 1 (augmented anew).
    out = tmp_path / "run"
    argv = _argv(tiny_whisper_dir, tone_manifest, out)
    assert main(argv) == 0
    assert waveforms == [False] * 4 and len(seen) == 4
    plain, batches = _log(out), list(seen)
    plan = json.loads((out / "run_plan.json").read_text())
    assert plan["input_path"]["dataloader_num_workers"] == 0  # a CPU: none, by the plan
    assert plan["input_path"]["log_mel"] == "cpu" and "CPU" in plan["why"]["log_mel"]

    # Steps 3 and 4 again, from checkpoint-2, with two workers drawing the augmentation and
    # the trainer making the log-mel: the same batches, the same losses.
    shutil.rmtree(out / "checkpoint-4")
    shutil.rmtree(out / "final")
    seen.clear()
    waveforms.clear()
    workers = ["--dataloader_num_workers", "2", "--log_mel", "device", "--resume"]
    assert main([*argv, *workers]) == 0
    assert waveforms == [True, True] and len(seen) == 2
    for (features, labels), (want_features, want_labels) in zip(seen, batches[2:], strict=True):
        assert torch.equal(labels, want_labels)
        assert features.shape == want_features.shape
        assert (features - want_features).abs().max() <= TOLERANCE
    resumed = _log(out)
    assert {s: resumed[s]["loss"] for s in (3, 4)} == pytest.approx(
        {s: plain[s]["loss"] for s in (3, 4)}, rel=1e-5
    )
    assert all(0.0 <= e["data_wait_share"] <= 1.0 for e in resumed.values())
    plan = json.loads((out / "run_plan.json").read_text())["input_path"]
    assert plan["dataloader_num_workers"] == 2 and plan["log_mel"] == "device"
    assert plan["dataloader_persistent_workers"] is False  # augmenting: per-epoch workers


def _decide(cuda: bool, cores: int = 16, processes: int = 1, cost: float | None = 0.02, **train):
    given = {k for k in train if k == "dataloader_num_workers"}
    model_cfg, train_cfg, choices = resolve_options(
        ModelConfig(model="offline/base"), DataConfig(), TrainConfig(**train), explicit=given
    )
    asked: list[str] = []

    def timing(log_mel: str) -> float | None:
        asked.append(log_mel)
        return cost

    plan = decide(
        choices,
        model_cfg,
        train_cfg,
        eval_rows=[],
        world_size=processes,
        fsdp=False,
        cuda=cuda,
        cores=cores,
        processes_here=processes,
        clip_cost_s=timing,
    )
    return plan, asked


def test_the_run_plan_sizes_the_loader_from_cores_processes_and_clip_cost() -> None:
    # CPU: no workers, nothing timed, the log-mel made in the loader.
    plan, asked = _decide(cuda=False)
    loader = plan.input_path
    assert (loader.dataloader_num_workers, loader.dataloader_pin_memory, asked) == (0, False, [])
    assert loader.log_mel == "cpu" and "CPU" in plan.why["dataloader_num_workers"]
    # GPU, 20 ms a clip: 400 clips/s need 8 workers; 16 cores for 1 process allow them.
    plan, asked = _decide(cuda=True)
    loader = plan.input_path
    assert asked == ["cpu"] and TARGET_CLIPS_PER_S * 0.02 == 8
    assert (loader.dataloader_num_workers, loader.dataloader_pin_memory) == (8, True)
    assert loader.dataloader_persistent_workers and loader.dataloader_prefetch_factor == 2
    assert "20.0 ms" in plan.why["dataloader_num_workers"] and loader.clip_cost_ms == 20.0
    # 4 processes on those 16 cores: 3 spare each, short of the aim, so the GPU path is named.
    plan, _ = _decide(cuda=True, processes=4)
    assert plan.input_path.dataloader_num_workers == 3
    assert "--log_mel device" in plan.why["dataloader_num_workers"]
    # One core per process: none spare.
    assert _decide(cuda=True, cores=2, processes=2)[0].input_path.dataloader_num_workers == 0
    # An explicit option wins, untimed; augmentation restarts workers each epoch.
    plan, asked = _decide(cuda=True, dataloader_num_workers=1, augment="light")
    assert (plan.input_path.dataloader_num_workers, asked) == (1, [])
    assert plan.why["dataloader_num_workers"] == "--dataloader_num_workers as given"
    assert "--log_mel" in plan.why["log_mel"]


def test_the_input_plan_takes_log_mel_device_as_given_and_refuses_it_with_the_cache() -> None:
    why: dict[str, str] = {}
    cfg = TrainConfig(log_mel="device")
    plan = decide_input(cfg, set(), why, cuda=True, cores=4, processes_here=1, augmenting=False)
    assert plan.log_mel == "device" and why["log_mel"] == "--log_mel as given"
    from fitwhisper.train.input_plan import option_problems

    problems = option_problems(TrainConfig(log_mel="device", cache_encoder_outputs=True))
    assert problems and problems[0].startswith("--log_mel device and --cache_encoder_outputs")


def test_a_stream_keeps_its_readers_and_its_log_mel_in_the_loader() -> None:
    from fitwhisper.errors import ConfigError

    why: dict[str, str] = {}
    kw = {"cuda": True, "cores": 16, "processes_here": 1, "augmenting": False}
    plan = decide_input(TrainConfig(), set(), why, streamed=True, clip_cost_s=None, **kw)
    assert plan.dataloader_num_workers == 0 and "streamed" in why["dataloader_num_workers"]
    with pytest.raises(ConfigError) as e:
        decide_input(TrainConfig(log_mel="device"), set(), {}, streamed=True, **kw)
    assert e.value.message.startswith("--log_mel device: this training source is streamed")


def test_a_gpu_run_that_keeps_waiting_for_data_is_told_once_with_the_fix() -> None:
    meter = DataWait()
    high = WARN_SHARE + 0.1
    said = [meter.warning(high, cuda=True, workers=2, cores=8) for _ in range(WARN_AFTER + 2)]
    assert said[: WARN_AFTER - 1] == [None] * (WARN_AFTER - 1)
    assert said[WARN_AFTER - 1] is not None and said[WARN_AFTER:] == [None, None]
    assert "--dataloader_num_workers 4" in said[WARN_AFTER - 1]
    assert "--log_mel device" in said[WARN_AFTER - 1]
    # A dip resets the count; a CPU run is never told (its wait is the plan's choice).
    other = DataWait()
    shares = [high, high, 0.0, high, high]
    assert all(other.warning(x, cuda=True, workers=0, cores=8) is None for x in shares)
    assert all(DataWait().warning(1.0, cuda=False, workers=0, cores=8) is None for _ in range(5))
