"""Apply a memory plan to `fitwhisper train`'s options: `--plan plan.json` and `--auto_fit`.

A plan sets the model, per-device batch, accumulation, checkpointing, optimizer, precision
and method (see `FitPlan.settings`). With `--plan`, options given explicitly (flags or a
config file) that contradict the plan are refused, all listed at once; with `--auto_fit`
the search keeps the explicitly given effective batch, method and optimizer.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.method import ALIASES, TrainingMethod, method_of, with_method

log = logging.getLogger(__name__)

# The method is a plan's `method` (or, in a plan made before it, the earlier flags).
MODEL_KEYS = (
    "model",
    "freeze_encoder",
    "lora_r",
    "lora_target_modules",
)
TRAIN_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "optim",
    "fp16",
    "bf16",
)


def resolve_plan(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    explicit: set[str],
) -> tuple[ModelConfig, TrainConfig]:
    """The configs with `--plan` or `--auto_fit` applied (unchanged without either).

    Args:
        explicit: names of the options the user gave (flags and config-file keys).

    Raises:
        ConfigError: both given, an unreadable plan, options that contradict it, no GPU
            for --auto_fit, or nothing that fits.
    """
    if train_cfg.plan and train_cfg.auto_fit:
        raise ConfigError(
            "--plan and --auto_fit are both set", hint="use one: a saved plan, or a new search"
        )
    if train_cfg.plan:
        settings = load_plan(train_cfg.plan)
        conflicts = _conflicts(settings, model_cfg, train_cfg, explicit)
        if conflicts:
            raise ConfigError(
                f"options contradict the plan {train_cfg.plan}:\n  - " + "\n  - ".join(conflicts),
                hint="drop those options, or make a new plan with them (`fitwhisper plan "
                "--gpu_memory ... --output plan.json`), or use --auto_fit",
            )
        _check_plan_world(settings, train_cfg.plan)
        log.info("settings from %s: %s", train_cfg.plan, _summary(settings))
        return apply_settings(settings, model_cfg, train_cfg)
    if train_cfg.auto_fit:
        return apply_settings(
            auto_fit(model_cfg, data_cfg, train_cfg, explicit), model_cfg, train_cfg
        )
    return model_cfg, train_cfg


def load_plan(path: str | Path) -> dict[str, Any]:
    """The `settings` of a plan.json.

    Raises:
        ConfigError: a missing or unreadable file, or one that is not a fitwhisper plan.
    """
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read plan {p}: {e.strerror}", hint="check the path") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"plan {p} is not valid JSON: {e}", hint="write it again") from e
    settings = raw.get("settings") if isinstance(raw, dict) else None
    missing = [k for k in (*MODEL_KEYS, *TRAIN_KEYS) if k not in (settings or {})]
    if not any(k in (settings or {}) for k in ("method", *ALIASES)):
        missing.append("method")
    if not isinstance(raw, dict) or raw.get("fitwhisper_plan") != 1 or missing:
        raise ConfigError(
            f"{p} is not a fitwhisper plan"
            + (f" (missing {', '.join(missing)})" if settings else ""),
            hint="make one with `fitwhisper plan --gpu_memory 8GB --model M --output plan.json`",
        )
    return settings


def apply_settings(
    settings: dict[str, Any], model_cfg: ModelConfig, train_cfg: TrainConfig
) -> tuple[ModelConfig, TrainConfig]:
    """`settings` written over the configs; a planned ZeRO stage too, unless the run names
    its own DeepSpeed config."""
    train = {k: settings[k] for k in TRAIN_KEYS}
    if settings.get("deepspeed") and not train_cfg.deepspeed:
        train["deepspeed"] = settings["deepspeed"]
    model = {k: settings[k] for k in MODEL_KEYS}
    model |= with_method(model_cfg, _planned_method(settings))
    return dataclasses.replace(model_cfg, **model), dataclasses.replace(train_cfg, **train)


def _planned_method(settings: dict[str, Any]) -> TrainingMethod:
    return method_of(SimpleNamespace(**settings))


def _named_method(model_cfg: ModelConfig, explicit: set[str]) -> TrainingMethod | None:
    """The method the user named (by --method or an earlier flag), or None."""
    return method_of(model_cfg) if explicit & {"method", *ALIASES} else None


def launched_world() -> tuple[int, int]:
    """(GPUs per machine, machines) of this launch, from torchrun's or accelerate's
    LOCAL_WORLD_SIZE and WORLD_SIZE; (1, 1) without a launcher."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)) or world)
    return local, max(1, world // max(1, local))


def _check_plan_world(settings: dict[str, Any], path: str) -> None:
    """A plan's memory is per GPU of the world it was made for: refuse another world."""
    from fitwhisper.memory.sharded import launch_command

    gpus, nodes = int(settings.get("num_gpus", 1)), int(settings.get("num_nodes", 1))
    local, machines = launched_world()
    if gpus * nodes == local * machines:
        return
    strategy = settings.get("deepspeed") or ("ddp" if gpus * nodes > 1 else "single")
    raise ConfigError(
        f"the plan {path} is for {gpus * nodes} GPU(s) ({gpus} x {nodes} machine(s)), and "
        f"this run has {local * machines} process(es): its per-GPU memory would not hold",
        hint=f"start it as the plan says: {launch_command(strategy, gpus, nodes)} --plan "
        f"{path}; or make a plan for this launch with `fitwhisper plan --num_gpus {local}"
        + (f" --num_nodes {machines}" if machines > 1 else "")
        + " ... --output plan.json`",
    )


def plan_fit(
    request,
    budget_bytes: int,
    *,
    effective_batch_size: int,
    methods: tuple[TrainingMethod, ...] | None = None,
    optimizers: tuple[str, ...] | None = None,
    num_gpus: int = 1,
    num_nodes: int = 1,
    deepspeed: str | None = None,
    margin: float | None = None,
):
    """The one memory fit: the fastest setting of `request` within `budget_bytes` per GPU
    (memory/search.py `search`). `fitwhisper plan`, `train --auto_fit`, each `tune` trial
    and the presets table all plan through here, so they answer alike."""
    from fitwhisper.memory.options import DEFAULT_MARGIN
    from fitwhisper.memory.search import search

    return search(
        request,
        budget_bytes,
        effective_batch_size=effective_batch_size,
        margin=DEFAULT_MARGIN if margin is None else margin,
        methods=methods,
        optimizers=optimizers,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        deepspeed=deepspeed,
    )


def fit_run(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    budget_bytes: int,
    *,
    methods: tuple[TrainingMethod, ...],
    optimizers: tuple[str, ...] | None,
    num_gpus: int = 1,
    num_nodes: int = 1,
    deepspeed: str | None = None,
):
    """`plan_fit` for a run's options (`--auto_fit` and each `tune` trial): its model,
    lengths and precision as this machine trains, its effective batch (over every process
    of the launch) kept; the method, batch and checkpointing are what the search chooses."""
    from fitwhisper.memory.predict import MemoryRequest
    from fitwhisper.precision import run_precision

    base = MemoryRequest.from_configs(
        model_cfg,
        data_cfg,
        train_cfg,
        precision=run_precision(train_cfg.fp16, train_cfg.bf16),
        gradient_checkpointing=False,
        per_device_train_batch_size=MemoryRequest.per_device_train_batch_size,
    )
    effective = (
        train_cfg.per_device_train_batch_size
        * train_cfg.gradient_accumulation_steps
        * num_gpus
        * num_nodes
    )
    return plan_fit(
        base,
        budget_bytes,
        effective_batch_size=effective,
        methods=methods,
        optimizers=optimizers,
        num_gpus=num_gpus,
        num_nodes=num_nodes,
        deepspeed=deepspeed,
    )


def auto_fit(
    model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig, explicit: set[str]
) -> dict[str, Any]:
    """Search this machine's GPU (or --gpu_memory) for the fastest settings that fit.

    Raises:
        ConfigError: no CUDA GPU, or nothing fits.
    """
    from fitwhisper.memory.search import detected_gpu_memory, parse_memory
    from fitwhisper.memory.sharded import DEEPSPEED_STAGES
    from fitwhisper.method import FALLBACKS
    from fitwhisper.precision import hardware

    total = detected_gpu_memory()
    if not hardware()["cuda"] or total is None:
        raise ConfigError(
            "--auto_fit plans GPU memory, and no CUDA GPU is visible",
            hint="on a CPU, train without --auto_fit; to plan for another machine's GPU, run "
            "`fitwhisper plan --gpu_memory 8GB --model M --output plan.json` and train there "
            "with --plan plan.json",
        )
    budget = parse_memory(train_cfg.gpu_memory) if train_cfg.gpu_memory else total
    named = _named_method(model_cfg, explicit)
    # Under a launcher the memory is each GPU's, and the effective batch is the whole run's.
    local, machines = launched_world()
    stage = train_cfg.deepspeed if train_cfg.deepspeed in DEEPSPEED_STAGES else None
    plan = fit_run(
        model_cfg,
        data_cfg,
        train_cfg,
        budget,
        methods=(named.name,) if named else FALLBACKS,
        optimizers=(train_cfg.optim,) if "optim" in explicit else None,
        num_gpus=local,
        num_nodes=machines,
        deepspeed=stage if local * machines > 1 else None,
    )
    settings = plan.settings()
    if settings["deepspeed"] and not stage and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError(
            f"--auto_fit: plain DDP does not fit {budget / 2**30:.2f} GiB per GPU; DeepSpeed "
            f"{settings['deepspeed']} would, and deepspeed is not installed",
            hint="pip install 'fitwhisper[deepspeed]', or choose a lighter method "
            "(--use_lora, --use_8bit) or more GPUs",
        )
    log.info("--auto_fit: %s", plan.format().split("\n\n")[0].replace("\n", "\n  "))
    return settings


def _conflicts(
    settings: dict[str, Any], model_cfg: ModelConfig, train_cfg: TrainConfig, explicit: set[str]
) -> list[str]:
    found = []
    named, planned = _named_method(model_cfg, explicit), _planned_method(settings)
    if named is not None and named != planned:
        found.append(f"--method {named.option}, the plan says {planned.option}")
    for key, cfg in [*((k, model_cfg) for k in MODEL_KEYS), *((k, train_cfg) for k in TRAIN_KEYS)]:
        mine, planned = getattr(cfg, key), settings[key]
        if key in explicit and mine != planned and not (mine is None and planned is False):
            found.append(f"--{key} {_show(mine)}, the plan says {_show(planned)}")
    return found


def _show(v: Any) -> str:
    return ",".join(v) if isinstance(v, list) else str(v)


def _summary(s: dict[str, Any]) -> str:
    return ", ".join(
        [*(f"{k}={_show(s[k])}" for k in TRAIN_KEYS), f"method={_planned_method(s).option}"]
    )
