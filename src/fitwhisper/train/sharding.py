"""DeepSpeed ZeRO for `--deepspeed`: the shipped configs, the user's own file, and what
cannot be combined with them, checked before anything loads; and what an FSDP launch
cannot be combined with.

Three configs ship in `fitwhisper/assets/deepspeed/` (zero2, zero3, zero3_offload). Every
value the Trainer knows is "auto" (batch sizes, accumulation, clipping, fp16/bf16, the
offload config's AdamW hyper-parameters), so transformers' HfDeepSpeedConfig fills them
from the run's flags and the printed plan stays true. zero2 and zero3 name no optimizer or
scheduler: Trainer builds those from --optim and --lr_scheduler_type and DeepSpeed wraps
them. zero3_offload names AdamW, which DeepSpeed runs on the CPU (DeepSpeedCPUAdam, built
on first use), so it takes --optim adamw_torch only.

Refused with DeepSpeed, and why:

- A ZeRO-3 file without zero_optimization.stage3_gather_16bit_weights_on_model_save: true:
  save_model would write DeepSpeed shards, not a model final/ can load from.

- --auto_fit with a config file of the user's, or on one process: the planner models the
  shipped stages' shards on several GPUs only.
- A config with its own optimizer section and --optim other than adamw_torch: the
  config's optimizer would win, silently.
- --on_nonfinite skip: accelerate steps the DeepSpeed engine inside backward, so the
  divergence guard (guard.py) sees a step only after its update; it can still stop the
  run there (nothing of the step is saved), not drop the update.
- --use_8bit/--use_4bit with ZeRO-3 (as under FSDP, below): the weights are split across
  the processes, which fitwhisper's bitsandbytes base does not support
  (the method's `weight_sharding_refusal`, fitwhisper/method.py, says why; `plan` refuses
  the same).
  With ZeRO-2 (weights whole on every GPU) a quantised base trains.

Refused with FSDP (`accelerate launch --use_fsdp`): a state dict type other than
FULL_STATE_DICT (final/ would hold no weights), and --use_8bit/--use_4bit.

The OOM back-off (memory/backoff.py) does not split batches under DeepSpeed training, nor
under ZeRO-3 or FSDP at all: memory/oom_stop.py says why.
"""

from __future__ import annotations

import importlib.util
import json
import os

from fitwhisper.config import ModelConfig, TrainConfig
from fitwhisper.memory.sharded import DEEPSPEED_STAGES as NAMES
from fitwhisper.memory.sharded import config_path
from fitwhisper.method import method_of
from fitwhisper.train.ranks import fsdp_asked, world_size

GATHER_ON_SAVE = "stage3_gather_16bit_weights_on_model_save"
INSTALL = "pip install 'fitwhisper[deepspeed]' (or: DS_BUILD_OPS=0 pip install deepspeed)"


def zero_stage(config: dict) -> int:
    """The config's ZeRO stage (DeepSpeed's default, 0, when it names none)."""
    zero = config.get("zero_optimization") or {}
    return int(zero.get("stage", 0)) if isinstance(zero, dict) else 0


def problems(model_cfg: ModelConfig, cfg: TrainConfig) -> list[str]:
    """What is wrong with --deepspeed and what it is combined with, and with an FSDP launch
    (none without either)."""
    fsdp = _fsdp_problems(model_cfg) if fsdp_asked() else []
    return fsdp + (_deepspeed_problems(model_cfg, cfg) if cfg.deepspeed else [])


def _fsdp_problems(model_cfg: ModelConfig) -> list[str]:
    """`accelerate launch --use_fsdp` with a sharded state dict: Trainer's save_model then
    writes no weights at all (only FULL_STATE_DICT gathers them), so final/ would hold a
    processor and no model. With a quantised base: `TrainingMethod.weight_sharding_refusal`."""
    found = _quantised_problems(model_cfg, "fsdp", "FSDP (accelerate launch --use_fsdp)")
    version = os.environ.get("FSDP_VERSION", "1")
    default = "FULL_STATE_DICT" if version == "1" else "SHARDED_STATE_DICT"  # accelerate's
    kind = os.environ.get("FSDP_STATE_DICT_TYPE") or default
    if kind.upper() == "FULL_STATE_DICT":
        return found
    return found + [
        f"FSDP with {kind} (FSDP version {version}): Trainer's save_model writes no weights "
        "then, so final/ would hold no model; launch with --fsdp_state_dict_type "
        "FULL_STATE_DICT"
    ]


def _quantised_problems(model_cfg: ModelConfig, sharding, named: str) -> list[str]:
    refused = method_of(model_cfg).weight_sharding_refusal(sharding, named)
    return [f"{refused[0]}; {refused[1]}"] if refused else []


def _deepspeed_problems(model_cfg: ModelConfig, cfg: TrainConfig) -> list[str]:
    value = cfg.deepspeed
    path = config_path(value)
    found: list[str] = []
    if importlib.util.find_spec("deepspeed") is None:
        found.append(f"--deepspeed needs the deepspeed package, which is not installed: {INSTALL}")
    if not path.is_file():
        return found + [
            f"--deepspeed {value}: not one of {', '.join(NAMES)} and no such file "
            f"({path}); name a shipped config or the path of a DeepSpeed JSON file"
        ]
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        return found + [f"--deepspeed {value}: cannot read {path} ({e})"]
    except json.JSONDecodeError as e:
        return found + [
            f"--deepspeed {value}: {path} is not valid JSON ({e.msg} at line {e.lineno}, "
            f"column {e.colno}); fix the file, or start from a shipped config "
            f"({config_path('zero2')})"
        ]
    if not isinstance(config, dict):
        return found + [f"--deepspeed {value}: {path} holds JSON but not an object of settings"]
    stage = _stage_or_problem(config, value, found)
    zero = config.get("zero_optimization") or {}
    if stage == 3:
        named = f"--deepspeed {value}" + ("" if value in NAMES else " (ZeRO-3)")
        found += _quantised_problems(model_cfg, "zero3", named)
    if stage == 3 and not (isinstance(zero, dict) and zero.get(GATHER_ON_SAVE)):
        found.append(
            f"--deepspeed {value}: ZeRO-3 without zero_optimization.{GATHER_ON_SAVE}: true "
            "saves DeepSpeed shards instead of a model, so final/ would not load; set it to "
            "true (as the shipped zero3 does)"
        )
    if cfg.auto_fit and (value not in NAMES or world_size() == 1):
        found.append(
            f"--auto_fit with --deepspeed {value}: the memory planner models the shipped "
            "stages (zero2, zero3, zero3_offload) on several GPUs under a launcher, not "
            "a config file of your own or one process; set --per_device_train_batch_size "
            "yourself, or launch with torchrun and a stage name"
        )
    if cfg.on_nonfinite == "skip":
        found.append(
            f"--on_nonfinite skip with --deepspeed {value}: DeepSpeed updates the weights "
            "inside the backward pass, before the divergence guard sees the step, so a "
            "non-finite step cannot be dropped; use --on_nonfinite stop (the run still stops "
            "at that step, before anything of it is saved)"
        )
    if "optimizer" in config and cfg.optim != "adamw_torch":
        found.append(
            f"--optim {cfg.optim} with --deepspeed {value}: the config names its own optimizer "
            f"({(config['optimizer'] or {}).get('type', '?')}), which would win; drop --optim, "
            "or use a config without an optimizer section (zero2, zero3)"
        )
    return found


def _stage_or_problem(config: dict, value: str, found: list[str]) -> int | None:
    try:
        stage = zero_stage(config)
    except (TypeError, ValueError):
        stage = None
    if stage not in (0, 1, 2, 3):
        found.append(
            f"--deepspeed {value}: zero_optimization.stage must be 0, 1, 2 or 3, got "
            f"{(config.get('zero_optimization') or {}).get('stage')!r}"
        )
        return None
    return stage
