"""Training speed: the standard recipe vs fitwhisper, side by side in one run.

    flock /tmp/fw-bench.lock env PYTHONPATH=src python bench/train_speed.py \
        --out bench/RESULTS-train-speed.table.md        # about 25 min on 2 CPU cores
    PYTHONPATH=src python bench/train_speed.py --quick  # smoke test, a few minutes

Data (real speech, ../shared/data): Mandarin AISHELL S0150 read sentences (train: the first
sentences of W0121-W0420, held out: sentences from W0421 on) with `offline/base`; English
digit strings (3-6 FSDD digits of one speaker joined with 0.15 s gaps; held-out strings use
other recordings) with `offline/tiny.en`.

Each configuration trains in its own process (so its peak RSS is its own) under the same
hyperparameters (AdamW, lr 1e-5, linear decay, no warm-up, seed 42, fp32, 2 torch threads):

- baseline: bench/baseline_recipe.py (features precomputed, every clip padded to 30 s, the
  blog's collator, Seq2SeqTrainer), batch 8 clips;
- fitwhisper with each speed option alone and its default; packed rows use as many windows
  per batch as hold about the baseline's 8 clips (so the same number of passes
  over the data takes about as many optimizer steps).

Rows marked "full" train for the whole epochs and are scored by generation (CER/WER) on the
held-out clips at normal 30 s input; the others time a fixed number of optimizer steps
(throughput only). Reported per row: original clips per second (a packed window counts as
its clips), seconds of audio per wall-second, peak RSS of the training process, model FLOPs
per second from `torch.utils.flop_counter.FlopCounterMode` (forward + backward of the run's
own batches) as a fraction of this machine's fp32 matmul rate measured in the same run, and
the accuracy. Noise: a paired bootstrap over held-out clips gives the 95% interval of each
row's error-rate difference from the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FW_SHARED_DATA", REPO.parent / "shared" / "data"))
THREADS = 2
LR = 1e-5
SEED = 42
CLIP_BATCH = 8
GEN_MAX = 96  # tokens generated per held-out clip: room for any of them, cuts runaways short

# Rows keep what their labels say whatever the defaults become: FULL is Whisper's 30 s
# window (the default when the first rows were measured), UNGROUPED random batch order.
FULL = ["--encoder_input", "full"]
UNGROUPED = ["--no-group_by_duration"]
NO_WINDOWS = ["--packed_window_share", "0"]  # single clips only (the default until 2026-11-27)

# (label, fitwhisper options, full run with accuracy?)
CONFIGS = [
    ("fitwhisper, no packing (sdpa, mel on the fly)", ["--no-pack_clips", *FULL], False),
    ("  the same with eager attention",
     ["--no-pack_clips", *FULL, "--attn_implementation", "eager"], False),
    ("  + group_by_duration", ["--no-pack_clips", *FULL, "--group_by_duration"], False),
    ("  + short_encoder_input (opt-in)",
     ["--no-pack_clips", "--short_encoder_input", *UNGROUPED], True),
    ("  + short_encoder_input + group_by_duration",
     ["--no-pack_clips", "--short_encoder_input", "--group_by_duration"], False),
    ("fitwhisper --pack_clips (40% of windows hold one clip)", ["--pack_clips", *FULL], True),
    ("  every window packed, half timestamped (the first design)",
     ["--pack_clips", *FULL, "--packed_single_clip_share", "0",
      "--packed_timestamp_fraction", "0.5"], True),
    ("  --pack_clips + short_encoder_input", ["--pack_clips", "--short_encoder_input", *UNGROUPED],
     False),
]  # fmt: skip

# The candidates for the default encoder input (`--rows encoder_input`): full runs are
# scored at 30 s (as every engine feeds the model) and on the short window.
ENCODER_INPUT = [
    ("fitwhisper --encoder_input full (Whisper's 30 s)",
     ["--no-pack_clips", *FULL], False),
    ("fitwhisper --encoder_input trimmed",
     ["--no-pack_clips", "--encoder_input", "trimmed", *UNGROUPED], True),
    ("fitwhisper --encoder_input mixed, 5% of batches at 30 s",
     ["--no-pack_clips", "--encoder_input", "mixed", "--full_window_share", "0.05",
      *NO_WINDOWS, *UNGROUPED], True),
    ("fitwhisper --encoder_input mixed, 10% of batches at 30 s",
     ["--no-pack_clips", "--encoder_input", "mixed", "--full_window_share", "0.1",
      *NO_WINDOWS, *UNGROUPED], True),
]  # fmt: skip
# Length grouping with mixed input (`--rows grouping`): batches of similar clips are cut
# shorter; could that pay for a larger share of 30 s batches?
GROUPING = [
    ENCODER_INPUT[0],
    ENCODER_INPUT[2],
    ("fitwhisper mixed 5% + group_by_duration",
     ["--no-pack_clips", "--encoder_input", "mixed", "--full_window_share", "0.05",
      *NO_WINDOWS, "--group_by_duration"], True),
    ("fitwhisper mixed 10% + group_by_duration",
     ["--no-pack_clips", "--encoder_input", "mixed", "--full_window_share", "0.1",
      *NO_WINDOWS, "--group_by_duration"], True),
]  # fmt: skip
# Mixed input with a few 30 s windows of several timestamped clips (`--rows packed_windows`).
PACKED_WINDOWS = [
    ENCODER_INPUT[0],
    ENCODER_INPUT[2],
    ("fitwhisper mixed 5% + packed_window_share 0.03 (the default)",
     ["--no-pack_clips", "--encoder_input", "mixed", "--full_window_share", "0.05",
      "--packed_window_share", "0.03", *UNGROUPED], True),
]  # fmt: skip
# The default's share of batches at 30 s against a quarter of them (`--rows full_window_share`):
# on Mandarin held-out speakers a quarter closed about half of the defaults' gap to the
# standard recipe (bench/RESULTS-quality.md); what does it cost in speed?
_MIXED = ["--no-pack_clips", "--encoder_input", "mixed", "--packed_window_share", "0.03",
          *UNGROUPED]  # fmt: skip
FULL_WINDOW_SHARE = [
    ("fitwhisper mixed 5% + packed_window_share 0.03 (the default)",
     [*_MIXED, "--full_window_share", "0.05"], True),
    ("fitwhisper mixed 25% + packed_window_share 0.03",
     [*_MIXED, "--full_window_share", "0.25"], True),
]  # fmt: skip
ROWS = {"speed": CONFIGS, "encoder_input": ENCODER_INPUT, "grouping": GROUPING,
        "packed_windows": PACKED_WINDOWS, "full_window_share": FULL_WINDOW_SHARE}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="Few clips and steps: a smoke test.")
    ap.add_argument("--only", choices=("zh", "en"), default=None, help="One data set only.")
    ap.add_argument("--out", default=None, help="Also write the markdown tables here.")
    ap.add_argument("--work", default=None, help="Keep runs here (default: a temp folder).")
    ap.add_argument("--n_train", type=int, default=80, help="Training clips per data set.")
    ap.add_argument("--n_eval", type=int, default=32, help="Held-out clips per data set.")
    ap.add_argument("--epochs", type=int, default=2, help="Epochs of the full runs.")
    ap.add_argument(
        "--rows",
        choices=sorted(ROWS),
        default="speed",
        help="speed: each speed option; encoder_input: the default candidates; grouping: "
        "the default with length-grouped batches; packed_windows: the default with 30 s "
        "windows of several clips; full_window_share: the default's 5% of batches at 30 s "
        "against 25%.",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return _child(json.loads(a.child))

    work = Path(a.work or tempfile.mkdtemp(prefix="fw-train-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    n_train, n_eval, steps = (16, 8, 2) if a.quick else (a.n_train, a.n_eval, 3)
    epochs = 1 if a.quick else a.epochs
    rate = matmul_rate()
    print(f"fp32 matmul rate ({THREADS} threads): {rate / 1e9:.0f} GFLOP/s", flush=True)
    sets = []
    if a.only in (None, "zh"):
        sets.append(("offline/base", "zh", *aishell_manifests(work, n_train, n_eval)))
    if a.only in (None, "en"):
        sets.append(("offline/tiny.en", None, *digit_manifests(work, n_train, n_eval)))
    sections = [_header(rate, a.quick, n_train, n_eval, epochs, steps)]
    for model, lang, train_m, eval_m in sets:
        results = []
        common = {"model": model, "language": lang, "train": str(train_m), "eval": str(eval_m),
                  "epochs": epochs}  # fmt: skip
        base = run_child({**common, "kind": "baseline", "full": True,
                          "out": str(work / model_dir(model) / "baseline")})  # fmt: skip
        base["label"] = "baseline: standard recipe (padded to 30 s, precomputed)"
        results.append(base)
        configs = ROWS[a.rows]
        for label, opts, full in configs:
            out = str(work / model_dir(model) / _slug(label))
            r = run_child({**common, "kind": "fitwhisper", "options": opts, "full": full,
                           "steps": steps, "out": out})  # fmt: skip
            if r is None:
                continue
            r["label"] = label
            results.append(r)
        table = format_table(model, lang, results, rate)
        print(table, flush=True)
        sections.append(table)
    text = "\n\n".join(sections) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    return 0


# --- data ---------------------------------------------------------------------------------


def aishell_manifests(work: Path, n_train: int, n_eval: int) -> tuple[Path, Path]:
    src = SHARED / "aishell-s0150"
    rows = [json.loads(x) for x in (src / "manifest.jsonl").read_text().splitlines() if x]
    sent = [r for r in rows if r["kind"] == "sentence"]

    def num(r):
        return int(r["utterance_id"][-4:])

    # Held out: the last n_eval sentences (those from W0421 on, then earlier ones as more
    # are asked for); training: from W0121 on, before them.
    ordered = sorted((r for r in sent if num(r) >= 121), key=num)
    held = ordered[-n_eval:]
    train = [r for r in ordered if num(r) < num(held[0])][:n_train]
    return _write(work / "zh", "train", train, src), _write(work / "zh", "eval", held, src)


def digit_manifests(work: Path, n_train: int, n_eval: int) -> tuple[Path, Path]:
    """Digit strings: 3-6 digits of one speaker, 0.15 s apart; held-out strings use the
    recordings with index 40-49, training ones 5-39."""
    import soundfile as sf

    from fitwhisper.data.audio import load_audio

    src = SHARED / "fsdd-train"
    rows = [json.loads(x) for x in (src / "manifest.jsonl").read_text().splitlines() if x]
    words = "zero one two three four five six seven eight nine".split()
    out = work / "en"
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(SEED)
    made = {}
    for split, n, lo, hi in (("train", n_train, 5, 39), ("eval", n_eval, 40, 49)):
        pool: dict[str, list[dict]] = {}
        for r in rows:
            idx = int(Path(r["audio"]).stem.rsplit("_", 1)[1])
            if lo <= idx <= hi:
                pool.setdefault(r["speaker"], []).append(r)
        speakers = sorted(pool)
        items = []
        for i in range(n):
            spk = speakers[i % len(speakers)]
            picks = rng.sample(pool[spk], rng.randint(3, 6))
            gap = np.zeros(int(0.15 * 16000), dtype=np.float32)
            audio = np.concatenate([x for p in picks for x in (load_audio(src / p["audio"]), gap)])
            name = f"{split}_{i:03d}.flac"
            sf.write(out / name, audio[: -len(gap)], 16000)
            items.append({"audio": name, "text": " ".join(words[p["digit"]] for p in picks),
                          "speaker": spk})  # fmt: skip
        made[split] = _write(out, split, items, out)
    return made["train"], made["eval"]


def _write(folder: Path, split: str, rows: list[dict], audio_dir: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}.jsonl"
    with path.open("w") as f:
        for r in rows:
            rec = {"audio": str((audio_dir / r["audio"]).resolve()), "text": r["text"]}
            for key in ("language", "speaker"):  # a speaker: `train --speaker_context`
                if key in r:
                    rec[key] = r[key]
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


# --- the machine --------------------------------------------------------------------------


def matmul_rate(n: int = 2048, repeats: int = 10) -> float:
    """fp32 FLOP/s of a square matmul at THREADS threads (best of `repeats`)."""
    import torch

    torch.set_num_threads(THREADS)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


# --- one configuration, in its own process ------------------------------------------------


def run_child(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    Path(spec["out"]).mkdir(parents=True, exist_ok=True)
    (Path(spec["out"]) / "bench.log").write_text(done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        print(f"configuration failed: {spec}", file=sys.stderr, flush=True)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


class _Measure:
    """TrainerCallback: wall time of training, then FLOPs of two of the run's own batches."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        outer = self

        class CB(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                outer.t0 = time.perf_counter()

            def on_train_end(self, args, state, control, model=None, train_dataloader=None,
                             **kw):  # fmt: skip
                outer.train_s = time.perf_counter() - outer.t0
                outer.steps = state.global_step
                outer.rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
                outer.flops_per_batch, outer.clips_per_item = _flops(model, train_dataloader)

        self.callback = CB()


def _flops(model, loader) -> tuple[float, float]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    ds = loader.dataset
    inner = getattr(ds, "base", ds)
    clips_per_item = getattr(inner, "n_clips", len(inner)) / len(inner)
    total, n = 0.0, 0
    model.train()
    for batch in loader:
        batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        with FlopCounterMode(display=False) as fc:
            model(**batch).loss.backward()
        model.zero_grad(set_to_none=True)
        total += fc.get_total_flops()
        n += 1
        if n == 2:
            break
    return total / n, clips_per_item


def _child(spec: dict) -> int:
    import torch

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    measure = _Measure()
    out = Path(spec["out"])
    full = spec["full"]
    if spec["kind"] == "baseline":
        sys.path.insert(0, str(REPO / "bench"))
        import baseline_recipe
        from fitwhisper.models.resolve import resolve_model

        model_dir = str(resolve_model(spec["model"]).path_or_id)
        t0 = time.perf_counter()
        processor, ds = baseline_recipe.prepare(model_dir, spec["train"], spec["language"])
        precompute_s = time.perf_counter() - t0
        trainer = baseline_recipe.make_trainer(
            model_dir, processor, ds, out, language=spec["language"], batch_size=CLIP_BATCH,
            lr=LR, epochs=spec["epochs"], seed=SEED, callbacks=[measure.callback],
        )  # fmt: skip
        trainer.train()
        n_clips = len(ds)
        batch = CLIP_BATCH
        metric = _evaluate(trainer.model, processor, spec, out / "eval")
        extra = {"precompute_s": precompute_s}
    if spec["kind"] == "fitwhisper":
        from fitwhisper.cli.flags import add_options, build_config
        from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
        from fitwhisper.train import train

        argv = [
            "--model", spec["model"], "--train_manifest", spec["train"],
            "--output_dir", str(out), "--overwrite_output_dir",
            "--learning_rate", str(LR),
            "--num_train_epochs", str(spec["epochs"]), "--seed", str(SEED),
            "--report_to", "none", "--save_strategy", "no",
            "--generation_max_length", str(GEN_MAX), *spec["options"],
        ]  # fmt: skip
        if spec["language"]:
            argv += ["--language", spec["language"]]
        if full:
            argv += ["--eval_manifest", spec["eval"]]
        else:
            argv += ["--max_steps", str(spec["steps"])]
        parser = argparse.ArgumentParser()
        classes = (ModelConfig, DataConfig, TrainConfig)
        for cls in classes:
            add_options(parser, cls, cls.__name__)
        ns = parser.parse_args(argv)
        model_cfg, data_cfg, train_cfg = (build_config(cls, ns, {}) for cls in classes)
        batch = spec.get("batch") or _batch_of(train_cfg, spec)
        train_cfg.per_device_train_batch_size = batch
        res = train(model_cfg, data_cfg, train_cfg, callbacks=(measure.callback,))
        n_clips = res.train_rows
        metric = None
        extra = {}
        if full:
            m = json.loads((out / "eval" / "metrics.json").read_text())
            metric = {"name": m["metric"], "value": m[m["metric"]],
                      "predictions": str(out / "eval" / "predictions.jsonl")}  # fmt: skip
            # What the saved model records, so a row left on --encoder_input auto counts.
            if _trained_window(out / "final") != "full":
                extra["short_window"] = _evaluate_short(out, spec)
    if full:
        clips = spec["epochs"] * n_clips
    else:
        clips = min(measure.steps * batch * measure.clips_per_item, spec["epochs"] * n_clips)
    mean_s = _mean_duration(spec["train"])
    result = {
        "train_s": measure.train_s,
        "steps": measure.steps,
        "clips": clips,
        "clips_per_s": clips / measure.train_s,
        "audio_s_per_s": clips * mean_s / measure.train_s,
        "rss_gib": measure.rss_gib,
        "flops_per_s": measure.flops_per_batch * measure.steps / measure.train_s,
        "flops_per_clip": measure.flops_per_batch / (batch * measure.clips_per_item),
        "metric": metric,
        "full": full,
        **extra,
    }
    print(json.dumps(result))
    return 0


def _batch_of(train_cfg, spec: dict) -> int:
    """CLIP_BATCH clips, or as many packed windows as hold about CLIP_BATCH clips, so every
    row takes about as many optimizer steps per epoch at the same learning rate."""
    if not train_cfg.pack_clips:
        return CLIP_BATCH
    import soundfile as sf
    from transformers import WhisperTokenizer

    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.data.packing import windows_for
    from fitwhisper.models.resolve import resolve_model

    rows = load_manifest(spec["train"]).rows
    durations = [sf.info(str(r.audio)).duration for r in rows]
    tok = WhisperTokenizer.from_pretrained(str(resolve_model(spec["model"]).path_or_id))
    windows = windows_for(rows, durations, tok, train_cfg, language=spec["language"])
    return max(1, round(CLIP_BATCH * len(windows) / len(rows)))


def _evaluate(model, processor, spec: dict, out: Path) -> dict:
    """The held-out clips at normal 30 s input, by generation, as fitwhisper scores them."""
    from fitwhisper.config import EvalConfig
    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import evaluate_model
    from fitwhisper.models.generation import configure_generation

    rows = load_manifest(spec["eval"]).rows
    configure_generation(model, spec["language"], "transcribe")
    ds = SpeechDataset(rows, processor, language=spec["language"])
    cfg = EvalConfig(language=spec["language"], batch_size=8, generation_max_length=GEN_MAX)
    res = evaluate_model(model, processor, ds, [r.text for r in rows], [r.id for r in rows], cfg)
    res.write(out)
    return {"name": res.score.metric, "value": res.score.normalized,
            "predictions": str(out / "predictions.jsonl")}  # fmt: skip


def _trained_window(model_dir: Path) -> str:
    """How the saved model trained: "full", "trimmed" or "mixed" (its config's record)."""
    from transformers import WhisperConfig

    from fitwhisper.models.short_window import trained_window

    return trained_window(WhisperConfig.from_pretrained(model_dir))


def _evaluate_short(out: Path, spec: dict) -> dict:
    """final/ scored again with each batch's clips encoded on their own length."""
    from fitwhisper.evaluate import evaluate_manifest

    t0 = time.perf_counter()
    res = evaluate_manifest(str(out / "final"), spec["eval"], language=spec["language"],
                            batch_size=8, generation_max_length=GEN_MAX,
                            encoder_window="short")  # fmt: skip
    seconds = time.perf_counter() - t0
    res.write(out / "eval-short")
    return {"name": res.score.metric, "value": res.score.normalized, "seconds": seconds,
            "predictions": str(out / "eval-short" / "predictions.jsonl")}  # fmt: skip


def _mean_duration(manifest: str) -> float:
    import soundfile as sf

    rows = [json.loads(x) for x in Path(manifest).read_text().splitlines() if x]
    return float(np.mean([sf.info(r["audio"]).duration for r in rows]))


# --- the table ----------------------------------------------------------------------------


DATA_NAMES = {True: "AISHELL S0150 sentences (Mandarin)", False: "FSDD digit strings (English)"}


def format_table(model: str, lang: str | None, results: list[dict], rate: float) -> str:
    base = results[0]
    head = (
        f"### {model} on {DATA_NAMES[bool(lang)]}\n\n"
        "| configuration | run | clips/s | x baseline | audio s/s | peak RSS GiB | "
        "GFLOP/clip | GFLOP/s (% of matmul) | held-out error (95% CI of diff.) | "
        "short window (95% CI of diff.) |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in results:
        err = ""
        if r["metric"]:
            m = r["metric"]
            err = f"{m['name'].upper()} {100 * m['value']:.1f}%"
            if r is not base and base["metric"]:
                lo, hi = paired_bootstrap(base["metric"]["predictions"], m["predictions"])
                err += f" ({100 * lo:+.1f} to {100 * hi:+.1f})"
        short = ""
        if r.get("short_window") and base["metric"]:
            m = r["short_window"]
            lo, hi = paired_bootstrap(base["metric"]["predictions"], m["predictions"])
            short = (
                f"{m['name'].upper()} {100 * m['value']:.1f}% ({100 * lo:+.1f} to {100 * hi:+.1f})"
            )
        run = f"{r['steps']} steps, full" if r["full"] else f"{r['steps']} steps"
        lines.append(
            f"| {r['label']} | {run} | {r['clips_per_s']:.2f} | "
            f"{r['clips_per_s'] / base['clips_per_s']:.2f} | {r['audio_s_per_s']:.1f} | "
            f"{r['rss_gib']:.2f} | {r['flops_per_clip'] / 1e9:.0f} | "
            f"{r['flops_per_s'] / 1e9:.0f} ({100 * r['flops_per_s'] / rate:.0f}%) | {err} | "
            f"{short} |"
        )
    if "precompute_s" in base:
        lines.append(
            f"\nThe baseline's feature precomputation (not in its clips/s): "
            f"{base['precompute_s']:.1f} s."
        )
    return "\n".join(lines)


def paired_bootstrap(base_file: str, other_file: str, n: int = 2000) -> tuple[float, float]:
    """95% interval of (other - base) corpus error rate, resampling held-out clips."""
    a = [json.loads(x) for x in Path(base_file).read_text().splitlines() if x]
    b = [json.loads(x) for x in Path(other_file).read_text().splitlines() if x]
    ea, eb = np.array([u["errors"] for u in a]), np.array([u["errors"] for u in b])
    units = np.array([u["ref_units"] for u in a])
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    diff = (eb[idx].sum(1) - ea[idx].sum(1)) / units[idx].sum(1)
    return float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))


def _header(rate, quick, n_train, n_eval, epochs, steps) -> str:
    import torch
    import transformers

    return (
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({THREADS} threads, fp32), transformers "
        f"{transformers.__version__}, Python {platform.python_version()}; measured fp32 "
        f"matmul rate {rate / 1e9:.0f} GFLOP/s. {n_train} training clips, {n_eval} held-out, "
        f"{epochs} epoch(s) for full runs, {steps} optimizer steps for the others"
        f"{' (--quick)' if quick else ''}."
    )


def model_dir(model: str) -> str:
    return model.replace("/", "_")


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label.strip()).strip("_")[:60]


if __name__ == "__main__":
    raise SystemExit(main())
