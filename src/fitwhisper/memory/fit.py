"""Apply a memory plan to `fitwhisper train`'s options: `--plan plan.json` and `--auto_fit`.

A plan sets the model, per-device batch, accumulation, checkpointing, optimizer, precision
and method (see `FitPlan.settings`). With `--plan`, options given explicitly (flags or a
config file) that contradict the plan are refused, all listed at once; with `--auto_fit`
the search keeps the explicitly given effective batch, method and optimizer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)

MODEL_KEYS = ("model", "use_lora", "use_8bit", "use_4bit", "freeze_encoder", "lora_r",
              "lora_target_modules")  # fmt: skip
TRAIN_KEYS = ("per_device_train_batch_size", "gradient_accumulation_steps",
              "gradient_checkpointing", "optim", "fp16", "bf16")  # fmt: skip


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
    """`settings` written over the configs."""
    return (
        dataclasses.replace(model_cfg, **{k: settings[k] for k in MODEL_KEYS}),
        dataclasses.replace(train_cfg, **{k: settings[k] for k in TRAIN_KEYS}),
    )


def auto_fit(
    model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig, explicit: set[str]
) -> dict[str, Any]:
    """Search this machine's GPU (or --gpu_memory) for the fastest settings that fit.

    Raises:
        ConfigError: no CUDA GPU, or nothing fits.
    """
    from fitwhisper.memory.predict import MemoryRequest
    from fitwhisper.memory.search import detected_gpu_memory, parse_memory, search
    from fitwhisper.method import METHODS
    from fitwhisper.precision import hardware, run_precision

    total = detected_gpu_memory()
    if not hardware()["cuda"] or total is None:
        raise ConfigError(
            "--auto_fit plans GPU memory, and no CUDA GPU is visible",
            hint="on a CPU, train without --auto_fit; to plan for another machine's GPU, run "
            "`fitwhisper plan --gpu_memory 8GB --model M --output plan.json` and train there "
            "with --plan plan.json",
        )
    budget = parse_memory(train_cfg.gpu_memory) if train_cfg.gpu_memory else total
    chosen = {"use_4bit": "4bit", "use_8bit": "8bit", "use_lora": "lora"}
    named = [m for k, m in chosen.items() if getattr(model_cfg, k) and k in explicit]
    methods = tuple(named[:1]) or METHODS
    effective = train_cfg.per_device_train_batch_size * train_cfg.gradient_accumulation_steps
    # The method, batch and checkpointing are what the search chooses; the rest is the run's.
    base = MemoryRequest.from_configs(
        model_cfg, data_cfg, train_cfg,
        precision=run_precision(train_cfg.fp16, train_cfg.bf16),
        use_lora=False, use_8bit=False, use_4bit=False, gradient_checkpointing=False,
        per_device_train_batch_size=MemoryRequest.per_device_train_batch_size,
    )  # fmt: skip
    plan = search(
        base,
        budget,
        effective_batch_size=effective,
        methods=methods,
        optimizers=(train_cfg.optim,) if "optim" in explicit else None,
    )
    log.info("--auto_fit: %s", plan.format().split("\n\n")[0].replace("\n", "\n  "))
    return plan.settings()


def _conflicts(
    settings: dict[str, Any], model_cfg: ModelConfig, train_cfg: TrainConfig, explicit: set[str]
) -> list[str]:
    found = []
    for key, cfg in [*((k, model_cfg) for k in MODEL_KEYS), *((k, train_cfg) for k in TRAIN_KEYS)]:
        mine, planned = getattr(cfg, key), settings[key]
        if key in explicit and mine != planned and not (mine is None and planned is False):
            found.append(f"--{key} {_show(mine)}, the plan says {_show(planned)}")
    return found


def _show(v: Any) -> str:
    return ",".join(v) if isinstance(v, list) else str(v)


def _summary(s: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={_show(s[k])}" for k in (*TRAIN_KEYS, "use_lora", "use_8bit", "use_4bit")
    )
