"""What a run builds before it trains: processor, model, datasets and the Trainer.

Each function is one step of `train` (run.py); the options decide, nothing else.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.precision import Precision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunData:
    """The run's datasets and collators, and what scoring the final model needs."""

    train_ds: object
    eval_ds: object | None
    collator: object  # per-clip batches at 30 s: evaluation
    train_collator: object  # training batches (packed, trimmed, cached as asked)
    eval_rows: list
    language: str | None
    augmenter: object | None = None  # data/augment.py: its epoch is set by the trainer
    n_train: int = 0  # training items (clips, or packed windows) per epoch


def resolve(model_cfg: ModelConfig):
    """The model spec resolved once; processor and model load from the result."""
    from fitwhisper.models.resolve import check_weights, resolve_model

    resolved = resolve_model(model_cfg.model, **_hub(model_cfg))
    if resolved.kind == "transformers_dir":
        check_weights(Path(resolved.path_or_id))  # before the run folder is made
    return resolved


def processor(resolved, model_cfg: ModelConfig):
    """The model's WhisperProcessor: the data check needs only its tokenizer."""
    from fitwhisper.models.resolve import load_processor

    return load_processor(resolved, **_hub(model_cfg))


def model(
    resolved,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    precision: Precision,
):
    """The model, loaded as the method asks (quantised for 8-bit/4-bit), with language and
    task in its generation config so the saved model transcribes correctly in any pipeline
    without extra arguments; returns it and the language token it prompts with."""
    import torch

    from fitwhisper.codeswitch import configure_no_language_token
    from fitwhisper.models.generation import configure_generation, language_for
    from fitwhisper.models.resolve import load_model
    from fitwhisper.train.method_loading import load_kwargs

    kwargs = load_kwargs(model_cfg, precision)
    if "quantization_config" not in kwargs:
        # Trained weights in fp32 whatever the checkpoint stores (large-v3 and turbo publish
        # fp16, and transformers 5 loads dtype="auto"): mixed precision needs fp32 masters,
        # fp16's scaler refuses fp16 gradients, and generate runs the encoder outside
        # autocast, where fp16 weights meet fp32 features.
        kwargs.setdefault("dtype", torch.float32)
    loaded = load_model(
        resolved,
        **_hub(model_cfg),
        **kwargs,
        attn_implementation=train_cfg.attn_implementation,
    )
    language = language_for(loaded, model_cfg.language)
    configure_generation(loaded, language, model_cfg.task)
    if data_cfg.language_token == "none":
        configure_no_language_token(loaded, model_cfg.task)
    return loaded, language


def prepare(loaded, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """Frozen parts, kbit preparation and adapters, by the method (method_loading.py)."""
    from fitwhisper.train.method_loading import prepare_for_training

    return prepare_for_training(loaded, model_cfg, train_cfg)


def datasets(
    rows,
    processor,
    loaded,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    language: str | None,
    precision: Precision,
    *,
    log_mel: str = "cpu",
) -> RunData:
    """Datasets that decode audio and make features as batches are drawn; packed windows,
    cached encoder outputs, length grouping, short encoder input (data/batching.py);
    `log_mel` "device": training items carry waveforms, the trainer makes the features."""
    from fitwhisper.codeswitch import dataset_language
    from fitwhisper.data import augment
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.data.recordings import label_shares, speaker_context
    from fitwhisper.data.training_data import training_data
    from fitwhisper.train import ranks
    from fitwhisper.train.guard import tagged

    ds_language = dataset_language(data_cfg.language_token, language)
    augmenter = augment.augmenter(train_cfg)
    eval_ds = None
    if rows.eval:
        eval_ds = SpeechDataset(rows.eval, processor, language=ds_language, task=model_cfg.task)
    collator = WhisperCollator(processor, loaded.config.decoder_start_token_id)
    if rows.stream is not None:  # read shard by shard as it trains (train/streamed.py)
        from fitwhisper.train import streamed

        if train_cfg.speaker_context:
            log.warning(
                "--speaker_context: streamed clips train without it (a shard reader keeps no "
                "speaker's previous clip)"
            )

        train_ds, train_collator = streamed.dataset(
            rows.stream, processor, loaded, model_cfg, data_cfg, train_cfg, language, augmenter
        )
        streamed.problem_for_readers(train_ds, ranks.world_size(), train_cfg.dataloader_num_workers)
        return RunData(
            train_ds,
            eval_ds,
            collator,
            train_collator,
            list(rows.eval),
            language,
            augmenter,
            rows.n_train,
        )
    train_rows = rows.train
    if train_cfg.speaker_context and train_cfg.cache_encoder_outputs:
        log.warning("--speaker_context: not with --cache_encoder_outputs; clips train without")
    elif train_cfg.speaker_context and train_cfg.previous_text_share > 0:
        train_rows, given = speaker_context(rows.train)
        if given:
            log.info(
                "%d training clips have their speaker's previous clip as context; %.0f%% of "
                "them train with it (--previous_text_share)",
                given,
                100 * train_cfg.previous_text_share,
            )
    timestamp_share, previous_text_share = label_shares(train_cfg, processor.tokenizer, train_rows)
    train_ds = SpeechDataset(
        train_rows,
        processor,
        language=ds_language,
        task=model_cfg.task,
        augment=augmenter,
        log_mel=log_mel,
        timestamp_share=timestamp_share,
        previous_text_share=previous_text_share,
        seed=train_cfg.seed,
    )
    # Held-out clips (eval_ds above) are scored as they are: their dataset has no augmenter.
    # The encoder cache is built once, by the main process; the others then find it made.
    once = contextlib.nullcontext()
    if train_cfg.cache_encoder_outputs:
        once = ranks.main_first("building the encoder cache")
    with once:
        train_ds, train_collator = training_data(
            train_ds,
            rows.durations,
            loaded,
            _training_collator(collator, train_rows, ds_language, train_cfg),
            train_cfg,
            language=language,
            precision=precision,
        )
    if any(row.header_only for row in rows.train):  # --check sample:N
        from fitwhisper.data.late_check import RECORD_FILE, ReplacingUnfit

        train_ds = ReplacingUnfit(train_ds, Path(train_cfg.output_dir) / RECORD_FILE)
    # Each batch names its items, so a diverging step can name its clips (guard.py).
    train_ds, train_collator = tagged(train_ds, train_collator)
    if augmenter is not None:
        log.info("augmenting training clips on the fly: %s", augmenter.augmentation.summary())
    return RunData(
        train_ds,
        eval_ds,
        collator,
        train_collator,
        list(rows.eval),
        language,
        augmenter,
        len(train_ds),
    )


def clip_cost_of(train_rows, processor, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """A callable timing one training clip as the run will make it (decoded, augmented,
    featurised where `log_mel` says, labelled), for the input plan (train/input_plan.py);
    it returns None when the clips cannot be made (the run then says why itself)."""

    def measure(log_mel: str) -> float | None:
        from fitwhisper.data import augment
        from fitwhisper.data.features import SpeechDataset
        from fitwhisper.errors import FitWhisperError
        from fitwhisper.train.input_plan import MEASURED_CLIPS, clip_cost

        ds = SpeechDataset(
            list(train_rows[: MEASURED_CLIPS + 1]),
            processor,
            language=model_cfg.language,
            task=model_cfg.task,
            augment=augment.augmenter(train_cfg),
            log_mel=log_mel,
        )
        try:
            return clip_cost(ds)
        except FitWhisperError:
            return None

    return measure


def trainer(
    loaded,
    processor,
    data: RunData,
    model_cfg: ModelConfig,
    data_cfg: DataConfig,
    train_cfg: TrainConfig,
    plan,
    *,
    fingerprint: dict,
    callbacks: tuple = (),
    resumed_step: int | None = None,
):
    """The Seq2SeqTrainer that halves the batch on OOM, keeping the effective batch
    (memory/backoff.py), scoring held-out clips by generation; logs the plan first."""
    from fitwhisper.data.stream import StreamedClips
    from fitwhisper.evaluate import make_scorer, metrics_fn
    from fitwhisper.logs import progress_enabled
    from fitwhisper.memory.predict import MemoryRequest
    from fitwhisper.memory.watch import MemoryWatch
    from fitwhisper.train import trainer as parts
    from fitwhisper.train.console import ConsoleLog, planned_peak_mib
    from fitwhisper.train.guard import NonFiniteGuard

    has_eval = data.eval_ds is not None
    precision = plan.precision
    layerdrop = max(getattr(loaded.config, f"{s}_layerdrop", 0.0) for s in ("encoder", "decoder"))
    args = parts.training_arguments(
        train_cfg,
        precision,
        optim=plan.optimizer,
        has_eval=has_eval,
        best_metric=plan.best_metric,
        skips_layers=layerdrop > 0,
        loader=plan.input_path.training_arguments(),
    )
    parts.one_gpu_without_launcher(args)
    compute_metrics = None
    if has_eval:
        # The plan's metric, so the one logged is the one the best checkpoint is chosen by.
        metric, normalizer = make_scorer(plan.scoring_language)
        compute_metrics = metrics_fn(
            processor.tokenizer, [r.text for r in data.eval_rows], metric, normalizer
        )
    # Steps count what the sampler draws: clips, or packed windows of several clips.
    unit = "packed windows" if train_cfg.pack_clips else "training clips"
    if n_windows := getattr(data.train_ds, "n_windows", 0):  # data/mixed_windows.py
        unit = f"training items ({n_windows} of them windows of several clips)"
    if isinstance(data.train_ds, StreamedClips):
        unit = "streamed training clips"
        args.ignore_data_skip = True  # a resumed stream starts where it was (streamed.py)
    parts.log_plan(train_cfg, data.n_train, args, resumed_step=resumed_step, unit=unit)
    guard = NonFiniteGuard(data.train_ds, train_cfg.on_nonfinite)
    built = parts.trainer_class(train_cfg, fingerprint)(
        model=loaded,
        args=args,
        data_collator=data.train_collator,
        train_dataset=data.train_ds,
        eval_dataset=data.eval_ds,
        # The whole processor, so every checkpoint-N holds tokenizer and feature extractor
        # and loads as a model anywhere.
        processing_class=processor,
        compute_metrics=compute_metrics,
        # For the message when not even one clip fits: what `fitwhisper plan` would say.
        memory_request=MemoryRequest.from_configs(
            model_cfg, data_cfg, train_cfg, precision=precision
        ),
        callbacks=[
            MemoryWatch(),  # before TensorBoard's callback, which writes the figures it adds
            ConsoleLog(  # after the memory watch, whose figures its line shows
                train_cfg.per_device_train_batch_size
                * train_cfg.gradient_accumulation_steps
                * max(args.world_size, 1),
                planned_peak_mib(train_cfg.plan),
                bar=progress_enabled(),
            ),
            *parts.logging_callbacks(train_cfg, Path(train_cfg.output_dir), resumed_step),
            *parts.early_stopping(train_cfg),
            guard,  # after DefaultFlowCallback: checks weights when a step saves
            *callbacks,
        ],
    )
    built.nonfinite_guard = guard
    built.augmenter = data.augmenter
    parts.quiet_trainer_printing(built)
    return built


def _hub(model_cfg: ModelConfig) -> dict:
    return {"cache_dir": model_cfg.cache_dir} if model_cfg.cache_dir else {}


def _training_collator(collator, train_rows, language: str | None, train_cfg: TrainConfig):
    """The evaluation collator, or one with no loss on the language token of a run whose
    every row is in one language (codeswitch.untrained_language_ids). The encoder cache
    keeps labels alone, so a cached run trains the token as before."""
    from fitwhisper.codeswitch import untrained_language_ids
    from fitwhisper.data.features import WhisperCollator

    tokenizer = collator.processor.tokenizer
    untrained = untrained_language_ids(tokenizer, train_rows, language)
    if not untrained or train_cfg.cache_encoder_outputs:
        return collator
    log.info(
        "%s is given to the decoder but has no loss: every training row is in that one "
        "language, so its loss would teach the model to name it for any audio",
        ", ".join(tokenizer.convert_ids_to_tokens(sorted(untrained))),
    )
    return WhisperCollator(collator.processor, collator.decoder_start_token_id, untrained)
