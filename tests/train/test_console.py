"""The training log a person reads: one line per logging step (step of total, epoch, loss,
learning rate, clips per second, the share of time waiting for data, time left, memory
against the plan), the evaluation's
metric on its own line, a progress bar only on a terminal, and never Trainer's raw
dictionaries."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.conftest import REPO

from fitwhisper.train.console import format_line

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
}
# The line of a training log, as a person reads it.
STEP_LINE = re.compile(
    r"^step (\d+)/(\d+) · epoch \d+\.\d\d · loss \d+(\.\d+)? · lr \d\.\de[-+]\d\d · "
    r"\d+(\.\d+)?(e-\d+)? clips/s · data wait \d+% · \d+:\d\d:\d\d left · "
    r"memory (\(RSS\) )?\d+\.\d\d GiB$"
)
EVAL_LINE = re.compile(r"^step (\d+)/(\d+) · eval WER \d+\.\d\d% · eval loss \d+(\.\d+)?$")


def test_each_kind_of_log_has_its_line() -> None:
    train = {
        "loss": 1.3651,
        "learning_rate": 1e-5,
        "epoch": 0.5,
        "clips_per_second": 21.34,
        "data_wait_share": 0.034,
        "mem_peak_allocated_mib": 5222.0,
        "grad_norm": 20.84,
    }
    assert format_line(train, 40, 400, 730.4, 6144.0) == (
        "step 40/400 · epoch 0.50 · loss 1.365 · lr 1.0e-05 · 21.3 clips/s · data wait 3%"
        " · 0:12:10 left · memory 5.10 GiB of 6.00 planned"
    )
    evals = {"eval_loss": 0.4121, "eval_wer": 0.182, "eval_wer_raw": 0.2, "eval_runtime": 3.0}
    assert format_line(evals, 40, 400, None, None) == (
        "step 40/400 · eval WER 18.20% · eval loss 0.4121"
    )
    done = {"train_runtime": 3725.2, "train_loss": 0.91, "train_samples_per_second": 9.0}
    assert format_line(done, 400, 400, None, None) == (
        "trained to step 400 in 1:02:05, mean loss 0.91"
    )
    assert format_line({"total_flos": 1.0}, 1, 2, None, None) is None


def check_plain_log(text: str, steps: int, evals: int) -> None:
    """A log with one readable line per logging step and evaluation, and no dictionaries."""
    lines = text.splitlines()
    step_lines = [m for line in lines if (m := STEP_LINE.match(line.strip()))]
    assert [int(m.group(1)) for m in step_lines] == list(range(1, steps + 1)), text
    assert {int(m.group(2)) for m in step_lines} == {steps}
    assert len([line for line in lines if EVAL_LINE.match(line.strip())]) == evals, text
    assert "{'loss'" not in text and "{'eval_loss'" not in text and "'train_runtime'" not in text
    assert re.search(r"^trained to step \d+ in \d+:\d\d:\d\d, mean loss ", text, re.M)


def test_on_a_terminal_the_lines_come_with_a_progress_bar(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    argv = [
        sys.executable,
        "-m",
        "fitwhisper",
        "train",
        "--model",
        str(tiny_whisper_dir),
        "--train_manifest",
        str(tone_manifest),
        "--eval_manifest",
        str(tone_manifest),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "2",
        "--logging_steps",
        "1",
        "--eval_strategy",
        "steps",
        "--eval_steps",
        "2",
        "--save_strategy",
        "no",
        "--per_device_train_batch_size",
        "3",
        "--generation_max_length",
        "8",
        "--score_before",
        "false",
    ]
    master, slave = pty.openpty()
    # A terminal 120 columns wide: tqdm draws nothing on one of zero columns.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        ready = select.select([master], [], [], 1.0)[0]
        if ready:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the child closed the terminal
                chunk = b""
            seen += chunk
            if not chunk and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait() == 0, seen.decode(errors="replace")[-3000:]
    text = seen.decode("utf-8", errors="replace")
    # tqdm redraws its bar in place with carriage returns; the lines are printed above it.
    assert re.search(r"\d+/2 \[", text), text
    lines = re.sub(r"\r(?!\n)", "\n", text.replace("\r\n", "\n"))
    check_plain_log(lines, steps=2, evals=1)
