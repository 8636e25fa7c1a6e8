"""Every option problem of a training run, found before anything loads and raised at once.

`validate` gathers the problems of each group of options (schedule, best model, reporting,
output folder, method, rows, encoder cache, augmentation, DeepSpeed) into one ConfigError,
as torchtune and litgpt do, so a user fixes them all in one go.
"""

from __future__ import annotations

from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.option_ranges import problems as value_problems
from fitwhisper.precision import Precision, problems_here, run_precision


def validate(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    *,
    precision: Precision | None = None,
) -> None:
    """Collect every cross-field problem and raise once, before anything loads.

    Args:
        precision: the run's precision, as `train` resolved it (None: resolved here).
    """
    from fitwhisper.data.augment import option_problems as augment_problems
    from fitwhisper.data.encoder_cache import option_problems as cache_problems
    from fitwhisper.train.hub import problems as hub_problems
    from fitwhisper.train.input_plan import option_problems as input_problems
    from fitwhisper.train.method_loading import problems as method_problems
    from fitwhisper.train.rows import option_problems as row_problems
    from fitwhisper.train.sharding import problems as deepspeed_problems
    from fitwhisper.train.streamed import option_problems as stream_problems

    precision = precision or run_precision(train_cfg.fp16, train_cfg.bf16)
    problems: list[str] = []
    if not train_cfg.train_manifest:
        problems.append("--train_manifest is required")
    problems += _manifest_kind_problems(data_cfg, train_cfg)
    problems += hub_problems(train_cfg.push_to_hub, train_cfg.hub_model_id)
    problems += problems_here(train_cfg.fp16, train_cfg.bf16)
    if train_cfg.eval_strategy != "no" and not train_cfg.eval_manifest:
        problems.append(f"--eval_strategy {train_cfg.eval_strategy} needs --eval_manifest")
    if train_cfg.eval_strategy == "steps" and not train_cfg.eval_steps:
        problems.append("--eval_strategy steps needs --eval_steps")
    # Each value against what its field declares (fitwhisper.option_ranges): the command
    # line checked them as it built the options; callers of the Python API get them here.
    problems += [p for cfg in (model_cfg, data_cfg, train_cfg) for p in value_problems(cfg)]
    if train_cfg.max_steps == -1 and train_cfg.num_train_epochs == 0:
        problems.append("set --max_steps or a positive --num_train_epochs")
    if data_cfg.min_audio_len >= data_cfg.max_audio_len:
        problems.append("--min_audio_len must be below --max_audio_len")
    problems += _encoder_input_problems(train_cfg)
    problems += input_problems(train_cfg)
    problems += _schedule_problems(train_cfg)
    problems += _best_model_problems(model_cfg, train_cfg)
    problems += _reporting_problems(train_cfg)
    problems += _output_dir_problems(train_cfg)
    problems += _overlap_problems(model_cfg, data_cfg, train_cfg)
    problems += method_problems(model_cfg, train_cfg, precision)
    problems += row_problems(model_cfg, data_cfg, train_cfg)
    problems += cache_problems(model_cfg, train_cfg)
    problems += augment_problems(train_cfg)
    problems += deepspeed_problems(model_cfg, train_cfg)
    problems += stream_problems(data_cfg, train_cfg)
    if problems:
        raise ConfigError(
            "the options conflict:\n  - " + "\n  - ".join(problems),
            hint="fix the options above; `fitwhisper train --help` explains each one",
        )


def _encoder_input_problems(cfg: TrainConfig) -> list[str]:
    problems = []
    if cfg.short_encoder_input and cfg.encoder_input not in ("auto", "full"):
        problems.append(
            f"--short_encoder_input is the earlier spelling of --encoder_input trimmed; with "
            f"--encoder_input {cfg.encoder_input} use one of them"
        )
    return problems


def _manifest_kind_problems(data_cfg: DataConfig, cfg: TrainConfig) -> list[str]:
    """Manifests that are FIFOs, devices or sockets: refused unread (reading would block
    or never end)."""
    from fitwhisper.data.manifest import special_file_kind

    problems = []
    for name, path in (
        ("train_manifest", cfg.train_manifest),
        ("eval_manifest", cfg.eval_manifest),
        ("regression_manifest", cfg.regression_manifest),
        ("rehearsal_manifest", data_cfg.rehearsal_manifest),
    ):
        if path and (kind := special_file_kind(Path(path).expanduser())) is not None:
            problems.append(f"--{name} {path} is {kind}, not a manifest file or folder")
    return problems


def _schedule_problems(cfg: TrainConfig) -> list[str]:
    problems = []
    if cfg.warmup_steps > 0 and cfg.warmup_ratio > 0:
        problems.append("--warmup_steps and --warmup_ratio are both set; pick one")
    return problems


def _best_model_problems(model_cfg: ModelConfig, cfg: TrainConfig) -> list[str]:
    # Whether --metric_for_best_model matches the run's metric waits for the held-out rows'
    # languages (train/run_plan.py).
    problems = []
    if cfg.load_best_model_at_end:
        if cfg.eval_strategy == "no":
            problems.append("--load_best_model_at_end needs --eval_strategy steps or epoch")
        elif cfg.save_strategy != cfg.eval_strategy:
            problems.append(
                "--load_best_model_at_end needs --save_strategy equal to --eval_strategy "
                f"(now save {cfg.save_strategy}, eval {cfg.eval_strategy})"
            )
        elif cfg.eval_strategy == "steps" and cfg.eval_steps and cfg.save_steps % cfg.eval_steps:
            problems.append(
                "--load_best_model_at_end needs --save_steps to be a multiple of --eval_steps "
                f"(now {cfg.save_steps} and {cfg.eval_steps})"
            )
    if cfg.early_stopping_patience is not None:
        if cfg.eval_strategy == "no":
            problems.append("--early_stopping_patience needs --eval_strategy steps or epoch")
        if not cfg.load_best_model_at_end:
            problems.append("--early_stopping_patience needs --load_best_model_at_end")
    return problems


def _reporting_problems(cfg: TrainConfig) -> list[str]:
    import importlib.util

    problems = []
    if cfg.use_wandb and cfg.report_to == "none":
        problems.append("--use_wandb and --report_to none contradict each other; pick one")
    wandb = reports_to(cfg) == "wandb"
    if wandb and importlib.util.find_spec("wandb") is None:
        problems.append(
            "--report_to wandb needs the wandb package, which is not installed: "
            "`pip install wandb` and `wandb login`, or use --report_to tensorboard"
        )
    if cfg.wandb_project and not wandb:
        problems.append("--wandb_project is set but nothing reports to W&B; add --report_to wandb")
    return problems


def _overlap_problems(model_cfg: ModelConfig, data_cfg: DataConfig, cfg: TrainConfig) -> list[str]:
    """The output guard's problems with the run folder (fitwhisper.output_guard)."""
    from fitwhisper.output_guard import Output, output_problems

    outputs = [
        Output(
            "--output_dir",
            cfg.output_dir,
            "folder",
            replace=cfg.overwrite_output_dir,
            replace_flag="--overwrite_output_dir",
        ),
        # Folders that receive files among others' (TensorBoard's events, Hub downloads).
        Output("--logging_dir", cfg.logging_dir, "files_into"),
        Output("--cache_dir", model_cfg.cache_dir, "files_into"),
    ]
    return output_problems(outputs, train_inputs(model_cfg, data_cfg, cfg))


def train_inputs(
    model_cfg: ModelConfig, data_cfg: DataConfig, cfg: TrainConfig
) -> list[tuple[str, str | None]]:
    """Every path a run reads, as the user named it (for the output guard); a data source
    by its location, without a mix weight."""
    named = [
        ("--model", model_cfg.model),
        ("--plan", cfg.plan),
        ("--rehearsal_manifest", data_cfg.rehearsal_manifest),
        ("--train_manifest", cfg.train_manifest),
        *(("--train_mix", source) for source in cfg.train_mix or []),
        ("--eval_manifest", cfg.eval_manifest),
        ("--regression_manifest", cfg.regression_manifest),
    ]
    return [(name, _location(value)) for name, value in named]


def _location(source: str | None) -> str | None:
    from fitwhisper.data.sources.spec import parse_source

    try:
        return parse_source(source).location if source else source
    except ConfigError:  # named by the data options' own check
        return source


def _output_dir_problems(cfg: TrainConfig) -> list[str]:
    from fitwhisper.output_guard import folder_problem
    from fitwhisper.train.checkpoints import checkpoints, is_complete

    if not cfg.output_dir.strip():
        return []  # an empty path: named by its field's check (option_ranges)
    if folder_problem(cfg.output_dir, "--output_dir") is not None:
        return []  # named by the output guard (_overlap_problems)
    problems = []
    found = checkpoints(cfg.output_dir)
    final = Path(cfg.output_dir) / "final"
    if final.is_dir() and not found and not cfg.resume and not cfg.overwrite_output_dir:
        problems.append(
            f"--output_dir {cfg.output_dir} holds the model of a finished run ({final}): a new "
            "run there would replace it; choose another --output_dir, or pass "
            "--overwrite_output_dir to replace it"
        )
    if cfg.resume and cfg.overwrite_output_dir:
        problems.append("--resume and --overwrite_output_dir contradict each other; pick one")
    elif cfg.resume == "latest" and not any(is_complete(c) for c in found):
        # Incomplete ones only (a kill during the first save): a fresh run would be refused
        # for them, so the way out is the option that removes them.
        afresh = (
            "pass --overwrite_output_dir instead of --resume to start afresh (deletes them)"
            if found
            else "train without --resume to start afresh"
        )
        problems.append(
            f"--resume: no complete checkpoint in {cfg.output_dir}"
            + (f" ({len(found)} incomplete)" if found else "")
            + f"; {afresh}, or pass --resume PATH"
        )
    elif cfg.resume and cfg.resume != "latest" and not Path(cfg.resume).is_dir():
        problems.append(f"--resume {cfg.resume}: no such checkpoint folder")
    elif found and not cfg.resume and not cfg.overwrite_output_dir:
        names = ", ".join(c.name for c in found[-3:])
        if not any(is_complete(c) for c in found):  # nothing --resume could continue from
            problems.append(
                f"--output_dir {cfg.output_dir} holds only incomplete checkpoints of an "
                f"earlier run that was stopped while saving ({names}): nothing to resume "
                "from; pass --overwrite_output_dir to start afresh (deletes them), or choose "
                "another --output_dir"
            )
            return problems
        problems.append(
            f"--output_dir {cfg.output_dir} already holds checkpoints of an earlier run "
            f"({'..., ' if len(found) > 3 else ''}{names}): add --resume to continue from the "
            "newest complete one, --overwrite_output_dir to start afresh (deletes them), or "
            "choose another --output_dir"
        )
    return problems


def reports_to(cfg: TrainConfig) -> str:
    """Where training curves go: --use_wandb is the user's scripts' name for wandb."""
    return "wandb" if cfg.use_wandb else cfg.report_to
