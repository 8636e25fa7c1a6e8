"""bench/gpu_check.sh runs to the end without CUDA (CUDA-only steps skipped with their reason),
and `make gpu-wheels` carries every third-party module fitwhisper imports that the GPU image
lacks (a static check: nothing is downloaded)."""

import ast
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_wheels", REPO / "bench" / "gpu_wheels.py")
gpu_wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_wheels)

# What runs without CUDA; the rest must be skipped, for want of CUDA or of a package.
RUN_ON_CPU = {"fixture", "bf16-encoder-cache", "evaluate-fp16-stored", "torchrun-2proc-scoring",
              "planner"}  # fmt: skip


@pytest.mark.slow
def test_gpu_check_runs_to_the_end_on_cpu(tmp_path):
    report = tmp_path / "RESULTS-gpu.md"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_SITE": str(tmp_path / "site")}
    proc = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), "--report", str(report),
         "--work", str(tmp_path / "w"), "--budget_s", "300"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    text = report.read_text()
    for section in ("# GPU check results", "## Machine", "## Steps", "## Planner against"):
        assert section in text
    step_row = r"^\| ([a-z0-9-]+) \| (OK|FAIL|SKIPPED) \| [^|]+\| [^|]+\| (.*) \| [0-9.]+ \|$"
    rows = re.findall(step_row, text, re.M)
    names = [name for name, _, _ in rows]
    assert names[0] == "fixture" and names[-1] == "planner" and len(names) == 14
    assert "speed" in names  # CUDA-only: skipped here
    for name, status, why in rows:
        assert f"== {name} rc=" in proc.stdout
        if name in RUN_ON_CPU:
            assert status == "OK", (name, why)
        else:
            assert status == "SKIPPED", (name, why)
            assert why.startswith("no CUDA: ") or why.endswith(" not installed"), (name, why)
    # CPU rows are labelled as CPU figures and measured, never passed off as GPU ones.
    assert "No CUDA: CPU figures, not GPU ones" in text
    assert re.search(r"^\| fixture tiny \| full \| bf16 \| 1 \| off \| [0-9.]+ \| [0-9.]+ \|",
                     text, re.M)  # fmt: skip


def test_report_path_is_required_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("with CUDA the default report path is bench/RESULTS-gpu.md")
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_REPORT"}
    env["PYTHONPATH"] = str(REPO / "src")
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--work", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no CUDA here: give --report FILE" in proc.stderr


def _third_party_imports() -> set[str]:
    """Top-level modules imported anywhere in src/fitwhisper, stdlib and fitwhisper left out."""
    found = set()
    for path in (REPO / "src" / "fitwhisper").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"fitwhisper", "__future__"}


def test_gpu_wheels_carry_every_import_the_gpu_image_lacks():
    imports = _third_party_imports()
    covered = gpu_wheels.GPU_IMAGE | gpu_wheels.carried_modules() | set(gpu_wheels.NOT_CARRIED)
    assert imports - covered == set(), "add these to bench/gpu_wheels.py's WHEELS or NOT_CARRIED"
    # Used through a library, not imported by fitwhisper: bitsandbytes (peft), deepspeed.
    assert {"bitsandbytes", "deepspeed"} <= gpu_wheels.carried_modules()
    # Every carried distribution is pinned, so `make gpu-wheels` downloads known versions.
    pins = gpu_wheels.read_pins(REPO / "constraints.txt")
    for dist in [*gpu_wheels.WHEELS, *gpu_wheels.BUILT]:
        assert gpu_wheels._norm(dist) in pins, dist


def test_gpu_wheels_bring_their_own_requirements():
    """`pip install --no-deps` installs nothing else: each carried wheel's requirements are in
    the image or carried too (read from this environment's metadata where installed)."""
    carried = {gpu_wheels._norm(d) for d in [*gpu_wheels.WHEELS, *gpu_wheels.BUILT]}
    image = {gpu_wheels._norm(m) for m in gpu_wheels.GPU_IMAGE}
    checked = 0
    for dist in [*gpu_wheels.WHEELS, *gpu_wheels.BUILT]:
        try:
            requires = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        checked += 1
        for line in requires:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            assert gpu_wheels._norm(req.name) in carried | image, f"{dist} needs {req.name}"
    assert checked >= 10


def test_a_step_past_its_timeout_is_ended_and_fails(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up
    spec.loader.exec_module(gpu_check)
    # A shell that starts a child and waits: the whole process group must go.
    step = gpu_check.Step("hang", 60, lambda c: ["bash", "-c", "sleep 60 & wait"])
    ctx = gpu_check.Context(work=tmp_path, cuda=False)
    monkeypatch.setattr(gpu_check, "STEP_MIN_S", 1)  # the hang, not the floor, is tested
    result = gpu_check._run_step(step, ctx, timeout_s=2)
    assert (result.status, result.rc) == ("FAIL", 124)
    assert result.seconds < 30
    assert result.why == "timed out after 2 s (a hang is a finding)"
    # Less time than a step needs: not started at all.
    monkeypatch.setattr(gpu_check, "STEP_MIN_S", 10)
    result = gpu_check._run_step(step, ctx, timeout_s=9)
    assert (result.status, result.rc, result.why) == ("FAIL", None, "no time left in the budget")
