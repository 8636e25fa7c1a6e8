"""Frozen-encoder output cache: `--freeze_encoder` with and without
`--cache_encoder_outputs`, the whole epochs timed, in one run.

    flock /tmp/fw-bench.lock env PYTHONPATH=src python bench/encoder_cache.py \
        --out bench/encoder-cache.table.md          # about 4 min on 2 CPU cores

Data and hyperparameters as bench/train_speed.py: `offline/base`, the first 40 AISHELL
S0150 training sentences (../shared/data), AdamW lr 1e-5, linear decay, batch 8, seed 42,
fp32, 2 torch threads, 2 epochs. Each row trains in its own process:

- without the cache: every step runs the frozen encoder on 30 s of log-mel, then the decoder;
- with the cache, first run: the encoder runs once per clip before training (the "cache
  build" column), then both epochs train the decoder on the cached outputs;
- with the cache, run again in the same folder: the cache is reused (no encoder at all).

The speed-up counts everything the cache changes: build + both epochs, against both epochs
without it. With one epoch the cache cannot win (it runs the encoder once per clip, as the
epoch does); the gain grows with the number of epochs. Losses are the training losses of
every optimizer step (float16 on disk vs the encoder's float32 outputs).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from train_speed import LR, SEED, THREADS, aishell_manifests  # noqa: E402

MODEL = "offline/base"
BATCH = 8

ROWS = [
    ("--freeze_encoder", [], "a"),
    ("--freeze_encoder --cache_encoder_outputs", ["--cache_encoder_outputs"], "b"),
    ("  the same, run again in the same folder (cache reused)", ["--cache_encoder_outputs"], "b"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n_train", type=int, default=40, help="Training clips.")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", default=None, help="Also write the markdown table here.")
    ap.add_argument("--work", default=None, help="Keep runs here (default: a temp folder).")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(json.loads(a.child))

    work = Path(a.work or tempfile.mkdtemp(prefix="fw-encoder-cache-"))
    train_m, _ = aishell_manifests(work, a.n_train, 0)
    results = []
    for i, (label, opts, folder) in enumerate(ROWS):
        spec = {"train": str(train_m), "epochs": a.epochs, "options": opts,
                "out": str(work / folder), "log": f"bench-{i}.log"}  # fmt: skip
        r = _run_child(spec)
        r["label"] = label
        results.append(r)
        print(json.dumps(r), flush=True)
    text = _header(a.n_train, a.epochs) + "\n\n" + _table(results) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


def _run_child(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    Path(spec["out"]).mkdir(parents=True, exist_ok=True)
    (Path(spec["out"]) / spec["log"]).write_text(done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"configuration failed: {spec}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _child(spec: dict) -> int:
    import torch
    from transformers import TrainerCallback

    import fitwhisper.data.encoder_cache as ec
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.train import train

    torch.set_num_threads(THREADS)
    times: dict[str, float] = {}
    epochs: list[float] = []
    losses: list[float] = []

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            times["train0"] = time.perf_counter()

        def on_epoch_begin(self, args, state, control, **kw):
            times["epoch0"] = time.perf_counter()

        def on_epoch_end(self, args, state, control, **kw):
            epochs.append(time.perf_counter() - times["epoch0"])

        def on_train_end(self, args, state, control, **kw):
            times["train_s"] = time.perf_counter() - times["train0"]

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    build = ec.EncoderCache.build

    def timed_build(self, *args, **kwargs):
        t0 = time.perf_counter()
        build(self, *args, **kwargs)
        times["build_s"] = time.perf_counter() - t0

    ec.EncoderCache.build = timed_build
    cache = "--cache_encoder_outputs" in spec["options"]
    t0 = time.perf_counter()
    res = train(
        ModelConfig(model=MODEL, language="zh", freeze_encoder=True),
        DataConfig(),
        TrainConfig(
            output_dir=spec["out"], train_manifest=spec["train"],
            per_device_train_batch_size=BATCH, learning_rate=LR,
            num_train_epochs=spec["epochs"], seed=SEED, logging_steps=1,
            save_strategy="no", report_to="none", cache_encoder_outputs=cache,
        ),
        callbacks=(Clock(),),
    )  # fmt: skip
    cache_gib = 0.0
    if cache:
        cache_gib = ec.EncoderCache(Path(spec["out"]) / ec.CACHE_DIR_NAME).gib()
    print(json.dumps({
        "wall_s": time.perf_counter() - t0,
        "build_s": times.get("build_s", 0.0),
        "train_s": times["train_s"],
        "epoch_s": epochs,
        "steps": res.global_step,
        "clips": res.train_rows,
        "losses": losses,
        "cache_gib": cache_gib,
    }))  # fmt: skip
    return 0


def _table(results: list[dict]) -> str:
    base = results[0]
    base_s = base["build_s"] + base["train_s"]
    lines = [
        "| configuration | cache build s | epoch 1 s | epoch 2 s | build + training s | "
        "x speed (vs no cache) | cache GiB | max abs loss diff | losses (every step) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        total = r["build_s"] + r["train_s"]
        diff = max(abs(a - b) for a, b in zip(r["losses"], base["losses"], strict=True))
        ep = r["epoch_s"] + [float("nan")] * (2 - len(r["epoch_s"]))
        lines.append(
            f"| {r['label']} | {r['build_s']:.1f} | {ep[0]:.1f} | {ep[1]:.1f} | {total:.1f} | "
            f"{base_s / total:.2f} | {r['cache_gib']:.3f} | {diff:.2e} | "
            + " ".join(f"{x:.4f}" for x in r["losses"])
            + " |"
        )
    return "\n".join(lines)


def _header(n_train: int, epochs: int) -> str:
    import torch
    import transformers

    return (
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({THREADS} threads, fp32), transformers "
        f"{transformers.__version__}, Python {platform.python_version()}. {MODEL}, "
        f"{n_train} AISHELL S0150 training sentences, batch {BATCH}, {epochs} epochs, "
        "--freeze_encoder."
    )


if __name__ == "__main__":
    raise SystemExit(main())
