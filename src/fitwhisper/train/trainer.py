"""Trainer's side of a run: its arguments, its class, its callbacks, the plan it logs.

`training_arguments` maps TrainConfig (and the precision `train` resolved) onto
Seq2SeqTrainingArguments; `trainer_class` adds OOM back-off and length grouping;
`callbacks` gathers the memory watch, TensorBoard and early stopping.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from fitwhisper.config import TrainConfig
from fitwhisper.models import checkpointing
from fitwhisper.precision import Precision
from fitwhisper.train.ranks import COLLECTIVE_TIMEOUT
from fitwhisper.train.validation import reports_to

log = logging.getLogger(__name__)


def training_arguments(
    cfg: TrainConfig,
    precision: Precision,
    *,
    optim: str,
    has_eval: bool,
    best_metric: str | None = None,
    skips_layers: bool = False,
):
    """Seq2SeqTrainingArguments for the run, in the precision and with the optimizer the
    run plan chose (`optim`);
    `skips_layers`: the model's LayerDrop is on, so a step can leave parameters unused."""
    from transformers import Seq2SeqTrainingArguments

    from fitwhisper.train.sharding import config_path

    return Seq2SeqTrainingArguments(
        output_dir=cfg.output_dir,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        learning_rate=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        optim=optim,
        # transformers 5 folded warmup_ratio into warmup_steps: a float below 1 is a ratio.
        warmup_steps=cfg.warmup_ratio if cfg.warmup_ratio > 0 else cfg.warmup_steps,
        lr_scheduler_type=cfg.lr_scheduler_type,
        max_steps=cfg.max_steps,
        num_train_epochs=cfg.num_train_epochs,
        logging_steps=cfg.logging_steps,
        eval_strategy=cfg.eval_strategy if has_eval else "no",
        eval_steps=cfg.eval_steps,
        save_strategy=cfg.save_strategy,
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        load_best_model_at_end=cfg.load_best_model_at_end and has_eval,
        metric_for_best_model=best_metric,
        # Trainer guesses "higher is better" for any name not ending in "loss"; WER and CER
        # are error rates.
        greater_is_better=False if best_metric else None,
        seed=cfg.seed,
        fp16=precision == "fp16",
        bf16=precision == "bf16",
        # Without CUDA, said outright: Trainer then takes bf16 on the CPU, and under torchrun
        # accelerate joins the processes over gloo (left unsaid, each trained alone).
        use_cpu=not _cuda_available(),
        ddp_timeout=int(COLLECTIVE_TIMEOUT.total_seconds()),  # ranks.py: long waits apart
        # Trainer has DDP look for unused parameters after every backward (a walk of the
        # whole graph per step) in a PeftModel, and in a full model without checkpointing,
        # where DDP then warned on an H200 that it found none. Every trainable parameter
        # takes part in every forward unless LayerDrop skips a layer.
        ddp_find_unused_parameters=skips_layers,
        # transformers 5 renamed gradient_checkpointing; our flag keeps the familiar name.
        **checkpointing.training_argument(cfg.gradient_checkpointing),
        dataloader_num_workers=cfg.dataloader_num_workers,
        dataloader_pin_memory=_cuda_available(),
        predict_with_generate=True,
        generation_max_length=cfg.generation_max_length,
        generation_num_beams=1,
        # Our own TensorBoard callback writes into RUN/logs; wandb goes through Trainer.
        report_to=["wandb"] if reports_to(cfg) == "wandb" else "none",
        # SpeechDataset yields exactly the model's inputs; nothing to prune.
        remove_unused_columns=False,
        label_names=["labels"],
        disable_tqdm=not _tqdm_wanted(),
        # ZeRO (sharding.py): the config file's "auto" values are filled from the above.
        deepspeed=str(config_path(cfg.deepspeed)) if cfg.deepspeed else None,
    )


def one_gpu_without_launcher(args) -> None:
    """Several GPUs and no launcher (plain `fitwhisper train`): train on one, and say how to
    use them all. Left alone, Trainer wraps the model in nn.DataParallel: slower than one
    GPU in users' reports (transformers#27014, #28916), outside accelerate's mixed precision
    (silently fp32), and with --short_encoder_input's patched encoder broken in the replicas.
    Trainer sets the same field for model-parallel models."""
    from fitwhisper.train import ranks

    gpus = args.n_gpu
    if ranks.world_size() > 1 or gpus <= 1:
        return
    args._n_gpu = 1
    log.warning(
        "%d GPUs are visible but fitwhisper was not started by a launcher, so it trains on "
        "one (nn.DataParallel would be slower); to train on all of them, run "
        "`torchrun --nproc_per_node %d -m fitwhisper train ...` with the same options",
        gpus,
        gpus,
    )


def trainer_class(cfg: TrainConfig, run_fingerprint: dict):
    """BackoffTrainer, with length-grouped batches when --group_by_duration asks, the
    divergence guard's view of each micro-batch (guard.py), checkpoints marked whole
    before old ones are rotated out (checkpoints.py; the marker holds `run_fingerprint`),
    and evaluation scored once per clip on several processes (ranks.py)."""
    from fitwhisper.data.batching import LengthGroupedTrainerMixin
    from fitwhisper.memory.backoff import BackoffTrainer
    from fitwhisper.train.checkpoints import CheckpointMixin
    from fitwhisper.train.guard import GuardMixin
    from fitwhisper.train.ranks import EvalWithoutRepeatsMixin
    from fitwhisper.train.streamed import StreamMixin

    class Trainer(
        CheckpointMixin,
        LengthGroupedTrainerMixin,
        StreamMixin,  # after CheckpointMixin: the stream position is in the marked files
        GuardMixin,
        EvalWithoutRepeatsMixin,
        AugmentEpochMixin,
        BackoffTrainer,
    ):
        group_by_length = cfg.group_by_duration

    Trainer.run_fingerprint = run_fingerprint

    return Trainer


class AugmentEpochMixin:
    """Tells the run's Augmenter (data/augment.py, set by the run's setup) the epoch before
    each epoch's data loader starts, so each clip's augmentation follows from (seed, epoch,
    clip): a resumed run skips into an epoch with the epoch it had. Dataloader workers are
    started per epoch (Trainer's default) and get the dataset with the epoch set."""

    augmenter = None

    def _run_epoch(self, *args, **kwargs):
        if self.augmenter is not None:
            self.augmenter.epoch = int(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)


def early_stopping(cfg: TrainConfig) -> list:
    if not cfg.early_stopping_patience:
        return []
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(cfg.early_stopping_patience, cfg.early_stopping_threshold)]


def quiet_trainer_printing(trainer) -> None:
    """Remove Trainer's console printing (its raw log dictionaries, its bar): ConsoleLog
    (console.py) prints one readable line per log instead. Loggers are other callbacks."""
    from transformers import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def logging_callbacks(cfg: TrainConfig, out: Path, resumed_step: int | None = None) -> list:
    if reports_to(cfg) != "tensorboard":
        return []
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    # On resume, TensorBoard hides what the stopped run logged after its checkpoint (those
    # steps are trained again), so the curves join without overlap.
    purge = None if resumed_step is None else resumed_step + 1
    writer = SummaryWriter(log_dir=str(logs_dir(cfg, out)), purge_step=purge)
    return [TensorBoardCallback(tb_writer=writer)]


def log_plan(
    cfg: TrainConfig,
    n_rows: int,
    args,
    *,
    resumed_step: int | None = None,
    unit: str = "training clips",
) -> None:
    processes = max(args.world_size, 1)
    effective = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * processes
    steps, steps_per_epoch = planned_steps(n_rows, effective, cfg.max_steps, cfg.num_train_epochs)
    epochs = steps / steps_per_epoch if cfg.max_steps > 0 else cfg.num_train_epochs
    log.info(
        "effective batch = %d x %d x %d process(es) = %d; %d %s; "
        "%d optimizer steps (%.1f epochs); precision %s",
        cfg.per_device_train_batch_size,
        cfg.gradient_accumulation_steps,
        processes,
        effective,
        n_rows,
        unit,
        steps,
        epochs,
        "bf16 mixed" if args.bf16 else "fp16 mixed" if args.fp16 else "fp32",
    )
    if resumed_step is not None:
        log.info(
            "resuming at step %d of %d (epoch %.2f): %d steps to go",
            resumed_step,
            steps,
            resumed_step / steps_per_epoch,
            max(steps - resumed_step, 0),
        )


def planned_steps(
    n_rows: int, effective_batch: int, max_steps: int, epochs: float
) -> tuple[int, int]:
    """The optimizer steps a run makes in all, and per epoch, as Trainer counts them."""
    from fitwhisper.recipes import steps_per_epoch

    per_epoch = steps_per_epoch(n_rows, effective_batch)
    if max_steps > 0:
        return max_steps, per_epoch
    return math.ceil(per_epoch * epochs), per_epoch


def free_training_memory(trainer) -> None:
    """Drop gradients and optimizer states once the model is saved."""
    trainer.model.zero_grad(set_to_none=True)
    if trainer.optimizer is not None:
        trainer.optimizer.state.clear()


def logs_dir(cfg: TrainConfig, out: Path) -> Path:
    return Path(cfg.logging_dir) if cfg.logging_dir else out / "logs"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _tqdm_wanted() -> bool:
    from fitwhisper.logs import progress_enabled

    return progress_enabled()
