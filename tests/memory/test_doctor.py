"""`fitwhisper doctor`: the report's structure on this machine, and the GPU
verdicts computed from injected facts, so GPU cases are checked without a GPU."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fitwhisper.cli import main
from fitwhisper.memory.doctor import (
    GIB,
    METHODS,
    GpuFacts,
    GpuProcess,
    MachineFacts,
    doctor,
    format_report,
    gather_facts,
    parse_nvidia_smi,
)

VERSIONS = {"torch": "2.5.0", "transformers": "5.0.0", "peft": "0.14.0",
            "accelerate": "1.2.0", "bitsandbytes": None}  # fmt: skip


def _facts(free_gib: float, total_gib: float = 24.0, bf16: bool = True, bnb: bool = False,
           procs: tuple | None = ()) -> MachineFacts:  # fmt: skip
    gpu = GpuFacts(0, "NVIDIA GeForce RTX 4090", int(total_gib * GIB), int(free_gib * GIB),
                   (8, 9) if bf16 else (7, 5), bf16)  # fmt: skip
    return MachineFacts(
        gpus=(gpu,),
        gpu_processes=procs,
        process_source="nvidia-smi" if procs is not None else "neither nvidia-smi nor pynvml",
        cpu_total_bytes=64 * GIB,
        cpu_available_bytes=60 * GIB,
        versions={**VERSIONS, "bitsandbytes": "0.45.0" if bnb else None},
        cuda_version="12.4",
        cudnn_version="90100",
        platform="Linux-test",
    )


# Fake predictions (GiB) by method: what the report does with them is under test.
NEED = {"full": 20.0, "LoRA": 10.0, "8-bit+LoRA": 4.0, "4-bit+LoRA": 3.0}


def _predict(calls: list):
    def predict(model: str, **fields) -> int:
        calls.append({"model": model, **fields})
        method = next(
            name for name, flags in reversed(METHODS.items())
            if all(fields.get(k) == v for k, v in flags.items())
        )  # fmt: skip
        return int(NEED[method] * GIB)

    return predict


def test_gpu_verdicts_against_free_memory() -> None:
    calls: list = []
    # 24 GiB card, 12 GiB free: another process holds 12 GiB.
    procs = (GpuProcess(4242, "python", 12 * GIB),)
    report = doctor(_facts(12.0, procs=procs), models=["openai/whisper-small"],
                    predict=_predict(calls))  # fmt: skip
    verdicts = {r["method"]: r for r in report["verdicts"]}
    assert verdicts["full"]["verdict"] == "fits only with the GPU to itself"
    assert "12.0 GiB" in verdicts["full"]["why"]
    assert verdicts["LoRA"]["verdict"] == "fits"
    assert verdicts["8-bit+LoRA"]["verdict"] == "fits only with bitsandbytes"
    # Predictions asked at the stated settings, with bf16 on an Ampere+ card.
    assert {c["per_device_train_batch_size"] for c in calls} == {1}
    assert all(c["gradient_checkpointing"] and c["precision"] == "bf16" for c in calls)
    assert report["verdict_settings"]["precision"] == "bf16 mixed"
    text = format_report(report)
    assert "GPU 0: NVIDIA GeForce RTX 4090 (compute 8.9), 24.0 GiB total, 12.0 GiB free" in text
    assert "pid    4242" in text and "12.00 GiB" in text
    assert "8-bit/4-bit loading: bitsandbytes is not installed" in text
    assert "batch 1 with gradient checkpointing, bf16 mixed" in text


def test_does_not_fit_tight_fp16_and_bitsandbytes_present() -> None:
    calls: list = []
    report = doctor(_facts(9.0, total_gib=16.0, bf16=False, bnb=True, procs=None),
                    models=["openai/whisper-large-v3"], predict=_predict(calls))  # fmt: skip
    verdicts = {r["method"]: r["verdict"] for r in report["verdicts"]}
    assert verdicts == {"full": "does not fit", "LoRA": "fits only with the GPU to itself",
                        "8-bit+LoRA": "fits", "4-bit+LoRA": "fits"}  # fmt: skip
    assert {c["precision"] for c in calls} == {"fp16"}  # T4-like: no bf16
    assert report["support"]["8-bit/4-bit (bitsandbytes)"] is True
    assert "cannot see them" in format_report(report)
    tight = doctor(_facts(10.5, bnb=True), models=["x"], predict=_predict([]))
    assert {r["method"]: r["verdict"] for r in tight["verdicts"]}["LoRA"] == "fits, tight"


def test_cpu_only_report_and_json(capsys: pytest.CaptureFixture) -> None:
    facts = gather_facts()
    if facts.gpus:
        pytest.skip("this test checks the report of a machine without a GPU")
    assert main(["doctor", "--json", "--models", "openai/whisper-tiny"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gpus"] == [] and report["verdicts"] == []
    assert report["cpu_memory"]["total_bytes"] >= report["cpu_memory"]["available_bytes"] > 0
    assert report["versions"]["torch"] and "bitsandbytes" in report["versions"]
    assert "limited by RAM and time" in report["verdict_note"]
    assert report["support"]["cuda"] is False
    # Without a GPU, bf16 autocasts on the CPU and bitsandbytes 0.50+ trains 8-bit/4-bit.
    assert report["support"]["bf16"] is True and report["support"]["fp16"] is False
    bnb = report["versions"]["bitsandbytes"]
    cpu_bnb = bnb is not None and tuple(map(int, bnb.split(".")[:2])) >= (0, 50)
    assert report["support"]["8-bit/4-bit (bitsandbytes)"] is cpu_bnb
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "GPU: none visible to torch" in text and "CPU memory:" in text
    assert "cannot check: GPU memory" in text


def test_parse_nvidia_smi() -> None:
    rows = parse_nvidia_smi("1234, /usr/bin/python3, 2048\n77, Xorg, [N/A]\n")
    assert rows == (
        GpuProcess(1234, "/usr/bin/python3", 2048 * 2**20),
        GpuProcess(77, "Xorg", None),
    )
    assert parse_nvidia_smi("") == ()


def test_other_models_are_traced_once_and_cached(
    small_config_dir, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fitwhisper.memory import doctor as doctor_mod
    from fitwhisper.memory.predict import predict_memory

    monkeypatch.setenv("FITWHISPER_CACHE", str(tmp_path))
    monkeypatch.setattr(doctor_mod, "METHODS", {"LoRA": {"training_method": "lora"}})  # one trace
    model = str(small_config_dir)  # not in the shipped table
    first = doctor(_facts(6.0), models=[model])
    assert list(tmp_path.glob("doctor/predictions-*.json"))
    expected = predict_memory(model=model, precision="bf16", training_method="lora",
                              **doctor_mod.VERDICT_SETTINGS)  # fmt: skip
    assert first["verdicts"][0]["predicted_bytes"] == expected.total_bytes

    def no_tracing(*a, **k):
        raise AssertionError("a cached prediction was traced again")

    monkeypatch.setattr("fitwhisper.memory.predict.predict_memory", no_tracing)
    assert doctor(_facts(6.0), models=[model])["verdicts"] == first["verdicts"]


def test_shipped_table_covers_the_table_and_matches_the_predictor() -> None:
    """Regenerate with `python -m fitwhisper.memory.doctor` when this fails."""
    from fitwhisper.memory.doctor import TABLE_MODELS, VERDICT_SETTINGS, _key, _shipped_table
    from fitwhisper.memory.predict import predict_memory

    shipped = _shipped_table()["predictions"]
    for precision in ("bf16", "fp16"):
        for model in TABLE_MODELS:
            for flags in METHODS.values():
                assert _key(model, {"precision": precision, **VERDICT_SETTINGS, **flags}) in shipped
    # Spot checks against the predictor as it is now (the cheap rows; each traces once).
    for model, flags in (
        ("openai/whisper-tiny", {"training_method": "full"}),
        ("openai/whisper-base", {"training_method": "lora"}),
    ):
        fields = {"precision": "fp16", **VERDICT_SETTINGS, **flags}
        assert shipped[_key(model, fields)] == predict_memory(model=model, **fields).total_bytes


def test_several_gpus_get_the_launch_command_and_the_verdicts_judge_the_training_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two GPUs, GPU 1 with more free memory: plain `train` uses GPU 0, so the verdicts judge
    GPU 0 (they judged the roomiest before); the report names torchrun for both GPUs, the
    GPU that bounds a data-parallel run, and how to train on GPU 1 alone."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    one = _facts(6.0)
    roomy = GpuFacts(1, "NVIDIA GeForce RTX 4090", 24 * GIB, 20 * GIB, (8, 9), True)
    facts = dataclasses.replace(one, gpus=(one.gpus[0], roomy))
    report = doctor(facts, models=["openai/whisper-small"], predict=_predict([]))
    assert report["verdict_settings"]["gpu"] == 0
    # LoRA (10 GiB) would fit GPU 1's 20 GiB free, not GPU 0's 6.
    assert {r["method"]: r["verdict"] for r in report["verdicts"]}["LoRA"] != "fits"
    text = format_report(report)
    assert "torchrun --nproc_per_node 2 -m fitwhisper train ..." in text
    assert "fitwhisper plan --model MODEL --num_gpus 2" in text
    assert "GPU 0's 6.0 GiB free bounds the run" in text
    assert "CUDA_VISIBLE_DEVICES=1 fitwhisper train ... trains there" in text
    # Under a launcher, each rank's own GPU is the one judged.
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert doctor(facts, models=["x"], predict=_predict([]))["verdict_settings"]["gpu"] == 1
    # One GPU: no launcher line.
    alone = format_report(doctor(one, models=["x"], predict=_predict([])))
    assert "torchrun" not in alone and "one GPU: fitwhisper train ..." in alone
