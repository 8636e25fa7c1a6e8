"""Data at scale on this CPU: does the streamed input path keep its cost flat as rows grow?

    PYTHONPATH=src python bench/data_scale.py --rows 10000 100000 --out table.md

For each size, a shard folder of that many short generated clips (0.3-0.6 s tones, each its
own FLAC, written by `fitwhisper shard` from a JSONL manifest) and, on it:
- `train` (tiny random Whisper, streamed, 2 steps of batch 4, no checkpoint): seconds from
  launch to the first step, and the peak RSS of the process;
- `check-data` (decodes every clip): peak RSS, and seconds of a second check (its clips
  known from the first, decoded again: none).
Then, on the smaller folder: clips per second of the streamed input path alone (decode,
log-mel, labels; a DataLoader of batch 8) by data-loader workers, and the seconds a
`train --resume` takes to its first step when resumed at an early and a late step.
Peak RSS is polled every 20 ms over the process and its children (psutil).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
TINY_SPEC = "offline/tiny.en"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--work", default=None, help="Keep the shard folders here (reused).")
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--late_step", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="data-scale-"))
    model = _tiny_model(work / "tiny")
    lines = [
        f"`python bench/data_scale.py --rows {' '.join(map(str, args.rows))}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        "| rows | train: s to first step | train: peak RSS MiB | check-data: peak RSS MiB "
        "| check-data: s | again: s |",
        "|---|---|---|---|---|---|",
    ]
    folders = {}
    for n in args.rows:
        folders[n] = _shards(work, n)
        first_step, train_rss = _timed_first_step(_train(model, folders[n], work / f"run-{n}"))
        check_s, check_rss = _run_peak(_cli("check-data", str(folders[n]), "-q"))
        again_s, _ = _run_peak(_cli("check-data", str(folders[n]), "-q"))
        lines.append(
            f"| {n:,} | {first_step:.1f} | {train_rss:.0f} | {check_rss:.0f} | {check_s:.1f} "
            f"| {again_s:.1f} |"
        )
        print(lines[-1], flush=True)
    small = folders[min(args.rows)]
    lines += ["", "| data-loader workers | streamed input path, clips/s |", "|---|---|"]
    for w in args.workers:
        lines.append(f"| {w} | {_input_rate(small, model, w):.0f} |")
        print(lines[-1], flush=True)
    lines += ["", "| resumed at step | s to its first step |", "|---|---|"]
    for step in (2, args.late_step):
        lines.append(
            f"| {step} | {_resume_time(model, small, work / f'resume-{step}', step):.1f} |"
        )
        print(lines[-1], flush=True)
    table = "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


def _tiny_model(folder: Path) -> Path:
    """The test suite's tiny random Whisper (real tokenizer and front end)."""
    if (folder / "config.json").is_file():
        return folder
    sys.path.insert(0, str(REPO))
    from tests.conftest import _save_tiny_whisper

    from fitwhisper.models.resolve import load_processor

    return _save_tiny_whisper(TINY_SPEC, load_processor(TINY_SPEC), folder)


def _shards(work: Path, n: int) -> Path:
    """n clips of 0.3-0.6 s, each its own FLAC, written as shards of about 8 MB."""
    import soundfile as sf

    out = work / f"shards-{n}"
    if (out / "index.jsonl").is_file():
        return out
    clips = work / f"clips-{n}"
    clips.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with (work / f"train-{n}.jsonl").open("w") as manifest:
        for i in range(n):
            seconds = 0.3 + 0.3 * rng.random()
            t = np.arange(int(seconds * 16000)) / 16000
            tone = 0.3 * np.sin(2 * np.pi * (200 + i % 500) * t) + 0.01 * rng.standard_normal(
                t.size
            )
            sf.write(clips / f"c{i}.flac", tone.astype(np.float32), 16000)
            manifest.write(
                json.dumps({"audio": f"clips-{n}/c{i}.flac", "text": f"tone {i}"}) + "\n"
            )
    subprocess.run(
        _cli("shard", str(work / f"train-{n}.jsonl"), str(out), "--shard_size_mb", "8", "-q"),
        check=True,
    )
    return out


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fitwhisper", *args]


def _train(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return _cli(
        "train", "--model", str(model), "--train_manifest", str(data), "--output_dir", str(out),
        "--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none",
        "--overwrite_output_dir", *(extra or ("--max_steps", "2", "--save_strategy", "no")),
    )  # fmt: skip


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def _run_peak(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of `cmd` and its children."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = _poll(proc)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr.read().decode()[-2000:]}")
    return time.perf_counter() - start, peak


def _timed_first_step(cmd: list[str], marker: str = "step 1/") -> tuple[float, float]:
    """Seconds from launch to the first logged step (or to `marker`), and peak RSS (MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    seen: list[float] = []
    import threading

    def watch() -> None:
        for line in proc.stderr:
            if marker in line and not seen:
                seen.append(time.perf_counter() - start)

    reader = threading.Thread(target=watch, daemon=True)
    reader.start()
    peak = _poll(proc)
    reader.join()
    if proc.returncode != 0 or not seen:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode})")
    return seen[0], peak


def _poll(proc: subprocess.Popen) -> float:
    peak = 0
    me = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            rss = me.memory_info().rss + sum(
                c.memory_info().rss for c in me.children(recursive=True)
            )
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    return peak / 2**20


def _input_rate(folder: Path, model: Path, workers: int, clips: int = 1200) -> float:
    """Clips per second of the streamed input path alone: decode, log-mel, labels, collate."""
    import functools

    from torch.utils.data import DataLoader

    from fitwhisper.config import DataConfig
    from fitwhisper.data.check import row_problems
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.data.sources.spec import parse_source
    from fitwhisper.data.sources.units import stream_source
    from fitwhisper.data.stream import StreamCollator, StreamedClips
    from fitwhisper.models.resolve import load_processor

    processor = load_processor(str(model))
    source = stream_source(parse_source(str(folder)), DataConfig().manifest_columns())
    items = SpeechDataset([], processor)
    ds = StreamedClips(
        source.units,
        [source.rows],
        lambda row, audio, rng: items.item(row, audio, rng),
        functools.partial(row_problems, cfg=DataConfig(), tokenizer=processor.tokenizer),
        seed=0,
    )
    collate = StreamCollator(WhisperCollator(processor, 50257))
    loader = DataLoader(ds, batch_size=8, num_workers=workers, collate_fn=collate)
    seen, start = 0, None
    for batch in loader:
        if start is None:  # after the first batch: workers started
            start = time.perf_counter()
            continue
        seen += len(batch["labels"])
        if seen >= clips:
            break
    return seen / (time.perf_counter() - start)


def _resume_time(model: Path, data: Path, out: Path, step: int) -> float:
    """Train to `step` (a checkpoint there), then time `--resume` to its next step."""
    extra = ("--max_steps", str(step), "--save_strategy", "steps", "--save_steps", str(step))
    subprocess.run(_train(model, data, out, *extra), env=_env(), check=True, capture_output=True)
    resume = _train(model, data, out, "--max_steps", str(step + 1), "--save_strategy", "no")
    resume = [a for a in resume if a != "--overwrite_output_dir"]
    resume += ["--resume", "--resume_despite_changes"]
    seconds, _ = _timed_first_step(resume, marker=f"step {step + 1}/")
    return seconds


if __name__ == "__main__":
    sys.exit(main())
