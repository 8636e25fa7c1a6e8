"""What a `train` run decided, once: every "auto" answered, with its reason, before the
model loads; recorded as RUN/run_plan.json.

Two moments, one object. `resolve_options` answers what the options alone decide, before
anything is written: the memory plan (--plan, --auto_fit), the model's preset and the
method, the encoder input and the precision. `RunPlan` adds what the checked rows decide
(the epochs a small set trains; the language the held-out clips are scored in, hence the
metric the Trainer selects the best checkpoint on, which must be the one it logs) and the
process layout. Downstream code reads the plan and re-derives nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.method import METHODS, Method, method_of
from fitwhisper.precision import Precision, hardware, run_precision
from fitwhisper.recipes import options_given, with_recipe
from fitwhisper.recipes import with_epochs_for_data as with_epochs
from fitwhisper.train.input_plan import InputPlan, decide_input

log = logging.getLogger(__name__)

PLAN_FILE = "run_plan.json"


@dataclass(frozen=True)
class OptionChoices:
    """What the options decide on this machine (`resolve_options`)."""

    method: Method
    precision: Precision
    encoder_input: str  # full, trimmed or mixed
    why: dict[str, str]
    given: frozenset[str] = frozenset()  # the options the user chose (recipes.options_given)


@dataclass(frozen=True)
class RunPlan:
    """Every decision of a run that an option left to fitwhisper, and why."""

    method: Method
    precision: Precision
    encoder_input: str
    language: str | None  # the language token the model is prompted with; None: none asked
    scoring_language: str | None  # the held-out clips' (their own column, else --language)
    metric: str  # wer or cer: what the held-out clips are scored and logged by
    normalizer: str
    best_metric: str | None  # Trainer's metric_for_best_model; None: the last step is kept
    processes: int
    sharding: str  # none, deepspeed NAME, or fsdp
    optimizer: str  # Trainer's `optim`: --optim, or its fused kernel where that is faster
    deterministic: bool = False  # torch's deterministic kernels while training
    # Data-loader workers, pinning, prefetching, where the log-mel is made (input_plan.py).
    input_path: InputPlan = field(default_factory=InputPlan)
    why: dict[str, str] = field(default_factory=dict)

    def write(self, run_dir: Path) -> Path:
        path = Path(run_dir) / PLAN_FILE
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n", encoding="utf-8")
        return path

    def log_summary(self) -> None:
        log.info(
            "run plan: %s, %s, encoder input %s, scored by %s (%s), %d process(es)%s; "
            "%d data-loader worker(s), log-mel on the %s",
            METHODS[self.method].title,
            self.precision,
            self.encoder_input,
            self.metric.upper(),
            self.scoring_language or "English",
            self.processes,
            "" if self.sharding == "none" else f", {self.sharding}",
            self.input_path.dataloader_num_workers,
            "CPU" if self.input_path.log_mel == "cpu" else "training device",
        )


def resolve_options(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    explicit: set[str] | None,
) -> tuple[ModelConfig, TrainConfig, OptionChoices]:
    """The options with the memory plan, the model preset, the method and its recipe
    (recipes.py: the defaults that depend on it) applied and --encoder_input auto
    answered; and what was chosen, with reasons."""
    why: dict[str, str] = {}
    explicit = options_given((model_cfg, data_cfg, train_cfg), explicit)
    model_cfg, train_cfg = _apply_memory_plan(model_cfg, data_cfg, train_cfg, explicit, why)
    model_cfg = _apply_method(model_cfg, why)
    model_cfg = _apply_language(model_cfg, explicit, why)
    train_cfg, reasons = with_recipe(model_cfg, train_cfg, explicit)
    why |= reasons
    train_cfg = _resolve_encoder_input(model_cfg, train_cfg, why)
    precision = run_precision(train_cfg.fp16, train_cfg.bf16)
    asked = train_cfg.fp16 is not None or train_cfg.bf16 is not None
    why["precision"] = (
        "--fp16/--bf16 as given"
        if asked
        else "no --fp16/--bf16: bf16 on a GPU that has it, fp16 on other GPUs, fp32 on CPU"
    )
    choices = OptionChoices(
        method_of(model_cfg).name, precision, train_cfg.encoder_input, why, frozenset(explicit)
    )
    return model_cfg, train_cfg, choices


def with_epochs_for_data(
    choices: OptionChoices, train_cfg: TrainConfig, n_rows: int, processes: int
) -> tuple[TrainConfig, OptionChoices]:
    """The epochs the checked training rows call for (recipes.with_epochs_for_data), and
    the choices with its reason."""
    before = train_cfg.num_train_epochs
    train_cfg, reason = with_epochs(train_cfg, n_rows, processes, set(choices.given))
    if train_cfg.num_train_epochs != before:
        log.info("epochs: %s", reason)
    why = {**choices.why, "num_train_epochs": reason}
    return train_cfg, dataclasses.replace(choices, why=why)


def decide(
    choices: OptionChoices,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    *,
    eval_rows: list,
    world_size: int,
    fsdp: bool,
    cuda: bool,
    cores: int = 1,
    processes_here: int = 1,
    augmenting: bool = False,
    clip_cost_s=None,
    streamed: bool = False,
) -> RunPlan:
    """The whole plan, once the held-out rows are checked (their language column counts).

    `cores`, `processes_here`, `augmenting`, `clip_cost_s` (a callable timing one
    training clip, given where the log-mel is made) and `streamed` (the training data is a
    stream) decide the input path (input_plan.py).

    Raises:
        ConfigError: --metric_for_best_model other than the run's metric or loss.
    """
    from fitwhisper.evaluate import make_scorer, scoring_language

    why = dict(choices.why)
    scored_in = scoring_language(eval_rows, model_cfg.language) if eval_rows else None
    if not eval_rows:
        scored_in = model_cfg.language
    metric, normalizer = make_scorer(scored_in)
    why["metric"] = (
        f"the held-out clips are in {scored_in}" if scored_in else "English (no language given)"
    ) + f": {metric.upper()}"
    best = None
    if train_cfg.load_best_model_at_end or train_cfg.early_stopping_patience:
        asked = train_cfg.metric_for_best_model
        if asked not in (None, metric, "loss"):
            raise ConfigError(
                f"--metric_for_best_model {asked}: this run's held-out clips are scored by "
                f"{metric} (language {scored_in or 'English'})",
                hint=f"use --metric_for_best_model {metric} or loss, or leave it unset",
            )
        best = asked or metric
        why["best_metric"] = "as given" if asked else "the metric the held-out clips are scored by"
    sharding = "none"
    if train_cfg.deepspeed:
        sharding = f"deepspeed {train_cfg.deepspeed}"
    elif fsdp:
        sharding = "fsdp"
    optimizer = _optimizer(train_cfg.optim, sharding, cuda, why)
    deterministic = _deterministic(cuda, why)
    input_path = decide_input(
        train_cfg,
        choices.given,
        why,
        cuda=cuda,
        cores=cores,
        processes_here=processes_here,
        augmenting=augmenting,
        clip_cost_s=clip_cost_s,
        streamed=streamed,
    )
    return RunPlan(
        method=choices.method,
        precision=choices.precision,
        encoder_input=choices.encoder_input,
        language=model_cfg.language,
        scoring_language=scored_in,
        metric=metric,
        normalizer=normalizer.name,
        best_metric=best,
        processes=world_size,
        sharding=sharding,
        optimizer=optimizer,
        deterministic=deterministic,
        input_path=input_path,
        why=why,
    )


def decided(
    choices: OptionChoices,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    eval_rows: list,
    out,
    clip_cost_s=None,
    streamed: bool = False,
) -> RunPlan:
    """`decide` for this process's run; the main process records it in `out` and logs it.
    `clip_cost_s(log_mel)`: seconds one training clip takes to make (input_plan.py)."""
    from fitwhisper.data.augment import from_config
    from fitwhisper.train import ranks
    from fitwhisper.train.input_plan import machine_cores, processes_on_this_machine

    plan = decide(
        choices,
        model_cfg,
        train_cfg,
        eval_rows=eval_rows,
        world_size=ranks.world_size(),
        fsdp=ranks.fsdp_asked(),
        cuda=hardware()["cuda"],
        cores=machine_cores(),
        processes_here=processes_on_this_machine(),
        augmenting=from_config(train_cfg).active,
        clip_cost_s=clip_cost_s,
        streamed=streamed,
    )
    if ranks.is_main():
        plan.write(out)
        plan.log_summary()
    return plan


def _optimizer(optim: str, sharding: str, cuda: bool, why: dict[str, str]) -> str:
    """torch's fused AdamW for --optim adamw_torch on the CPU: there AdamW otherwise steps
    one tensor at a time (its foreach kernels are GPU-only), about 4x slower
    (bench/cpu_adamw.py). The same update, computed by one kernel. On a GPU torch already
    takes its foreach kernels, the step the memory planner measures; DeepSpeed and FSDP
    wrap or shard the optimizer themselves, so they keep --optim as given."""
    if optim == "adamw_torch" and not cuda and sharding == "none":
        why["optimizer"] = "CPU: torch's fused AdamW kernel, the same update, about 4x faster"
        return "adamw_torch_fused"
    return optim


def _deterministic(cuda: bool, why: dict[str, str]) -> bool:
    """torch's deterministic kernels on the CPU, where they cost nothing measurable: there the
    decoder position embedding's gradient (every clip indexes the same rows) is otherwise
    summed in an order that varies with the threads, so two runs of one command, or a run
    and its resume, drift apart in the last digits (bench/RESULTS-quality.md). On a GPU they
    are slower kernels and need CUBLAS_WORKSPACE_CONFIG, untested here: off."""
    if cuda:
        why["deterministic"] = "GPU: torch's default kernels (deterministic ones are slower)"
        return False
    why["deterministic"] = (
        "CPU: torch's deterministic kernels, so a run and its resume are bit-identical"
    )
    return True


def _apply_memory_plan(
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    explicit: set[str],
    why: dict[str, str],
) -> tuple[ModelConfig, TrainConfig]:
    """`--plan FILE` or `--auto_fit` written over the options (memory/fit.py)."""
    if not (train_cfg.plan or train_cfg.auto_fit):
        return model_cfg, train_cfg
    from fitwhisper.memory.fit import resolve_plan
    from fitwhisper.train.streamed import planning_lengths

    why["memory"] = f"--plan {train_cfg.plan}" if train_cfg.plan else "--auto_fit"
    if train_cfg.auto_fit:
        data_cfg, said = planning_lengths(data_cfg, train_cfg)
        if said:
            why["memory"] += f", {said}"
    return resolve_plan(model_cfg, data_cfg, train_cfg, explicit)


def _apply_method(model_cfg: ModelConfig, why: dict[str, str]) -> ModelConfig:
    """The model preset (Breeze-ASR-25: zh, Traditional output), and the method's options
    made whole: `method` and the earlier flags agree from here on (the run record holds
    both)."""
    from fitwhisper.method import method_problems, with_method
    from fitwhisper.models.presets import apply_model_preset

    model_cfg = apply_model_preset(model_cfg)
    if method_problems(model_cfg):
        return model_cfg  # contradicting method options: validation names them, unresolved
    method = method_of(model_cfg)
    if model_cfg.method != "full":
        why["method"] = f"--method {method.option}"
    elif method.name != "full":
        why["method"] = f"{method.flag} (the same as --method {method.option})"
    else:
        why["method"] = "--method full (the default)"
    return dataclasses.replace(model_cfg, **with_method(model_cfg, method))


def _apply_language(model_cfg: ModelConfig, explicit: set[str], why: dict[str, str]) -> ModelConfig:
    """The language the run prompts and scores in, by the rule `evaluate` and `transcribe`
    follow (models/resolve.py `language_choice`): --language, else the model's preset
    (applied by `_apply_method`), else the language a fine-tune on disk recorded, so
    continuing to train a Mandarin fine-tune keeps its zh (and its CER). A Hub id's
    recorded language is not read before its download: pass --language there."""
    from fitwhisper.models.resolve import language_on_disk

    if model_cfg.language:
        given = "language" in explicit
        why["language"] = "--language" if given else f"the preset of {model_cfg.model}"
        return model_cfg
    if not Path(model_cfg.model).expanduser().is_dir():
        why["language"] = "none given (a Hub model's recorded language is not read: --language)"
        return model_cfg
    if language := language_on_disk(model_cfg.model):
        why["language"] = "recorded in the model's generation config (its fine-tune's language)"
        return dataclasses.replace(model_cfg, language=language)
    why["language"] = "none given or recorded: an English-only model, or detected per clip"
    return model_cfg


def _resolve_encoder_input(
    model_cfg: ModelConfig, train_cfg: TrainConfig, why: dict[str, str]
) -> TrainConfig:
    """--encoder_input auto: mixed (trimmed batches, a share at 30 s) when the encoder
    trains; full with --freeze_encoder, whose pretrained encoder never learns the short
    window (bench: 74% WER at 30 s on English digit strings after trimmed training with
    it), and with --cache_encoder_outputs, whose cache holds 30 s outputs."""
    if train_cfg.encoder_input != "auto":
        why["encoder_input"] = "--encoder_input as given"
        return train_cfg
    if train_cfg.short_encoder_input:
        mode, reason = "trimmed", "--short_encoder_input (the earlier name of trimmed)"
    elif model_cfg.freeze_encoder:
        mode, reason = "full", "--freeze_encoder: a frozen encoder never learns a short window"
    elif train_cfg.cache_encoder_outputs:
        mode, reason = "full", "--cache_encoder_outputs caches 30 s encoder outputs"
    else:
        mode, reason = "mixed", "the encoder trains: trimmed batches with a share at 30 s"
    why["encoder_input"] = reason
    return dataclasses.replace(train_cfg, encoder_input=mode, short_encoder_input=False)
