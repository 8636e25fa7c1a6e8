"""Memory watch: a short CPU run's TensorBoard events and log history hold the
memory figures of every logging step."""

from __future__ import annotations

from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.memory.watch import memory_figures
from fitwhisper.train import train


def test_training_logs_memory_to_tensorboard(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(
        ModelConfig(model=str(tiny_whisper_dir)),
        DataConfig(),
        TrainConfig(
            output_dir=str(out),
            train_manifest=str(tone_manifest),
            per_device_train_batch_size=3,
            max_steps=4,
            logging_steps=2,
            eval_strategy="no",
            save_strategy="no",
            report_to="tensorboard",
            seed=0,
        ),
    )
    events = EventAccumulator(str(out / "logs"))
    events.Reload()
    tags = events.Tags()["scalars"]
    for tag in ("train/mem_rss_mib", "train/mem_rss_peak_mib"):
        assert tag in tags, tags
        values = [e.value for e in events.Scalars(tag)]
        assert [e.step for e in events.Scalars(tag)] == [2, 4]
        assert all(v > 0 for v in values)
    rss = [e.value for e in events.Scalars("train/mem_rss_mib")]
    peak = [e.value for e in events.Scalars("train/mem_rss_peak_mib")]
    assert all(p >= r for p, r in zip(peak, rss, strict=True))

    import json

    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = [h for h in history if "loss" in h]
    assert logged and all(h["mem_rss_mib"] > 0 for h in logged)


def test_memory_figures_on_this_machine() -> None:
    figures = memory_figures()
    # Linux: current and peak RSS; a few hundred MiB at least for a process holding torch.
    assert figures["mem_rss_peak_mib"] >= figures["mem_rss_mib"] > 50
