"""What a person sees while a run trains: one readable line per logging step, in place of
the dictionaries Trainer prints (PrinterCallback, ProgressCallback), and a progress bar
when stderr is a terminal.

    step 40/400 · epoch 0.50 · loss 1.365 · lr 1.0e-05 · 21.3 clips/s · data wait 3%
        · 0:12:10 left · memory 5.10 GiB of 6.00 planned      (one line)
    step 40/400 · eval WER 18.20% · eval loss 0.412

Only the console changes: TensorBoard and W&B still receive every figure of the logs, and
this callback adds `clips_per_second` to them (and to trainer_state.json's log history);
`data_wait_share` comes from the trainer (data_wait.py).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import time
from pathlib import Path

from transformers import TrainerCallback

log = logging.getLogger(__name__)

EVAL_RATES = ("wer", "cer", "mer")


class ConsoleLog(TrainerCallback):
    """One line per log; a tqdm bar on a terminal (`bar`), plain lines otherwise.

    Args:
        clips_per_step: clips an optimizer step takes over all processes (the effective
            batch), for the clips per second.
        planned_mib: the memory plan's predicted peak per GPU, when the run follows one.
        bar: show a progress bar (a person at a terminal).
    """

    def __init__(self, clips_per_step: int, planned_mib: float | None = None, bar: bool = False):
        self.clips_per_step = clips_per_step
        self.planned_mib = planned_mib
        self.bar_wanted = bar
        self.bar = None
        self._last: tuple[float, int] | None = None
        self._start: tuple[float, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        now = time.monotonic()
        self._start = self._last = (now, state.global_step)
        if self.bar_wanted and state.is_world_process_zero:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        if "loss" in logs:
            rate = self._clip_rate(state.global_step)
            if rate is not None:
                logs["clips_per_second"] = rate
                if state.log_history and state.log_history[-1].get("step") == state.global_step:
                    state.log_history[-1]["clips_per_second"] = rate
        if not state.is_world_process_zero:
            return
        line = format_line(
            logs, state.global_step, state.max_steps, self._left(state), self.planned_mib
        )
        if line is None:
            return
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            log.info("%s", line)

    def on_evaluate(self, args, state, control, **kwargs):
        # The next training line's clips per second counts training time only.
        self._last = (time.monotonic(), state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _clip_rate(self, step: int) -> float | None:
        now = time.monotonic()
        last_time, last_step = self._last or (now, step)
        self._last = (now, step)
        if step <= last_step or now <= last_time:
            return None
        return (step - last_step) * self.clips_per_step / (now - last_time)

    def _left(self, state) -> float | None:
        """Seconds to the last step at the pace so far (evaluations included)."""
        if self._start is None or state.global_step <= self._start[1]:
            return None
        per_step = (time.monotonic() - self._start[0]) / (state.global_step - self._start[1])
        return per_step * max(state.max_steps - state.global_step, 0)


def format_line(
    logs: dict, step: int, total: int, left_s: float | None, planned_mib: float | None
) -> str | None:
    """The console line of one Trainer log (training, evaluation or the end's summary)."""
    head = f"step {step}/{total}"
    if "loss" in logs:
        parts = [head]
        if logs.get("epoch") is not None:
            parts.append(f"epoch {logs['epoch']:.2f}")
        parts.append(f"loss {logs['loss']:.4g}")
        if logs.get("learning_rate") is not None:
            parts.append(f"lr {logs['learning_rate']:.1e}")
        if logs.get("clips_per_second") is not None:
            parts.append(f"{logs['clips_per_second']:.3g} clips/s")
        if logs.get("data_wait_share") is not None:
            parts.append(f"data wait {logs['data_wait_share']:.0%}")
        if left_s is not None:
            parts.append(f"{datetime.timedelta(seconds=round(left_s))} left")
        if (memory := _memory(logs, planned_mib)) is not None:
            parts.append(memory)
        return " · ".join(parts)
    rates = [k for k in EVAL_RATES if f"eval_{k}" in logs]
    if rates or "eval_loss" in logs:
        parts = [head] + [f"eval {k.upper()} {100 * logs[f'eval_{k}']:.2f}%" for k in rates]
        if "eval_loss" in logs:
            parts.append(f"eval loss {logs['eval_loss']:.4g}")
        return " · ".join(parts)
    if "train_runtime" in logs:
        took = datetime.timedelta(seconds=round(logs["train_runtime"]))
        loss = f", mean loss {logs['train_loss']:.4g}" if "train_loss" in logs else ""
        return f"trained to step {step} in {took}{loss}"
    return None


def _memory(logs: dict, planned_mib: float | None) -> str | None:
    """GPU peak (allocated) where CUDA runs, else the process's resident memory."""
    mib = logs.get("mem_peak_allocated_mib")
    what = "memory"
    if mib is None:
        mib, what = logs.get("mem_rss_mib"), "memory (RSS)"
    if mib is None:
        return None
    text = f"{what} {mib / 1024:.2f} GiB"
    if planned_mib:
        text += f" of {planned_mib / 1024:.2f} planned"
    return text


def planned_peak_mib(plan_file: str | None) -> float | None:
    """The predicted peak (MiB) of the plan a run follows (`--plan FILE`), if readable."""
    if not plan_file:
        return None
    try:
        gib = json.loads(Path(plan_file).read_text(encoding="utf-8")).get("predicted_gib")
    except (OSError, ValueError, AttributeError):
        return None
    return float(gib) * 1024 if isinstance(gib, (int, float)) else None
