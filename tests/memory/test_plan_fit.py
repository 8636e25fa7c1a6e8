"""`fitwhisper plan --gpu_memory`, plan.json into `train --plan`, and `train --auto_fit`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitwhisper.cli import build_parser, main
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.memory.fit import resolve_plan


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_plan_lora_defaults_are_trains():
    from fitwhisper.cli.flags import build_config
    from fitwhisper.memory.options import PlanOptions

    opts = build_config(PlanOptions, build_parser().parse_args(["plan"]))
    assert opts.lora_r == ModelConfig().lora_r
    assert opts.lora_target_modules == ModelConfig().lora_target_modules


@pytest.fixture(scope="module")
def plan_file(small_config_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    argv = ["plan", "--model", str(small_config_dir), "--gpu-memory", "1GB", "--gpu", "A100"]
    assert main([*argv, "--max_label_tokens", "16", "--output", str(out), "-q"]) == 0
    return out


def test_plan_json_holds_the_settings_train_takes(plan_file, small_config_dir):
    d = json.loads(plan_file.read_text())
    s = d["settings"]
    assert s["model"] == str(small_config_dir) and s["bf16"] and not s["fp16"]
    assert s["per_device_train_batch_size"] * s["gradient_accumulation_steps"] == 16
    assert d["predicted_gib"] <= d["usable_gib"] == pytest.approx(0.9, abs=1e-3)
    assert s["lora_r"] == ModelConfig().lora_r


def test_plan_json_flag_prints_the_recommendation(plan_file, small_config_dir, capsys):
    argv = ["plan", "--model", str(small_config_dir), "--gpu-memory", "1GB", "--gpu", "A100"]
    assert main([*argv, "--max_label_tokens", "16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["settings"] == json.loads(plan_file.read_text())["settings"]
    assert d["prediction"]["total_bytes"] <= d["usable_gib"] * 2**30
    assert all(r["reason"] for r in d["rejected"])


def test_plan_round_trips_into_trains_config(plan_file, tmp_path, monkeypatch):
    import fitwhisper.precision as precision
    import fitwhisper.train as train_module

    s = json.loads(plan_file.read_text())["settings"]
    train_cfg = TrainConfig(
        train_manifest="t.jsonl", output_dir=str(tmp_path / "run"), plan=str(plan_file)
    )
    model_cfg, train_cfg = resolve_plan(ModelConfig(), DataConfig(), train_cfg, explicit=set())
    assert model_cfg.model == s["model"] and model_cfg.use_lora == s["use_lora"]
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "optim", "bf16"):
        assert getattr(train_cfg, key) == s[key]
    # On an Ampere GPU the planned options pass train's validation; on this CPU they may not.
    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    train_module.validate(model_cfg, DataConfig(), train_cfg)


def test_train_refuses_flags_that_contradict_the_plan(plan_file, tmp_path, capsys):
    s = json.loads(plan_file.read_text())["settings"]
    other = s["per_device_train_batch_size"] + 1
    rc = main(
        ["train", "--plan", str(plan_file), "--train_manifest", "t.jsonl",
         "--output_dir", str(tmp_path / "run"), "--per_device_train_batch_size", str(other)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    assert f"error: options contradict the plan {plan_file}:" in err
    assert f"--per_device_train_batch_size {other}, the plan says " in err


def test_a_file_that_is_not_a_plan_is_refused(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"settings": {"model": "x"}}')
    with pytest.raises(ConfigError, match="is not a fitwhisper plan"):
        resolve_plan(ModelConfig(), DataConfig(), TrainConfig(plan=str(bad)), explicit=set())


@pytest.mark.skipif(_cuda(), reason="checks the message on a machine without a GPU")
def test_auto_fit_without_a_gpu_says_it_plans_for_gpus(tmp_path, capsys):
    rc = main(["train", "--auto-fit", "--train_manifest", "t.jsonl",
               "--output_dir", str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1
    assert "error: --auto_fit plans GPU memory, and no CUDA GPU is visible" in err
    assert "--plan plan.json" in err


@pytest.mark.skipif(_cuda(), reason="checks the message on a machine without a GPU")
def test_plan_fit_without_a_gpu_asks_for_its_memory(small_config_dir, capsys):
    assert main(["plan", "--model", str(small_config_dir), "--fit"]) == 1
    err = capsys.readouterr().err
    assert "error: no CUDA GPU is visible to plan for" in err
    assert "hint: pass the GPU's memory: --gpu_memory 8GB" in err


@pytest.mark.slow
def test_large_v2_on_8gb_is_recommended_without_a_download(monkeypatch, tmp_path, capsys):
    """Acceptance 4: the shipped architecture, nothing resolved or downloaded."""
    import fitwhisper.models.resolve as resolve

    def no_download(*a, **k):
        raise AssertionError("the planner tried to resolve a model")

    monkeypatch.setattr(resolve, "resolve_model", no_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    argv = ["plan", "--gpu-memory", "8GB", "--model", "openai/whisper-large-v2", "--gpu", "A100"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("recommended for openai/whisper-large-v2 on a 8.00 GiB GPU")
    assert "effective batch = " in out and "= 16\n" in out
    assert "full, batch 1 x 16 accumulation, checkpointing, adamw_torch: does not fit" in out
    assert "predicted peak on the device" in out  # the breakdown explains it
    assert not (tmp_path / "empty-hf").exists()


def test_auto_fit_keeps_the_effective_batch_and_the_named_method(small_config_dir, monkeypatch):
    import fitwhisper.memory.search as search_module
    import fitwhisper.precision as precision

    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(search_module, "detected_gpu_memory", lambda: 2**30)
    model_cfg = ModelConfig(model=str(small_config_dir), use_lora=True)
    train_cfg = TrainConfig(
        auto_fit=True, per_device_train_batch_size=4, gradient_accumulation_steps=2
    )
    data_cfg = DataConfig(max_label_tokens=16)
    m, t = resolve_plan(model_cfg, data_cfg, train_cfg, explicit={"use_lora", "model"})
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps == 8
    assert m.use_lora and not (m.use_8bit or m.use_4bit)
    assert t.bf16 and not t.fp16  # train's precision rule on an Ampere GPU
    # Half a GiB: below the CUDA context alone, so nothing fits, and it says so.
    with pytest.raises(ConfigError, match="nothing fits 0.50 GiB"):
        resolve_plan(
            model_cfg,
            data_cfg,
            TrainConfig(auto_fit=True, gpu_memory="0.5GB"),
            explicit={"use_lora", "model"},
        )


def test_plan_help_lists_the_search_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for flag in ("--gpu_memory", "--gpu-memory", "--fit", "--effective_batch_size", "--margin",
                 "--allow_methods", "--output", "--presets", "--gpu NAME", "--fp32"):  # fmt: skip
        assert flag in out


def test_a_plan_for_one_gpu_is_refused_under_a_two_process_launch(plan_file, tmp_path,
                                                                  monkeypatch):  # fmt: skip
    """A plan's memory is per GPU of the world it was made for; under torchrun with 2
    processes a one-GPU plan is refused, naming both and the plan to make instead."""
    train_cfg = TrainConfig(train_manifest="t.jsonl", output_dir=str(tmp_path / "r"),
                            plan=str(plan_file))  # fmt: skip
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"is for 1 GPU\(s\).*this run has 2 process") as e:
        resolve_plan(ModelConfig(), DataConfig(), train_cfg, explicit=set())
    assert "fitwhisper plan --num_gpus 2" in e.value.hint


def test_a_two_gpu_zero_plan_sets_the_stage_and_needs_its_launch(small_config_dir, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    out = tmp_path / "plan.json"
    # 2 GB: ZeRO-2's two reduce buckets of 2e8 elements alone take 0.75 GiB in bf16.
    argv = ["plan", "--model", str(small_config_dir), "--gpu-memory", "2GB", "--gpu", "A100",
            "--num_gpus", "2", "--deepspeed", "zero2", "--max_label_tokens", "16"]  # fmt: skip
    assert main([*argv, "--output", str(out), "-q"]) == 0
    train_cfg = TrainConfig(train_manifest="t.jsonl", output_dir=str(tmp_path / "r"),
                            plan=str(out))  # fmt: skip
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="is for 2 GPU") as e:  # plain python: 1 process
        resolve_plan(ModelConfig(), DataConfig(), train_cfg, explicit=set())
    assert "torchrun --nproc_per_node 2 -m fitwhisper train ... --deepspeed zero2" in e.value.hint
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    _, t = resolve_plan(ModelConfig(), DataConfig(), train_cfg, explicit=set())
    assert t.deepspeed == "zero2"
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps * 2 == 16


def test_auto_fit_under_a_launch_plans_each_gpu_for_the_whole_runs_batch(small_config_dir,
                                                                         monkeypatch):  # fmt: skip
    """Under torchrun with 2 processes, --auto_fit keeps the whole run's effective batch
    (per-device x accumulation x 2) and plans each GPU's memory as a 2-GPU run."""
    import fitwhisper.memory.search as search_module
    import fitwhisper.precision as precision

    seen = {}
    real = search_module.search

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(search_module, "detected_gpu_memory", lambda: 2**30)
    monkeypatch.setattr(search_module, "search", spy)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    train_cfg = TrainConfig(auto_fit=True, per_device_train_batch_size=4,
                            gradient_accumulation_steps=2)  # fmt: skip
    m, t = resolve_plan(ModelConfig(model=str(small_config_dir), use_lora=True),
                        DataConfig(max_label_tokens=16), train_cfg,
                        explicit={"use_lora", "model"})  # fmt: skip
    assert seen["num_gpus"] == 2 and seen["num_nodes"] == 1
    assert seen["effective_batch_size"] == 16
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps * 2 == 16


@pytest.mark.parametrize("installed", [True, False])
def test_auto_fit_on_eight_gpus_picks_zero2_when_ddp_does_not_fit(installed, monkeypatch):
    """whisper-small in full on 8 x 5 GB: DDP's second copy of the gradients does not fit,
    ZeRO-2 does; the run takes the stage, or says deepspeed is missing for it."""
    import importlib.util

    import fitwhisper.memory.search as search_module
    import fitwhisper.precision as precision

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real_find_spec("json") if installed else None)
                        if name == "deepspeed" else real_find_spec(name, *a))  # fmt: skip
    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(search_module, "detected_gpu_memory", lambda: 5 * 2**30)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    train_cfg = TrainConfig(auto_fit=True, per_device_train_batch_size=2)
    model_cfg = ModelConfig(model="openai/whisper-small")
    if not installed:
        with pytest.raises(ConfigError, match="DeepSpeed zero2 would, and deepspeed is not"):
            resolve_plan(model_cfg, DataConfig(), train_cfg, explicit={"model"})
        return
    m, t = resolve_plan(model_cfg, DataConfig(), train_cfg, explicit={"model"})
    assert t.deepspeed == "zero2" and not m.use_lora
    assert t.per_device_train_batch_size * t.gradient_accumulation_steps * 8 == 16
