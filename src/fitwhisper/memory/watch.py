"""Memory watched while training: a TrainerCallback that adds memory figures to
every training log, so they reach the console log, TensorBoard (RUN/logs, under train/)
and RUN/trainer_state.json.

On CUDA: `mem_peak_allocated_mib` and `mem_peak_reserved_mib`, the peaks of
`torch.cuda.max_memory_allocated` / `max_memory_reserved` since the previous log (the
peaks are reset at each log). On every device: `mem_rss_mib`, the process's resident
memory now, and `mem_rss_peak_mib`, its peak since the process started (VmHWM; Linux
cannot reset it without privileges, so it is a running peak). Read from /proc/self/status
where there is one, else from `resource.getrusage`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import TrainerCallback

log = logging.getLogger(__name__)

MIB = 2**20


class MemoryWatch(TrainerCallback):
    """Adds mem_* figures (MiB) to each training log and logs them at DEBUG."""

    def on_train_begin(self, args, state, control, **kwargs):
        _reset_cuda_peaks()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None or "loss" not in logs:  # training logs only, not eval or summary
            return
        figures = memory_figures()
        _reset_cuda_peaks()
        logs.update(figures)
        # Trainer appended a copy of the logs to the history before the callbacks ran.
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(figures)
        # Debug only: train/console.py's line shows the memory beside the loss.
        log.debug(
            "step %d memory: %s",
            state.global_step,
            ", ".join(
                f"{k.removeprefix('mem_').removesuffix('_mib')} {v:.0f} MiB"
                for k, v in figures.items()
            ),
        )


def memory_figures() -> dict[str, float]:
    """Memory figures of this process now, in MiB (CUDA peaks since the last reset)."""
    figures: dict[str, float] = {}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        figures["mem_peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
        figures["mem_peak_reserved_mib"] = torch.cuda.max_memory_reserved() / MIB
    rss, peak = _rss_bytes()
    if rss is not None:
        figures["mem_rss_mib"] = rss / MIB
    if peak is not None:
        figures["mem_rss_peak_mib"] = peak / MIB
    return figures


def _reset_cuda_peaks() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def _rss_bytes() -> tuple[int | None, int | None]:
    """(current RSS, peak RSS) of this process in bytes; None where not readable."""
    status = Path("/proc/self/status")
    if status.is_file():
        fields = {}
        for line in status.read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024  # reported in kB
        return fields.get("VmRSS"), fields.get("VmHWM")
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return None, peak if sys.platform == "darwin" else peak * 1024  # macOS: bytes
    except (ImportError, OSError):
        return None, None
