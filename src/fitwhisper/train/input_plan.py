"""How training clips reach the model, decided once per run (RUN/run_plan.json, "input_path"):
data-loader workers, pinned memory, persistent workers, prefetching and where the log-mel is
made, each with its reason. An option the user gave wins.

On a CPU the model's arithmetic takes every core, so clips are made in the training process
between steps (bench/RESULTS-input-path.md: the input path there supplies several times
what a step takes). On a GPU the step is fast and the input path must keep up: the workers
are sized from the cores each process may use, the processes per machine and the measured
cost of one clip (decoding, augmentation, log-mel, labels), aiming at `TARGET_CLIPS_PER_S`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

# Clips a second the loader should supply per GPU: the estimate of what base to
# turbo train on trimmed 5 s clips ("hundreds a second"); not yet measured on a GPU.
TARGET_CLIPS_PER_S = 400
MAX_WORKERS = 8  # more rarely help one GPU and each holds a copy of the dataset's state
PREFETCH_BATCHES = 2  # per worker (torch's default): enough to hide a slow clip
MEASURED_CLIPS = 8  # training clips timed to find the cost of one


@dataclass(frozen=True)
class InputPlan:
    """The data loader's settings (Seq2SeqTrainingArguments' names) and the log-mel's place."""

    dataloader_num_workers: int = 0
    dataloader_pin_memory: bool = False
    dataloader_persistent_workers: bool = False
    dataloader_prefetch_factor: int | None = None
    log_mel: str = "cpu"  # cpu: made in the data loader; device: by the trainer, per batch
    clip_cost_ms: float | None = None  # measured cost of one clip, when the plan needed it

    def training_arguments(self) -> dict:
        return {
            "dataloader_num_workers": self.dataloader_num_workers,
            "dataloader_pin_memory": self.dataloader_pin_memory,
            "dataloader_persistent_workers": self.dataloader_persistent_workers,
            "dataloader_prefetch_factor": self.dataloader_prefetch_factor,
        }


def decide_input(
    train_cfg,
    given: frozenset[str] | set[str],
    why: dict[str, str],
    *,
    cuda: bool,
    cores: int,
    processes_here: int,
    augmenting: bool,
    clip_cost_s=None,
    streamed: bool = False,
) -> InputPlan:
    """The input path for this machine; reasons go into `why`.

    Args:
        given: the options the user chose (an explicit --dataloader_num_workers wins).
        cores: the cores this process may run on; processes_here: training processes
            on this machine, which share them.
        clip_cost_s: a callable measuring one clip's cost in seconds, given where the
            log-mel is made; called only when the workers are planned from it (a GPU, no
            --dataloader_num_workers).
        streamed: the training data is a stream (train/streamed.py), whose readers are
            the processes times --dataloader_num_workers, recorded in each checkpoint: the
            option's workers, not planned ones; its clips are featurised in the loader.

    Raises:
        ConfigError: --log_mel device with streamed training data.
    """
    if streamed and train_cfg.log_mel == "device":
        from fitwhisper.errors import ConfigError

        raise ConfigError(
            "--log_mel device: this training source is streamed, and streamed clips are "
            "featurised in the data loader only",
            hint="use --log_mel cpu (or auto) with streamed data",
        )
    log_mel = _log_mel(train_cfg.log_mel, cuda, why)
    cost = None
    if "dataloader_num_workers" in given:
        workers = train_cfg.dataloader_num_workers
        why["dataloader_num_workers"] = "--dataloader_num_workers as given"
    elif streamed:
        workers = train_cfg.dataloader_num_workers
        why["dataloader_num_workers"] = (
            "streamed data: its readers are the processes times --dataloader_num_workers "
            "and each checkpoint records where each stopped, so the option decides"
        )
    elif not cuda:
        workers = 0
        why["dataloader_num_workers"] = (
            "CPU: the model's arithmetic takes every core, so clips are made in the training "
            "process between steps (bench/RESULTS-input-path.md)"
        )
    else:
        cost = clip_cost_s(log_mel) if clip_cost_s is not None else None
        workers = _gpu_workers(cores, processes_here, cost, log_mel, why)
    why["dataloader_pin_memory"] = (
        "GPU: page-locked batches copy to the GPU without a staging copy"
        if cuda
        else "CPU: nothing is copied to a device"
    )
    persistent = workers > 0 and not augmenting
    if workers == 0:
        why["dataloader_persistent_workers"] = "no workers"
    elif augmenting:
        why["dataloader_persistent_workers"] = (
            "off: the workers read the epoch of each clip's augmentation when they start "
            "(data/augment.py), so they start anew each epoch"
        )
    else:
        why["dataloader_persistent_workers"] = "kept between epochs and evaluations"
    prefetch = PREFETCH_BATCHES if workers > 0 else None
    why["dataloader_prefetch_factor"] = (
        f"{PREFETCH_BATCHES} batches queued per worker" if workers else "no workers"
    )
    return InputPlan(
        dataloader_num_workers=workers,
        dataloader_pin_memory=cuda,
        dataloader_persistent_workers=persistent,
        dataloader_prefetch_factor=prefetch,
        log_mel=log_mel,
        clip_cost_ms=None if cost is None else round(cost * 1000, 2),
    )


def option_problems(train_cfg) -> list[str]:
    """--log_mel device with what cannot take waveforms, known before anything loads."""
    if train_cfg.log_mel == "device" and train_cfg.cache_encoder_outputs:
        return [
            "--log_mel device and --cache_encoder_outputs: the cache runs the encoder over "
            "each clip's features once, before training, in the data loader; use --log_mel "
            "cpu (or auto) with the cache"
        ]
    return []


def machine_cores() -> int:
    """The cores this process may run on (its affinity where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def processes_on_this_machine() -> int:
    """Training processes on this machine (torchrun's and accelerate's LOCAL_WORLD_SIZE)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world))


def clip_cost(dataset, n: int = MEASURED_CLIPS) -> float | None:
    """Seconds one training item costs to make (decode, augment, features, labels): the
    median of the first `n` after one to warm up; None for an empty dataset."""
    count = min(n + 1, len(dataset))
    if count == 0:
        return None
    times = []
    for i in range(count):
        start = time.perf_counter()
        dataset[i]
        times.append(time.perf_counter() - start)
    times = sorted(times[1:] or times)
    return times[len(times) // 2]


def _gpu_workers(
    cores: int, processes_here: int, cost: float | None, log_mel: str, why: dict[str, str]
) -> int:
    spare = max(cores // max(processes_here, 1) - 1, 0)  # the training process keeps one
    if spare == 0:
        why["dataloader_num_workers"] = (
            f"GPU, but {cores} core(s) for {processes_here} process(es) leave none spare: clips "
            "are made between steps; --log_mel device moves the log-mel to the GPU"
        )
        return 0
    if cost is None or cost <= 0:
        workers = min(spare, MAX_WORKERS)
        why["dataloader_num_workers"] = (
            f"GPU: {workers} of the {spare} spare core(s) per process (no clip was timed)"
        )
        return workers
    needed = math.ceil(TARGET_CLIPS_PER_S * cost)
    workers = max(1, min(spare, needed, MAX_WORKERS))
    supply = workers / cost
    reason = (
        f"GPU: a clip takes {cost * 1000:.1f} ms to make, so {workers} worker(s) of the "
        f"{spare} spare core(s) per process supply about {supply:.0f} clips/s (aim "
        f"{TARGET_CLIPS_PER_S})"
    )
    if supply < TARGET_CLIPS_PER_S and log_mel == "cpu":
        reason += "; short of it: --log_mel device makes the log-mel on the GPU instead"
    why["dataloader_num_workers"] = reason
    return workers


def _log_mel(asked: str, cuda: bool, why: dict[str, str]) -> str:
    if asked != "auto":
        why["log_mel"] = "--log_mel as given"
        return asked
    why["log_mel"] = (
        "auto: transformers' feature extractor in the data loader, until the GPU path is "
        "measured on a GPU (--log_mel device makes each batch's log-mel there)"
        if cuda
        else "auto on a CPU: the same cores make it either way; in the data loader"
    )
    return "cpu"
