"""What this machine can train (SPEC M1): `fitwhisper doctor [--json]`.

It reports the devices with their total and free memory, the processes already holding GPU
memory (from nvidia-smi or pynvml, when either is there), library versions, precision and
8-bit support, and for each model size and method a verdict: does one training step fit
the free memory of the roomiest GPU, at the smallest settings (per-device batch 1, gradient
checkpointing, bf16 or fp16 mixed precision, AdamW, 30 s audio, 448 label tokens)? The
figures come from `predict_memory` (predict.py); `fitwhisper plan` shows any one of them
broken down, and finds the fastest settings that fit.

The report is computed from `MachineFacts`, a plain record of what was found, so that GPU
cases can be checked on a machine without one. Predictions are cached on disk (keyed by
request and library versions): the first run traces 28 configurations (about 20-30 s on
two CPU cores), later runs read them back.

Without a GPU it reports CPU memory and gives no verdicts: CPU training is bounded by RAM
and by time (hours per epoch even for small models), and `fitwhisper plan --device cpu`
predicts a CPU run's tensor bytes when asked.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

GIB = 2**30

# The table: the standard sizes (multilingual), turbo and Breeze-ASR-25.
MODELS: tuple[str, ...] = (
    "openai/whisper-tiny",
    "openai/whisper-base",
    "openai/whisper-small",
    "openai/whisper-medium",
    "openai/whisper-large-v3",
    "openai/whisper-large-v3-turbo",
    "MediaTek-Research/Breeze-ASR-25",
)
# method name -> MemoryRequest fields
METHODS: dict[str, dict[str, bool]] = {
    "full": {},
    "LoRA": {"use_lora": True},
    "8-bit+LoRA": {"use_8bit": True, "use_lora": True},
    "4-bit+LoRA": {"use_4bit": True, "use_lora": True},
}
# Settings every verdict assumes: the least memory short of a smaller model or method.
VERDICT_SETTINGS: dict[str, Any] = {
    "per_device_train_batch_size": 1,
    "gradient_checkpointing": True,
    "optim": "adamw_torch",
    "max_audio_len": 30.0,
    "max_label_tokens": 448,
}
TIGHT = 0.9  # a prediction above this share of free memory fits, but with little margin


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    total_bytes: int
    free_bytes: int
    capability: tuple[int, int]
    bf16: bool


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: int | None


@dataclass(frozen=True)
class MachineFacts:
    """Everything the report is computed from."""

    gpus: tuple[GpuFacts, ...]
    # None: no way to list them here (`process_source` says why).
    gpu_processes: tuple[GpuProcess, ...] | None
    process_source: str
    cpu_total_bytes: int | None
    cpu_available_bytes: int | None
    versions: dict[str, str | None]  # library -> version, None when not installed
    cuda_version: str | None  # the CUDA torch was built with
    cudnn_version: str | None
    platform: str = field(default_factory=platform.platform)

    @property
    def bitsandbytes(self) -> bool:
        return self.versions.get("bitsandbytes") is not None


def doctor(
    facts: MachineFacts | None = None,
    *,
    models: Sequence[str] = MODELS,
    predict: Callable[..., int] | None = None,
) -> dict[str, Any]:
    """The report as a dict (what `--json` prints); `format_report` renders it.

    `predict(model=..., **fields)` returns predicted total bytes; default: the cached
    `predict_memory`.
    """
    facts = facts or gather_facts()
    predict = predict or _cached_total
    report: dict[str, Any] = {
        "platform": facts.platform,
        "gpus": [asdict(g) for g in facts.gpus],
        "gpu_processes": None
        if facts.gpu_processes is None
        else [asdict(p) for p in facts.gpu_processes],
        "process_source": facts.process_source,
        "cpu_memory": {
            "total_bytes": facts.cpu_total_bytes,
            "available_bytes": facts.cpu_available_bytes,
        },  # fmt: skip
        "versions": facts.versions,
        "cuda_version": facts.cuda_version,
        "cudnn_version": facts.cudnn_version,
        "support": _support(facts),
        "cannot_check": _cannot_check(facts),
        "verdicts": [],
    }
    if not facts.gpus:
        report["verdict_note"] = (
            "no CUDA GPU: no verdicts. Training on CPU is limited by RAM and time (fp32, "
            "hours per epoch beyond tiny/base); `fitwhisper plan --device cpu` predicts a CPU "
            "run's memory"
        )
        return report
    gpu = max(facts.gpus, key=lambda g: g.free_bytes)
    precision = "bf16" if gpu.bf16 else "fp16"
    report["verdict_settings"] = {
        **VERDICT_SETTINGS,
        "precision": f"{precision} mixed",
        "gpu": gpu.index,
        "free_bytes": gpu.free_bytes,
    }
    report["verdict_note"] = (
        f"one training step at batch 1 with gradient checkpointing, {precision} mixed "
        f"precision, AdamW, 30 s audio, 448 label tokens, against GPU {gpu.index}'s "
        f"{gpu.free_bytes / GIB:.1f} GiB free (of {gpu.total_bytes / GIB:.1f} GiB); "
        "`fitwhisper plan` shows any row broken down"
    )
    for model in models:
        for method, flags in METHODS.items():
            need = predict(model=model, precision=precision, **VERDICT_SETTINGS, **flags)
            verdict, why = _verdict(need, gpu, facts, quantised="use_8bit" in flags
                                    or "use_4bit" in flags)  # fmt: skip
            report["verdicts"].append(
                {
                    "model": model,
                    "method": method,
                    "predicted_bytes": need,
                    "verdict": verdict,
                    "why": why,
                }  # fmt: skip
            )
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as text, one section per question."""
    out = [f"platform: {report['platform']}"]
    gpus = report["gpus"]
    if gpus:
        for g in gpus:
            out.append(
                f"GPU {g['index']}: {g['name']} (compute {g['capability'][0]}.{g['capability'][1]})"
                f", {g['total_bytes'] / GIB:.1f} GiB total, {g['free_bytes'] / GIB:.1f} GiB free"
            )
    else:
        out.append("GPU: none visible to torch (no CUDA)")
    cpu = report["cpu_memory"]
    if cpu["total_bytes"]:
        avail = cpu["available_bytes"]
        out.append(
            f"CPU memory: {cpu['total_bytes'] / GIB:.1f} GiB total"
            + (f", {avail / GIB:.1f} GiB available" if avail is not None else "")
        )
    procs = report["gpu_processes"]
    if procs is None:
        out.append(f"processes on the GPU: cannot see them ({report['process_source']})")
    elif not procs:
        out.append(f"processes on the GPU: none ({report['process_source']})")
    else:
        out.append(f"processes on the GPU ({report['process_source']}):")
        for p in procs:
            used = "?" if p["used_bytes"] is None else f"{p['used_bytes'] / GIB:.2f} GiB"
            out.append(f"  pid {p['pid']:>7}  {used:>10}  {p['name']}")
    v = report["versions"]
    libs = ", ".join(f"{k} {v[k] or 'not installed'}" for k in v)
    out.append(f"libraries: {libs}")
    out.append(
        f"CUDA (torch built with): {report['cuda_version'] or 'none'}, "
        f"cuDNN: {report['cudnn_version'] or 'none'}"
    )
    s = report["support"]
    out.append("support: " + ", ".join(f"{k} {'yes' if on else 'no'}" for k, on in s.items()))
    for line in report["cannot_check"]:
        out.append(f"cannot check: {line}")
    out.append("")
    out.append(f"verdicts: {report['verdict_note']}")
    if report["verdicts"]:
        width = max(len(r["model"]) for r in report["verdicts"])
        for r in report["verdicts"]:
            out.append(
                f"  {r['model']:{width}}  {r['method']:10} {r['predicted_bytes'] / GIB:6.1f} GiB"
                f"  {r['verdict']}" + (f" ({r['why']})" if r["why"] else "")
            )
    return "\n".join(out)


def gather_facts() -> MachineFacts:
    """Look at this machine: torch's view of the GPUs, nvidia-smi/pynvml, /proc/meminfo."""
    import torch

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            props = torch.cuda.get_device_properties(i)
            gpus.append(
                GpuFacts(
                    index=i,
                    name=props.name,
                    total_bytes=int(total),
                    free_bytes=int(free),
                    capability=(props.major, props.minor),
                    bf16=props.major >= 8,  # Ampere or newer
                )
            )
    procs, source = _gpu_processes()
    total, available = _cpu_memory()
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return MachineFacts(
        gpus=tuple(gpus),
        gpu_processes=procs,
        process_source=source,
        cpu_total_bytes=total,
        cpu_available_bytes=available,
        versions=_versions(),
        cuda_version=torch.version.cuda,
        cudnn_version=str(cudnn) if cudnn else None,
    )


# --- verdicts -------------------------------------------------------------------------------


def _verdict(need: int, gpu: GpuFacts, facts: MachineFacts, *, quantised: bool):
    if quantised and not facts.bitsandbytes:
        if need <= gpu.free_bytes:
            return "fits only with bitsandbytes", "pip install 'fitwhisper[gpu]'"
        return "does not fit", f"needs {need / GIB:.1f} GiB, and bitsandbytes"
    if need <= TIGHT * gpu.free_bytes:
        return "fits", ""
    if need <= gpu.free_bytes:
        return "fits, tight", f"{need / gpu.free_bytes:.0%} of free memory"
    if need <= gpu.total_bytes:
        held = gpu.total_bytes - gpu.free_bytes
        return (
            "fits only with the GPU to itself",
            f"other processes hold {held / GIB:.1f} GiB",
        )
    return "does not fit", f"{need / GIB:.1f} GiB > {gpu.total_bytes / GIB:.1f} GiB"


def _support(facts: MachineFacts) -> dict[str, bool]:
    cuda = bool(facts.gpus)
    return {
        "cuda": cuda,
        "fp16": cuda,
        "bf16": any(g.bf16 for g in facts.gpus),
        "8-bit/4-bit (bitsandbytes)": cuda and facts.bitsandbytes,
    }


def _cannot_check(facts: MachineFacts) -> list[str]:
    lines = []
    if not facts.gpus:
        lines.append("GPU memory, precision support and GPU verdicts (no CUDA GPU)")
    if facts.gpu_processes is None and facts.gpus:
        lines.append(f"which processes hold GPU memory ({facts.process_source})")
    if facts.gpus and not facts.bitsandbytes:
        lines.append("8-bit/4-bit loading: bitsandbytes is not installed")
    if facts.cpu_total_bytes is None:
        lines.append("CPU memory (no /proc/meminfo and no psutil)")
    return lines


def _cached_total(model: str, **fields: Any) -> int:
    """predict_memory(...).total_bytes, read from the disk cache when it is there."""
    from fitwhisper.memory.predict import predict_memory

    path = _cache_path()
    key = json.dumps({"model": model, **fields}, sort_keys=True)
    cache: dict[str, int] = {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    if key not in cache:
        cache[key] = predict_memory(model=model, **fields).total_bytes
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(cache, indent=1))
        except OSError:
            pass  # a read-only cache only costs time
    return int(cache[key])


def _cache_path() -> Path:
    import fitwhisper
    from fitwhisper.models.offline import cache_dir

    v = _versions()
    tag = f"{fitwhisper.__version__}-torch{v.get('torch')}-tf{v.get('transformers')}"
    return cache_dir() / "doctor" / f"predictions-{tag}.json"


# --- facts --------------------------------------------------------------------------------


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "peft", "accelerate", "bitsandbytes"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _gpu_processes() -> tuple[tuple[GpuProcess, ...] | None, str]:
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            res = subprocess.run(
                [
                    smi,
                    "--query-compute-apps=pid,process_name,used_memory",
                    "--format=csv,noheader,nounits",
                ],  # fmt: skip
                capture_output=True,
                text=True,
                timeout=10,
            )
            if res.returncode == 0:
                return parse_nvidia_smi(res.stdout), "nvidia-smi"
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None, "neither nvidia-smi nor pynvml is available"
    try:
        pynvml.nvmlInit()
        procs = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                procs.append(GpuProcess(p.pid, _process_name(p.pid), p.usedGpuMemory))
        return tuple(procs), "pynvml"
    except Exception as e:  # NVML errors vary by driver; report, do not fail the doctor
        return None, f"pynvml failed: {e}"


def parse_nvidia_smi(text: str) -> tuple[GpuProcess, ...]:
    """Rows of `nvidia-smi --query-compute-apps=pid,process_name,used_memory` (MiB)."""
    procs = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        used = int(parts[-1]) * 2**20 if parts[-1].isdigit() else None
        procs.append(GpuProcess(int(parts[0]), ",".join(parts[1:-1]), used))
    return tuple(procs)


def _process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _cpu_memory() -> tuple[int | None, int | None]:
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        values = {}
        for line in meminfo.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                values[key] = int(rest.split()[0]) * 1024
        return values.get("MemTotal"), values.get("MemAvailable")
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)
    except ImportError:
        return (
            (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), None)
            if hasattr(os, "sysconf")
            else (None, None)
        )
