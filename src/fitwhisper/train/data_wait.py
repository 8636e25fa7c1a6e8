"""The share of training time spent waiting for data (`data_wait_share` in each training
log, the console line and TensorBoard): the time the trainer spends drawing the step's
batches from the data loader (`get_batch_samples`), over the wall time since the last
training log, evaluations left out.

On a GPU a run that waits more than `WARN_SHARE` in `WARN_AFTER` logs in a row says so once,
with the fix: more data-loader workers, or the log-mel made on the GPU. On a CPU the wait is
the cost of making clips in the training process, which the run plan chose there
(train/input_plan.py), so nothing is said.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

WARN_SHARE = 0.2  # of the step time: above it the GPU idles a fifth of the run
WARN_AFTER = 3  # training logs in a row


class DataWait:
    """Time waited for data since the last training log, and the warning's state."""

    def __init__(self) -> None:
        self.waited_s = 0.0
        self.since = time.perf_counter()
        self.over = 0  # training logs in a row above WARN_SHARE
        self.warned = False

    def add(self, seconds: float) -> None:
        self.waited_s += seconds

    def restart(self) -> None:
        """A new stretch: after a training log, and after an evaluation (not training time)."""
        self.waited_s, self.since = 0.0, time.perf_counter()

    def share(self) -> float | None:
        """The share of the wall time since the stretch began spent waiting; then restarts."""
        wall = time.perf_counter() - self.since
        waited = self.waited_s
        self.restart()
        return min(waited / wall, 1.0) if wall > 0 else None

    def warning(self, share: float, *, cuda: bool, workers: int, cores: int) -> str | None:
        """The one warning of a run that keeps waiting, when this log makes it due."""
        self.over = self.over + 1 if share > WARN_SHARE else 0
        if self.warned or not cuda or self.over < WARN_AFTER:
            return None
        self.warned = True
        more = max(workers * 2, 2)
        return (
            f"the GPU waited for data {share:.0%} of the training time in the last "
            f"{WARN_AFTER} logged stretches (more than {WARN_SHARE:.0%}): give the data loader "
            f"more workers (--dataloader_num_workers {more}; {workers} now, {cores} cores "
            "here), or make the log-mel on the GPU (--log_mel device)"
        )


class DataWaitMixin:
    """Put before a Trainer class: times the drawing of each step's batches and adds
    `data_wait_share` to each training log."""

    def get_batch_samples(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return super().get_batch_samples(*args, **kwargs)
        finally:
            self._data_wait().add(time.perf_counter() - start)

    def log(self, logs, *args, **kwargs):
        meter = self._data_wait()
        if "loss" in logs:
            share = meter.share()
            if share is not None:
                logs["data_wait_share"] = round(share, 4)
                warning = meter.warning(
                    share,
                    cuda=self.args.device.type == "cuda",
                    workers=self.args.dataloader_num_workers,
                    cores=_cores(),
                )
                if warning is not None:
                    log.warning("%s", warning)
        super().log(logs, *args, **kwargs)
        if any(k.startswith("eval_") for k in logs):
            meter.restart()  # the evaluation's time is not training time

    def _data_wait(self) -> DataWait:
        if getattr(self, "_data_wait_meter", None) is None:
            self._data_wait_meter = DataWait()
        return self._data_wait_meter


def _cores() -> int:
    from fitwhisper.train.input_plan import machine_cores

    return machine_cores()
