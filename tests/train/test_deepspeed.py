"""--deepspeed: the shipped ZeRO configs, the option checks made before anything loads, and
the "auto" values transformers fills from the run's flags.

Training under DeepSpeed itself (on the CPU, over gloo, with DeepSpeed's CPU accelerator)
is in test_sharded.py, marked slow; these run without launching anything. The checks that
need the deepspeed package (the optional extra `fitwhisper[deepspeed]`) are marked
`deepspeed`: `make test-deepspeed` runs them (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.memory.sharded import load_config, reduce_buckets
from fitwhisper.train import validate
from fitwhisper.train.sharding import GATHER_ON_SAVE, NAMES, config_path, zero_stage

# Every value the Trainer's arguments decide; a shipped config that fixed one would make
# HfDeepSpeedConfig refuse a run whose flags differ ("mismatch") or silently disagree.
TRAINER_KEYS = (
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
)


def _problems(tmp_path: Path, model: ModelConfig | None = None, **train) -> str:
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), train_manifest="t.jsonl", **train)
    with pytest.raises(ConfigError) as e:
        validate(model or ModelConfig(model="no/such-model"), DataConfig(), cfg)
    assert not (tmp_path / "run").exists()  # refused before anything was made
    return e.value.message


def _passes(tmp_path: Path, model: ModelConfig | None = None, **train) -> None:
    cfg = TrainConfig(output_dir=str(tmp_path / "run"), train_manifest="t.jsonl", **train)
    validate(model or ModelConfig(model="no/such-model"), DataConfig(), cfg)


@pytest.fixture
def deepspeed_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The option checks as on a machine with deepspeed installed, whether or not it is."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "deepspeed" else real(name, *a),
    )


@pytest.mark.parametrize("name", NAMES)
def test_each_shipped_config_leaves_the_trainers_values_auto(name: str) -> None:
    config = load_config(name)
    for key in TRAINER_KEYS:
        assert config[key] == "auto", key
    assert config["fp16"]["enabled"] == config["bf16"]["enabled"] == "auto"
    assert zero_stage(config) == (2 if name == "zero2" else 3)
    if name == "zero3_offload":
        zero = config["zero_optimization"]
        assert zero["offload_optimizer"]["device"] == zero["offload_param"]["device"] == "cpu"
        assert set(config["optimizer"]["params"].values()) == {"auto"}
    else:  # Trainer builds optimizer and schedule from --optim, --lr_scheduler_type
        assert "optimizer" not in config and "scheduler" not in config
    if zero_stage(config) == 3:  # save_model writes whole weights, not empty shards
        assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"]


def test_zero2_reduces_in_buckets_of_2e8_and_zero3_in_d_model_squared() -> None:
    """HF's "auto" is d_model**2 (1.6M elements for large-v3): thousands of small
    reduce-scatters a step under ZeRO-2, so zero2 names HF's template value, 2e8; ZeRO-3
    keeps "auto", which HF sizes with its prefetch bucket and persistence threshold."""
    assert load_config("zero2")["zero_optimization"]["reduce_bucket_size"] == 200_000_000
    assert reduce_buckets("zero2", 1280) == (2, 200_000_000)  # overlap_comm: two buffers
    for name in ("zero3", "zero3_offload"):
        assert load_config(name)["zero_optimization"]["reduce_bucket_size"] == "auto"
        assert reduce_buckets(name, 1280) == (1, 1280 * 1280)


def test_the_shipped_configs_are_package_data() -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"assets/deepspeed/*.json"' in text
    for name in NAMES:
        assert config_path(name).parent.name == "deepspeed"


def test_a_shipped_name_and_a_file_pass(tmp_path: Path, deepspeed_installed) -> None:
    for name in NAMES:
        _passes(tmp_path, deepspeed=name)
    own = tmp_path / "ds.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_batch_size": "auto"}))
    _passes(tmp_path, deepspeed=str(own))


def test_an_unknown_name_or_missing_file_names_the_choices(
    tmp_path: Path, deepspeed_installed
) -> None:
    msg = _problems(tmp_path, deepspeed="zero4")
    assert "--deepspeed zero4: not one of zero2, zero3, zero3_offload and no such file" in msg


def test_invalid_json_says_where(tmp_path: Path, deepspeed_installed) -> None:
    bad = tmp_path / "ds.json"
    bad.write_text('{"zero_optimization": {"stage": 2,}}')
    msg = _problems(tmp_path, deepspeed=str(bad))
    assert f"--deepspeed {bad}: {bad} is not valid JSON" in msg
    assert "at line 1, column 35" in msg
    assert "zero2.json" in msg  # where to start from instead


def test_a_bad_stage_and_a_non_object_are_refused(tmp_path: Path, deepspeed_installed) -> None:
    stage = tmp_path / "stage.json"
    stage.write_text(json.dumps({"zero_optimization": {"stage": 4}}))
    assert "zero_optimization.stage must be 0, 1, 2 or 3, got 4" in _problems(
        tmp_path, deepspeed=str(stage)
    )
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    assert "holds JSON but not an object of settings" in _problems(tmp_path, deepspeed=str(listed))


def test_without_the_package_the_error_gives_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    absent = lambda name, *a: None if name == "deepspeed" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", absent)
    msg = _problems(tmp_path, deepspeed="zero2")
    assert "--deepspeed needs the deepspeed package, which is not installed" in msg
    assert "pip install 'fitwhisper[deepspeed]'" in msg


@pytest.mark.parametrize("flag", ["use_8bit", "use_4bit"])
def test_a_quantised_base_trains_under_zero2_and_is_refused_under_zero3(
    flag: str, tmp_path: Path, deepspeed_installed
) -> None:
    """ZeRO-3 splits the weights, which a bitsandbytes base does not support here; the
    reason is fitwhisper.method's, which `plan` gives too (tests/memory/test_sharded.py).
    Before, both stages passed."""
    model = ModelConfig(model="no/such-model", use_lora=True, **{flag: True})
    _passes(tmp_path, model, deepspeed="zero2")
    own = tmp_path / "z3.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 3, GATHER_ON_SAVE: True}}))
    for value, named in (("zero3", "zero3"), ("zero3_offload", "zero3_offload"),
                         (str(own), f"{own} (ZeRO-3)")):  # fmt: skip
        assert _problems(tmp_path, model, deepspeed=value) == (
            f"the options conflict:\n  - --{flag} with --deepspeed {named}: ZeRO-3 "
            "splits every weight across the processes, and fitwhisper's 8-bit/4-bit base "
            "(bitsandbytes, packed in integer tensors) is not supported split that way; train "
            "the quantised base with plain DDP (torchrun without --deepspeed), or with "
            f"--deepspeed zero2 (weights whole on every GPU), or drop --{flag} and shard LoRA "
            f"(--use_lora) or a full fine-tune with --deepspeed {named}"
        )


def test_auto_fit_an_overridden_optimizer_and_skipping_steps_are_refused(
    tmp_path: Path, deepspeed_installed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    msg = _problems(tmp_path, deepspeed="zero2", auto_fit=True)  # one process
    assert "--auto_fit with --deepspeed zero2: the memory planner models the shipped" in msg
    # Under a launcher the planner shards a shipped stage (memory/sharded.py); a config
    # file of the user's stays refused.
    monkeypatch.setenv("WORLD_SIZE", "2")
    _passes(tmp_path, deepspeed="zero2", auto_fit=True)
    own = tmp_path / "own.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    msg = _problems(tmp_path, deepspeed=str(own), auto_fit=True)
    assert f"--auto_fit with --deepspeed {own}: the memory planner models" in msg
    monkeypatch.delenv("WORLD_SIZE")
    msg = _problems(tmp_path, deepspeed="zero3_offload", optim="adafactor")
    assert "--optim adafactor with --deepspeed zero3_offload: the config names its own " in msg
    _passes(tmp_path, deepspeed="zero2", optim="adafactor")  # Trainer's optimizer, wrapped
    msg = _problems(tmp_path, deepspeed="zero2", on_nonfinite="skip")
    assert "--on_nonfinite skip with --deepspeed zero2: DeepSpeed updates the weights" in msg


def test_the_flag_reaches_the_config_and_help() -> None:
    from fitwhisper.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["train", "--train_manifest", "t.jsonl", "--deepspeed", "zero3"])
    assert args.deepspeed == "zero3"
    assert "zero2|zero3|zero3_offload|FILE" in _subparser_help(parser, "train")


def _subparser_help(parser, name: str) -> str:
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name].format_help()
    raise AssertionError(name)


@pytest.mark.deepspeed
@pytest.mark.parametrize("name", NAMES)
def test_transformers_fills_every_auto_value_from_the_runs_flags(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TrainingArguments(deepspeed=...) as `train` builds them: transformers' own
    HfTrainerDeepSpeedConfig resolves the shipped file, then finalises it as Trainer does
    once the model and the step count are known. No "auto" may be left for DeepSpeed."""
    from transformers import WhisperConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from fitwhisper.train.trainer import training_arguments

    # Creating the arguments sets transformers' global DeepSpeed config (and accelerate
    # reads ACCELERATE_USE_DEEPSPEED): both undone afterwards for the tests that follow.
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        deepspeed=name,
        per_device_train_batch_size=3,
        gradient_accumulation_steps=5,
        learning_rate=2e-4,
        weight_decay=0.01,
    )
    try:
        args = training_arguments(cfg, "bf16", optim=cfg.optim, has_eval=False)
        hf = args.hf_deepspeed_config
        hf.trainer_config_finalize(args, _ModelStub(WhisperConfig(d_model=64)), 40)
        config = hf.config
    finally:
        unset_hf_deepspeed_config()
    assert "auto" not in json.dumps(config)
    assert config["train_micro_batch_size_per_gpu"] == 3
    assert config["gradient_accumulation_steps"] == 5
    assert config["train_batch_size"] == 15  # x 1 process
    assert config["gradient_clipping"] == 1.0
    assert config["bf16"]["enabled"] is True and config["fp16"]["enabled"] is False
    # The bucket the memory planner counts is the one DeepSpeed is given.
    assert config["zero_optimization"]["reduce_bucket_size"] == reduce_buckets(name, 64)[1]
    if name == "zero3_offload":
        assert config["optimizer"]["params"] == {
            "lr": 2e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01
        }  # fmt: skip


class _ModelStub:
    def __init__(self, config) -> None:
        self.config = config


def test_zero3_must_gather_its_weights_on_save(tmp_path: Path, deepspeed_installed) -> None:
    own = tmp_path / "z3.json"
    own.write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    msg = _problems(tmp_path, deepspeed=str(own))
    assert "ZeRO-3 without zero_optimization.stage3_gather_16bit_weights_on_model_save" in msg


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({}, False),  # FSDP 1: accelerate's default is FULL_STATE_DICT
        ({"FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_VERSION": "2"}, False),
        ({"FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT"}, True),
        ({"FSDP_VERSION": "2"}, True),  # FSDP 2 defaults to SHARDED_STATE_DICT
    ],
)
def test_an_fsdp_launch_must_save_a_full_state_dict(
    env: dict, refused: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FSDP_STATE_DICT_TYPE", "FSDP_VERSION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused:
        assert "launch with --fsdp_state_dict_type FULL_STATE_DICT" in _problems(tmp_path)
    else:
        _passes(tmp_path)


def test_a_quantised_base_under_fsdp_is_refused_before_it_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FSDP cannot flatten bitsandbytes' integer-packed weights; LoRA on a float base is
    sharded by FSDP as usual. Before, the launch was accepted (FSDP needs a GPU, so the
    environment accelerate launch --use_fsdp sets is set here)."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.delenv("FSDP_STATE_DICT_TYPE", raising=False)
    monkeypatch.delenv("FSDP_VERSION", raising=False)
    _passes(tmp_path, ModelConfig(model="no/such-model", use_lora=True))
    model = ModelConfig(model="no/such-model", use_lora=True, use_4bit=True)
    assert _problems(tmp_path, model) == (
        "the options conflict:\n  - --use_4bit with FSDP (accelerate launch --use_fsdp): "
        "FSDP splits every weight across the processes, and fitwhisper's 8-bit/4-bit base "
        "(bitsandbytes, packed in integer tensors) is not supported split that way; train the "
        "quantised base with plain DDP (torchrun without --deepspeed), or with --deepspeed "
        "zero2 (weights whole on every GPU), or drop --use_4bit and shard LoRA (--use_lora) or "
        "a full fine-tune with FSDP (accelerate launch --use_fsdp)"
    )
