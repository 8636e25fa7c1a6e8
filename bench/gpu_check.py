"""The GPU check: the paths most likely to crash on CUDA, then the planner against the GPU.

    bench/gpu_check.sh                                   # a GPU machine, no network
    PYTHONPATH=src python bench/gpu_check.py --report /tmp/RESULTS-gpu.md   # any machine

Steps, in order of the risk of a crash (docs: ../shared/GPU-PATHS.md section 5), each a
process of its own under its own timeout: fp16 full / LoRA / 4-bit with the regression set;
bf16 8-bit with 8-bit Adam; the encoder cache; DeepSpeed ZeRO-2 and ZeRO-3 in bf16 as one
process; a real CUDA OOM and its back-off; `fitwhisper evaluate` of an fp16-stored model;
`fitwhisper transcribe` of it on the transformers engine by its default beam search of 5;
two processes through the scoring paths (torchrun, --score_before, the regression set);
the speed of the defaults against the standard recipe on real clips (bench/gpu_speed.py);
then the planner: `predict_memory` against `torch.cuda.max_memory_allocated` for
random-initialised models of the real shapes (full, LoRA, and where bitsandbytes is
installed its 8-bit and 4-bit bases with LoRA, model by model). Each step prints
`== NAME rc=N OK|FAIL|SKIPPED (why)` and its log's tail; the end writes the report
(default bench/RESULTS-gpu.md).

Nothing is downloaded (HF_HUB_OFFLINE=1): the models are random, built from configs, with the
tiny.en tokenizer that `make gpu-wheels` saves (else offline/tiny.en). Without CUDA the
CUDA-only steps are reported as skipped, the rest run on tiny models, and the planner rows
are CPU figures (the profiler's memory events), labelled so.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SELF = str(Path(__file__).resolve())  # children run as `python SELF _NAME ...`
REPO = Path(SELF).parents[1]
GIB = 2**30
TAIL_LINES = 6
LABEL_TOKENS = 128  # planner steps: labels per clip (30 s inputs: 3000 mel frames)
PLANNER_MODELS = ("tiny", "base", "small", "large-v3", "large-v3-turbo")
PLANNER_MIN_S = 45  # the planner step gets what is left of the budget, at least this
STEP_MIN_S = 10  # a step offered less than this is not started: it could not finish
OOM_CLIPS_BATCH = 16  # the OOM step's first batch; its memory cap fits a batch of 2
QUANTISED = ("8bit", "4bit")  # planner rows of a bitsandbytes base with LoRA


@dataclass
class Step:
    name: str
    timeout_s: int
    argv: Callable[[Context], list[str]]
    cuda_only: str | None = None  # why the step needs CUDA; skipped without it
    needs: tuple[str, ...] = ()  # modules that must be importable, else skipped
    expect: str | None = None  # text the log must contain for OK (lower case)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    name: str
    status: str  # OK, FAIL, SKIPPED
    rc: int | None
    seconds: float
    why: str = ""
    tail: str = ""
    cpu_s: float = 0.0  # CPU time of the step's processes (user + system)


@dataclass
class Context:
    work: Path
    cuda: bool
    py: str = sys.executable

    @property
    def regression(self) -> list[str]:
        return ["--regression_manifest", str(self.work / "m.jsonl")]

    @property
    def clips(self) -> int:
        return 16 if self.cuda else 8  # fewer on the CPU: the check must stay under 2 min

    def train(self, name: str, model: str, *extra: str) -> list[str]:
        """`fitwhisper train` of 3 steps on the tone clips, scored before and after."""
        m = str(self.work / "m.jsonl")
        return [
            self.py, "-m", "fitwhisper", "train", "--model", str(self.work / model),
            "--output_dir", str(self.work / name), "--train_manifest", m, "--eval_manifest", m,
            "--max_steps", "3", "--per_device_train_batch_size", "4",
            "--per_device_eval_batch_size", "8", "--generation_max_length", "8",
            "--learning_rate", "1e-3", "--report_to", "none", *extra,
        ]  # fmt: skip


def steps() -> list[Step]:
    fp16 = "fp16 mixed precision is CUDA-only (its gradient scaler is)"
    return [
        Step("fixture", 180, lambda c: [c.py, SELF, "_fixture", str(c.work), str(c.clips)]),
        Step(
            "fp16-full",
            150,
            lambda c: c.train("fp16-full", "tiny16", "--fp16", *c.regression),
            cuda_only=fp16,
            expect="regression_after",
        ),  # fmt: skip
        Step(
            "fp16-lora",
            150,
            lambda c: c.train("fp16-lora", "tiny16", "--fp16", "--use_lora", *c.regression),
            cuda_only=fp16,
            expect="regression_after",
        ),  # fmt: skip
        Step(
            "fp16-4bit",
            150,
            lambda c: c.train(
                "fp16-4bit",
                "tiny16",
                "--fp16",
                "--use_4bit",
                "--gradient_checkpointing",
                *c.regression,
            ),
            cuda_only=fp16,
            expect="regression_after",
            needs=("bitsandbytes",),
        ),  # fmt: skip
        Step(
            "bf16-8bit-adam8",
            150,
            lambda c: c.train(
                "bf16-8bit", "tiny16", "--bf16", "--use_8bit", "--optim", "adamw_8bit"
            ),
            # bitsandbytes' CPU backend runs it too, ~80x slower per 8-bit Adam step (see
            # train/method_loading.py); tests/test_finetune_quantised.py covers it there.
            cuda_only="the step checks bitsandbytes' CUDA kernels",
            needs=("bitsandbytes",),
        ),  # fmt: skip
        Step(
            "bf16-encoder-cache",
            150,
            lambda c: c.train(
                "bf16-cache", "tiny", "--bf16", "--freeze_encoder", "--cache_encoder_outputs"
            ),
        ),  # fmt: skip
        Step(
            "deepspeed-zero2",
            180,
            lambda c: c.train("ds-z2", "tiny", "--bf16", "--deepspeed", "zero2"),
            needs=("deepspeed",),
        ),  # fmt: skip
        Step(
            "deepspeed-zero3-lora",
            180,
            lambda c: c.train("ds-z3", "tiny", "--bf16", "--deepspeed", "zero3", "--use_lora"),
            needs=("deepspeed",),
        ),  # fmt: skip
        Step(
            "cuda-oom-backoff",
            180,
            lambda c: [c.py, SELF, "_oom", str(c.work)],
            cuda_only="needs a real CUDA out-of-memory error",
            expect="out of memory at step",
        ),
        Step(
            "evaluate-fp16-stored",
            120,
            lambda c: [
                c.py,
                "-m",
                "fitwhisper",
                "evaluate",
                str(c.work / "tiny16"),
                str(c.work / "m.jsonl"),
                "--batch_size",
                "8",
                "--generation_max_length",
                "8",
                "--output_dir",
                str(c.work / "ev"),
            ],
        ),  # fmt: skip
        Step(
            "transcribe-fp16-beam5",
            120,
            lambda c: [
                c.py,
                "-m",
                "fitwhisper",
                "transcribe",
                "--model",
                str(c.work / "tiny16"),
                "--engine",
                "transformers",
                "--device",
                "cuda",
                "--no_vad",
                "--max_new_tokens",
                "8",
                "--output_dir",
                str(c.work / "transcribed"),
                "--output_format",
                "json",
                str(c.work / "clips"),
            ],
            cuda_only="transcribe's float16 beam search runs on CUDA only",
            expect="beam search of 5",
        ),  # fmt: skip
        Step(
            "torchrun-2proc-scoring",
            150,
            _torchrun,
            env={"NCCL_DEBUG": "WARN"},
            expect="regression_after",
        ),
        Step(
            "speed",
            240,
            lambda c: [
                c.py,
                str(REPO / "bench" / "gpu_speed.py"),
                "--out",
                str(c.work / "speed.json"),
            ],  # fmt: skip
            cuda_only="times training on the GPU (bench/gpu_speed.py)",
            expect="| model | configuration |",
        ),
    ]


def _torchrun(c: Context) -> list[str]:
    """Two processes, one device, through --score_before, the regression set and the final
    scoring. On the CPU this is the user's command (gloo). On one GPU NCCL refuses two ranks
    on a device, so each rank goes through `_rank`: both on cuda:0, a gloo process group."""
    run = [c.py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    train = c.train("ddp", "tiny", "--score_before", *c.regression)[1:]
    if not c.cuda:
        return run + train
    return run + [SELF, "_rank", *train[2:]]  # train[2:] starts at "train"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", type=Path, default=None,
                    help="Where the report goes (default bench/RESULTS-gpu.md on CUDA; "
                    "without CUDA it must be given, so the GPU results are never "
                    "overwritten). Env: GPU_CHECK_REPORT.")  # fmt: skip
    ap.add_argument("--budget_s", type=float, default=540, help="Time for the whole check.")
    ap.add_argument("--work", type=Path, default=None, help="Work folder (default: a temp).")
    ap.add_argument("--only", nargs="+", default=None, help="Run these steps (and fixture).")
    ap.add_argument(
        "--planner_models",
        nargs="+",
        default=list(PLANNER_MODELS),
        choices=PLANNER_MODELS,
        help="The planner step's model shapes (GPU).",
    )
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    deadline = t_start + args.budget_s

    # 1. Where we are: device, versions; where the report goes.
    env = _environment()
    cuda = env["cuda"]
    report = args.report or (Path(os.environ["GPU_CHECK_REPORT"]) if os.environ.get(
        "GPU_CHECK_REPORT") else None)  # fmt: skip
    if report is None:
        if not cuda:
            ap.error("no CUDA here: give --report FILE (bench/RESULTS-gpu.md is for GPU runs)")
        report = REPO / "bench" / "RESULTS-gpu.md"
    print(
        f"GPU check: {env['device']}; torch {env['torch']}, CUDA {env['cuda_version']}, "
        f"transformers {env['transformers']}; budget {args.budget_s:.0f} s",
        flush=True,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(work=work, cuda=cuda)

    # 2. The steps, in order of the risk of a crash.
    results: list[Result] = []
    chosen = [s for s in steps() if not args.only or s.name in args.only or s.name == "fixture"]
    for i, step in enumerate(chosen):
        reserve = PLANNER_MIN_S + 5 * (len(chosen) - i - 1)  # leave the rest a little time
        results.append(_run_step(step, ctx, min(step.timeout_s, deadline - time.monotonic()
                                                - reserve)))  # fmt: skip
        if step.name == "fixture" and results[-1].status != "OK":
            results += [Result(s.name, "SKIPPED", None, 0.0, "the fixture failed")
                        for s in chosen[i + 1 :]]  # fmt: skip
            break

    # 3. The planner against the device, in what is left of the budget.
    table: list[dict] = []
    if not args.only or "planner" in args.only:
        planner_json = work / "planner.json"
        left = max(PLANNER_MIN_S, deadline - time.monotonic())
        models = ",".join(args.planner_models)
        step = Step("planner", int(left) + 30, lambda c: [c.py, SELF, "_planner",
                    str(planner_json), str(time.time() + left), str(c.work), models])  # fmt: skip
        results.append(_run_step(step, ctx, step.timeout_s))
        if planner_json.is_file():
            table = json.loads(planner_json.read_text())

    # 4. Summary and report.
    total_s = time.monotonic() - t_start
    print("\n== summary")
    for r in results:
        print(f"  {r.name:24} {r.status:8} {r.seconds:6.1f} s {r.cpu_s:6.1f} s CPU  {r.why}")
    ok = all(r.status != "FAIL" for r in results)
    cpu_s = sum(r.cpu_s for r in results)
    print(f"  {'all':24} {'OK' if ok else 'FAIL':8} {total_s:6.1f} s {cpu_s:6.1f} s CPU")
    if table:
        print("\n" + _planner_table(table, cuda))
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(_report(env, results, table, total_s, work))
    print(f"\nreport: {report}")
    return 0 if ok else 1


# --- running a step -------------------------------------------------------------------------


def _run_step(step: Step, ctx: Context, timeout_s: float) -> Result:
    why = _skip_reason(step, ctx)
    if why:
        print(f"\n== {step.name} rc=- SKIPPED ({why})", flush=True)
        return Result(step.name, "SKIPPED", None, 0.0, why)
    if timeout_s < STEP_MIN_S:
        why = "no time left in the budget"
        print(f"\n== {step.name} rc=- FAIL ({why})", flush=True)
        return Result(step.name, "FAIL", None, 0.0, why)
    log_path = ctx.work / f"{step.name}.log"
    print(f"\n-- {step.name} (timeout {timeout_s:.0f} s, log {log_path})", flush=True)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env = {**os.environ, **offline, "TOKENIZERS_PARALLELISM": "false", **step.env}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    env.setdefault("FITWHISPER_CACHE", str(ctx.work / "cache"))  # never the user's home
    t0, cpu0 = time.monotonic(), _children_cpu_s()
    with open(log_path, "wb") as log:
        # A session of its own, so a timeout ends the step's children too (torchrun's ranks).
        proc = subprocess.Popen(step.argv(ctx), stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO, start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = 124
        except BaseException:  # Ctrl-C: its own session would outlive the check
            _kill_group(proc)
            raise
    seconds, cpu_s = time.monotonic() - t0, _children_cpu_s() - cpu0
    text = log_path.read_text(errors="replace")
    tail = "\n".join(text.rstrip().splitlines()[-TAIL_LINES:])
    if rc == 124:
        status, why = "FAIL", f"timed out after {timeout_s:.0f} s (a hang is a finding)"
    elif rc != 0:
        status, why = "FAIL", f"exit status {rc}"
    elif step.expect and step.expect not in text.lower():
        status, why = "FAIL", f"exited 0 but the log lacks {step.expect!r}"
    else:
        status, why = "OK", _precision_note(text)
    print(f"== {step.name} rc={rc} {status}{f' ({why})' if why else ''} {seconds:.1f} s "
          f"({cpu_s:.1f} s CPU)")  # fmt: skip
    print(_indent(tail), flush=True)
    return Result(step.name, status, rc, seconds, why, tail, cpu_s)


def _children_cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _skip_reason(step: Step, ctx: Context) -> str | None:
    import importlib.util

    if step.cuda_only and not ctx.cuda:
        return f"no CUDA: {step.cuda_only}"
    missing = [m for m in step.needs if importlib.util.find_spec(m) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    return None


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _precision_note(text: str) -> str:
    import re

    m = re.search(r"precision [a-z0-9 ]+", text)
    return m.group(0).strip() if m else ""


def _indent(text: str) -> str:
    return "\n".join("   " + line for line in text.splitlines())


# --- environment and report -----------------------------------------------------------------


def _environment() -> dict:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "cuda": cuda,
        "device": torch.cuda.get_device_name(0)
        if cuda
        else f"CPU ({platform.machine()}, {os.cpu_count()} cores)",
        "memory_gib": torch.cuda.get_device_properties(0).total_memory / GIB if cuda else None,
        "torch": torch.__version__,
        "cuda_version": torch.version.cuda or "none",
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _report(env: dict, results: list[Result], table: list[dict], total_s: float,
            work: Path) -> str:  # fmt: skip
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mem = f", {env['memory_gib']:.1f} GiB" if env["memory_gib"] else ""
    lines = [
        "# GPU check results",
        "",
        "Written by `bench/gpu_check.sh` (bench/gpu_check.py); the steps are those of "
        "../shared/GPU-PATHS.md section 5, random-initialised models, no download.",
        "",
        "## Machine",
        "",
        f"- date: {now}",
        f"- device: {env['device']}{mem}",
        f"- torch {env['torch']}, CUDA {env['cuda_version']}, transformers "
        f"{env['transformers']}, Python {env['python']}",
        f"- whole check: {total_s:.0f} s, its steps {sum(r.cpu_s for r in results):.0f} s of "
        f"CPU time; logs were in {work}",
        "",
        "## Steps",
        "",
        "| step | result | rc | seconds | note | CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        note = r.why.replace("|", "/")
        lines.append(f"| {r.name} | {r.status} | {'-' if r.rc is None else r.rc} | "
                     f"{r.seconds:.1f} | {note} | {r.cpu_s:.1f} |")  # fmt: skip
    lines += [
        "",
        "fp16 runs use a tiny random model stored in fp16 (as large-v3 is on the Hub); "
        "`torchrun-2proc-scoring` runs two processes on one device: on a GPU both ranks use "
        "cuda:0 in a gloo process group (NCCL refuses two ranks on one GPU), on a CPU it is "
        "the user's command over gloo.",
    ]
    speed = work / "speed.json"
    if speed.is_file():  # the speed step (bench/gpu_speed.py)
        sys.path.insert(0, str(REPO / "bench"))
        from gpu_speed import table_markdown

        lines += ["", "## Speed: defaults against the standard recipe", ""]
        lines.append(table_markdown(json.loads(speed.read_text())))
    lines += ["", "## Planner against the device", ""]
    lines.append(_planner_table(table, env["cuda"]) if table else "(no planner rows)")
    failed = [r for r in results if r.status == "FAIL"]
    if failed:
        lines += ["", "## Log tails of the failed steps", ""]
        for r in failed:
            lines += [f"### {r.name}", "", "```", r.tail, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _planner_table(rows: list[dict], cuda: bool) -> str:
    if cuda:
        head = ("Predicted: `predict_memory(...).peak_tensor_bytes` (tensors only); measured: "
                "`torch.cuda.max_memory_allocated()` over one step after a warm-up step "
                "(AdamW, 30 s inputs = 3000 frames, labels of "
                f"{LABEL_TOKENS} tokens, sdpa). 'total' adds the assumed CUDA context and "
                "allocator slack; 'reserved' is `max_memory_reserved()`.")  # fmt: skip
    else:
        head = ("No CUDA: CPU figures, not GPU ones. Predicted for device cpu; measured: the "
                "PyTorch profiler's memory events over one step after a warm-up step, plus "
                "the bytes already held (bench/memory_prediction.py's method).")  # fmt: skip
    out = [head, "", "| model | method | dtype | batch | ckpt | predicted GiB | measured GiB "
           "| error | predicted total GiB | reserved GiB | note |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    errors = []
    for r in rows:
        pred, meas = r.get("predicted"), r.get("measured")
        err = f"{100 * (pred / meas - 1):+.1f}%" if pred and meas else "-"
        if pred and meas:
            errors.append(abs(pred / meas - 1))
        out.append(
            f"| {r['model']} | {r['method']} | {r['dtype']} | {r['batch']} | "
            f"{'on' if r['ckpt'] else 'off'} | {_g(pred)} | {_g(meas)} | {err} | "
            f"{_g(r.get('predicted_total'))} | {_g(r.get('reserved'))} | {r.get('note', '')} |"
        )
    if errors:
        out += ["", f"{len(errors)} rows measured; worst error {100 * max(errors):.1f}%, "
                f"mean absolute {100 * sum(errors) / len(errors):.1f}%."]  # fmt: skip
    return "\n".join(out)


def _g(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.2f}"


# --- children: run as `python bench/gpu_check.py _NAME ...` ---------------------------------


def _fixture(work: Path, clips: int) -> None:
    """Random models and 16 tone clips: tiny (d_model 64, 2+2 layers) in fp32 and stored in
    fp16 (as large-v3 is on the Hub), base.en shapes for the OOM step; the tiny.en tokenizer."""
    import torch
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    from fitwhisper.memory.architectures import ARCHITECTURES
    from fitwhisper.models.resolve import load_processor

    meta = _tokenizer_folder()
    print(f"tokenizer and generation config from {meta}")
    processor = load_processor(meta)
    gen = GenerationConfig.from_pretrained(meta)
    real = WhisperConfig.from_pretrained(meta)
    ids = {k: getattr(real, k) for k in ("pad_token_id", "bos_token_id", "eos_token_id",
                                         "decoder_start_token_id")}  # fmt: skip
    tiny = WhisperConfig(
        vocab_size=real.vocab_size, num_mel_bins=80, max_source_positions=1500,
        max_target_positions=448, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, **ids,
    )  # fmt: skip
    shapes = {"tiny": (tiny, None), "tiny16": (tiny, torch.float16)}
    if torch.cuda.is_available():
        shapes["base"] = (WhisperConfig(**ARCHITECTURES["openai/whisper-base.en"]), None)
    for name, (cfg, dtype) in shapes.items():
        torch.manual_seed(0)
        model = WhisperForConditionalGeneration(cfg)
        if dtype is not None:
            model = model.to(dtype)
        model.generation_config = gen
        model.save_pretrained(work / name)
        processor.save_pretrained(work / name)
        print(f"{name}: {sum(p.numel() for p in model.parameters()):,} parameters, {dtype}")
    rows = []
    for i in range(clips):
        path = _tone(work / "clips" / f"{i}.wav", 1 + 0.1 * i, 300 + 30 * i)
        rows.append({"audio_path": str(path), "text": f"tone number {i} is playing"})
    (work / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} clips in {work / 'm.jsonl'}")


def _tokenizer_folder() -> str:
    """The tiny.en tokenizer + configs `make gpu-wheels` saved, else the offline model."""
    for folder in (os.environ.get("GPU_CHECK_TOKENIZER"), REPO / ".whl" / "tiny.en"):
        if folder and (Path(folder) / "tokenizer.json").is_file():
            return str(folder)
    from fitwhisper.models.resolve import resolve_model

    return str(resolve_model("offline/tiny.en").path_or_id)


def _tone(path: Path, seconds: float, freq: float) -> Path:
    import numpy as np
    import soundfile

    sr = 16_000
    t = np.arange(int(seconds * sr)) / sr
    noise = 0.01 * np.random.default_rng(int(freq)).standard_normal(t.size)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(path), (0.3 * np.sin(2 * np.pi * freq * t) + noise).astype("float32"), sr)
    return path


def _oom(work: Path) -> int:
    """A real CUDA OOM: the process capped (set_per_process_memory_fraction) at 1.5x the
    planner's peak for a batch of 2, then trained at a batch of 16: `train` must back off."""
    import torch

    from fitwhisper.cli import main as cli
    from fitwhisper.memory.predict import MemoryRequest, predict_memory
    from fitwhisper.precision import run_precision

    precision = run_precision(None, None)

    def peak(batch: int) -> int:
        return predict_memory(MemoryRequest(
            model=str(work / "base"), per_device_train_batch_size=batch, precision=precision,
            max_label_tokens=16,
        )).peak_tensor_bytes  # fmt: skip

    cap = int(1.5 * peak(2))
    total = torch.cuda.get_device_properties(0).total_memory
    print(
        f"cap {cap / GIB:.2f} GiB of {total / GIB:.1f}; predicted peak at batch "
        f"{OOM_CLIPS_BATCH}: {peak(OOM_CLIPS_BATCH) / GIB:.2f} GiB, {precision}",
        flush=True,
    )
    torch.cuda.set_per_process_memory_fraction(cap / total)
    m = str(work / "m.jsonl")
    return cli([
        "train", "--model", str(work / "base"), "--output_dir", str(work / "oom"),
        "--train_manifest", m, "--eval_manifest", m, "--encoder_input", "full",
        "--per_device_train_batch_size", str(OOM_CLIPS_BATCH), "--per_device_eval_batch_size",
        str(OOM_CLIPS_BATCH), "--max_steps", "2", "--generation_max_length", "8",
        "--no-score_before", "--report_to", "none",
    ])  # fmt: skip


def _rank(argv: list[str]) -> int:
    """One of two torchrun ranks sharing the one GPU: cuda:0 for both, gloo between them
    (NCCL refuses two ranks on one device). accelerate keeps a process group it finds."""
    os.environ["LOCAL_RANK"] = "0"
    import torch.distributed as dist

    dist.init_process_group("gloo")
    from fitwhisper.cli import main as cli

    return cli(argv)


def _planner(out: Path, until: float, work: Path, models: list[str]) -> None:
    """Predicted against measured peak memory, one row per configuration, until `until`
    (wall clock); rows left over are listed as not run."""
    import torch

    cuda = torch.cuda.is_available()
    rows = _planner_rows(cuda, work, models)
    # Predictions trace fake tensors on the CPU: in worker processes, while the GPU measures.
    futures, pool = _predict_all(rows, cuda)
    done: list[dict] = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["spec"], r["method"], r["dtype"]), []).append(r)
    for key, group in groups.items():
        if time.time() > until - 10:
            for r in group:
                r["note"] = "not run: time budget"
            continue
        try:
            model = _planner_model(*key, cuda)
        except Exception as e:  # one failed build must not end the table
            for r in group:
                r["note"] = f"build failed: {type(e).__name__}: {str(e)[:80]}"
            continue
        for r in group:
            if time.time() > until - 5:
                r["note"] = "not run: time budget"
                continue
            _measure(model, r, cuda)
            print(json.dumps(r), flush=True)
        del model
        _free(cuda)
    for r, fut in zip(rows, futures, strict=True):
        try:
            pred = fut.result(timeout=max(1.0, until - time.time()))
            r["predicted"], r["predicted_total"], r["predict_s"] = pred
        except Exception as e:
            r["note"] = (r.get("note", "") + f" predict: {type(e).__name__}").strip()
        done.append(r)
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    out.write_text(json.dumps(done, indent=1))
    print(_planner_table(done, cuda))


def _planner_rows(cuda: bool, work: Path, models: list[str]) -> list[dict]:
    if not cuda:  # CPU: the fixture's tiny model (d_model 64), so the code path runs in CI
        return [dict(model="fixture tiny", spec=str(work / "tiny"), method=m, dtype="bf16",
                     batch=1, ckpt=False) for m in ("full", "lora")]  # fmt: skip
    rows = [
        dict(model=m, spec=f"openai/whisper-{m}", method=meth, dtype=d, batch=b, ckpt=c)
        for m in models for meth in ("full", "lora") for d in ("bf16", "fp16")
        for b in (1, 4) for c in (False, True)
    ]  # fmt: skip
    if importlib.util.find_spec("bitsandbytes") is not None:
        # bitsandbytes' 8-bit and 4-bit bases with LoRA (never measured before), in bf16.
        rows += [
            dict(model=m, spec=f"openai/whisper-{m}", method=meth, dtype="bf16", batch=b,
                 ckpt=c)
            for m in models for meth in QUANTISED for b in (1, 4) for c in (False, True)
        ]  # fmt: skip
    # Model by model (every method of the small shapes before the large ones), so the time
    # budget cuts the largest shapes, not a method.
    return sorted(rows, key=lambda r: models.index(r["model"]))


def _request(r: dict, cuda: bool):
    from fitwhisper.memory.predict import MemoryRequest

    return MemoryRequest(
        model=r["spec"], per_device_train_batch_size=r["batch"],
        precision=r["dtype"], gradient_checkpointing=r["ckpt"],
        training_method=r["method"], max_label_tokens=LABEL_TOKENS,
        device="cuda" if cuda else "cpu",
    )  # fmt: skip


def _predict_one(r: dict, cuda: bool) -> tuple[int, int, float]:
    from fitwhisper.memory.predict import predict_memory

    t0 = time.perf_counter()
    p = predict_memory(_request(r, cuda))
    return p.peak_tensor_bytes, p.total_bytes, time.perf_counter() - t0


def _predict_all(rows: list[dict], cuda: bool) -> tuple[list, object]:
    from concurrent.futures import Future, ProcessPoolExecutor

    if not cuda:  # CPU: the measurement needs the cores; predict in this process
        futures = []
        for r in rows:
            f: Future = Future()
            f.set_result(_predict_one(r, cuda))
            futures.append(f)
        return futures, None
    import multiprocessing

    workers = max(1, min(8, (os.cpu_count() or 2) - 2))
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_no_gpu
    )
    return [pool.submit(_predict_one, r, cuda) for r in rows], pool


def _no_gpu() -> None:
    # Prediction workers trace on the CPU; no CUDA context of theirs may take GPU memory.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""


def _planner_model(spec: str, method: str, dtype: str, cuda: bool):
    """The model as `fitwhisper train` prepares it (method_loading.py), random weights of the real
    shapes, built on the device: fp32 for full fine-tuning, a half base + fp32 LoRA."""
    import torch
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.config import ModelConfig, TrainConfig
    from fitwhisper.memory.architectures import whisper_config
    from fitwhisper.method import METHODS
    from fitwhisper.train.method_loading import load_kwargs, prepare_for_training

    config = whisper_config(spec)
    config._attn_implementation = "sdpa"
    config.use_cache = False
    req = _request({"spec": spec, "method": method, "dtype": dtype, "batch": 1,
                    "ckpt": False}, cuda)  # fmt: skip
    model_cfg = ModelConfig(
        model="gpu-check", method=METHODS[req.training_method].option, lora_r=req.lora_r,
        lora_alpha=2 * req.lora_r, lora_dropout=req.lora_dropout,
        lora_target_modules=tuple(req.lora_target_modules),
    )  # fmt: skip
    if method in QUANTISED:
        return _quantised_model(config, model_cfg, dtype)
    torch.manual_seed(0)
    try:  # built on the device: initialising large-v3 on the CPU takes far longer
        with torch.device("cuda" if cuda else "cpu"):
            m = WhisperForConditionalGeneration(config)
    except Exception as e:  # a transformers that cannot: build on the CPU, then move
        print(f"built on the CPU ({type(e).__name__}: {e})", flush=True)
        m = WhisperForConditionalGeneration(config).to("cuda" if cuda else "cpu")
    half = load_kwargs(model_cfg, dtype).get("dtype")
    if half is not None:
        m = m.to(half)
    return prepare_for_training(m, model_cfg, TrainConfig(learning_rate=1e-3))


def _quantised_model(config, model_cfg, dtype: str):
    """Random weights of the real shapes, saved and loaded back quantised as `train` loads
    a base (bitsandbytes quantises while loading), then prepared with LoRA adapters."""
    import torch
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.config import TrainConfig
    from fitwhisper.train.method_loading import load_kwargs, prepare_for_training

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="gpu-check-bnb-") as folder:
        WhisperForConditionalGeneration(config).to(torch.float16).save_pretrained(folder)
        kwargs = load_kwargs(model_cfg, dtype)
        m = WhisperForConditionalGeneration.from_pretrained(
            folder, attn_implementation="sdpa", **kwargs
        )
    m.config.use_cache = False
    return prepare_for_training(m, model_cfg, TrainConfig(learning_rate=1e-3))


def _measure(model, r: dict, cuda: bool) -> None:
    """One warm-up step (optimizer states), then the measured step; fills r in place."""
    import gc

    import torch

    device = torch.device("cuda" if cuda else "cpu")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    _set_checkpointing(base, r["ckpt"])
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    cfg = base.config
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[r["dtype"]]

    def step() -> None:
        x = torch.randn(r["batch"], cfg.num_mel_bins, 3000, device=device)
        y = torch.randint(0, cfg.vocab_size - 100, (r["batch"], LABEL_TOKENS), device=device)
        with torch.autocast(device.type, dtype=dtype):
            loss = model(input_features=x, labels=y).loss
        loss.backward()
        del loss
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        model.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    try:
        step()
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            r["measured"] = torch.cuda.max_memory_allocated()
            r["reserved"] = torch.cuda.max_memory_reserved()
        else:
            r["measured"] = _cpu_peak(model, opt, step)
    except torch.OutOfMemoryError:
        r["note"] = "measured: CUDA out of memory"
    finally:
        r["measure_s"] = round(time.perf_counter() - t0, 2)
        opt.state.clear()  # free the states before the next row
        model.zero_grad(set_to_none=True)
        _free(cuda)


def _cpu_peak(model, opt, step: Callable[[], None]) -> int:
    """bench/memory_prediction.py's CPU measure: held bytes + the profiler's peak."""
    import torch

    sys.path.insert(0, str(REPO / "bench"))
    from memory_prediction import _held_bytes, _peak_from_memory_events

    held = _held_bytes(model, opt)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        step()
    return held + _peak_from_memory_events(prof)


def _set_checkpointing(model, on: bool) -> None:
    from fitwhisper.models import checkpointing

    (checkpointing.enable if on else checkpointing.disable)(model)


def _free(cuda: bool) -> None:
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def _child(argv: list[str]) -> int:
    name, rest = argv[0], argv[1:]
    if name == "_fixture":
        _fixture(Path(rest[0]), int(rest[1]))
        return 0
    if name == "_oom":
        return _oom(Path(rest[0]))
    if name == "_rank":
        return _rank(rest)
    if name == "_planner":
        _planner(Path(rest[0]), float(rest[1]), Path(rest[2]), rest[3].split(","))
        return 0
    raise SystemExit(f"unknown child {name}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        sys.exit(_child(sys.argv[1:]))
    sys.exit(main())
