"""`train` on streamed data (data/stream.py): which runs stream, how many steps they take,
their dataset, data loader and stream position in checkpoints.

`--streaming auto` (the default) streams tar shards, shard folders and Hub datasets and
reads manifests whole; `on` and `off` decide it (`off` on a shard folder reads its index
whole, which keeps every batching option). A streamed run is scheduled by steps: its epochs
become `max_steps` from the clips its index counts. What needs every row up front is not
done on a stream and says so: packing clips (`--pack_clips`), cached encoder outputs,
length-grouped batches, windows of several clips among trimmed batches, rehearsal rows.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from pathlib import Path

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError

log = logging.getLogger(__name__)

# Options that need every training row before the first step, with what to do instead.
_NEEDS_ROWS = {
    "pack_clips": "--pack_clips",
    "cache_encoder_outputs": "--cache_encoder_outputs",
    "group_by_duration": "--group_by_duration",
}


def is_streamed(cfg: TrainConfig) -> bool:
    """Whether the training data is streamed: `--streaming`, or by the source (auto); a
    mix (`--train_mix`) always is."""
    if cfg.train_mix and cfg.streaming != "off":
        return True
    if cfg.streaming != "auto" or not cfg.train_manifest:
        return cfg.streaming == "on"
    from fitwhisper.data.sources.spec import parse_source

    return parse_source(cfg.train_manifest).kind != "manifest"


def sources(cfg: TrainConfig) -> list:
    """The training sources (`SourceSpec`s): --train_manifest, then --train_mix's."""
    from fitwhisper.data.sources.spec import parse_source

    return [parse_source(s) for s in [cfg.train_manifest, *(cfg.train_mix or [])] if s]


def shares(specs: list, temperature: float) -> list[float]:
    """Each source's share of the clips drawn: weight^(1/T), normalised (a weight left out
    is 1)."""
    raw = [(1.0 if s.weight is None else s.weight) ** (1.0 / temperature) for s in specs]
    return [w / sum(raw) for w in raw]


def option_problems(data_cfg: DataConfig, cfg: TrainConfig) -> list[str]:
    """Options a streamed run cannot honour (all listed at once by validation.py)."""
    try:
        if not is_streamed(cfg):
            return []
    except ConfigError as e:  # a source string that names nothing (a bad weight, ...)
        return [f"--train_manifest: {e.message}"]
    if cfg.train_mix and cfg.streaming == "off":
        return ["--train_mix mixes streamed sources; leave --streaming at auto or on"]
    try:
        specs = sources(cfg)
    except ConfigError as e:
        return [f"--train_mix: {e.message}"]
    problems = []
    for spec in specs:
        if spec.kind == "manifest" and (cfg.streaming == "on" or cfg.train_mix):
            why = "--train_mix" if cfg.train_mix else "--streaming on"
            problems.append(
                f"{why}: {spec.name} is a manifest, which is read whole; write it as shards "
                f"(`fitwhisper shard {spec.name} --output_dir SHARDS`) to stream it"
            )
    from fitwhisper.data.stream import MAX_SOURCES

    if len(specs) > MAX_SOURCES:
        problems.append(f"--train_mix: {len(specs)} sources; a mix takes at most {MAX_SOURCES}")
    for name, flag in _NEEDS_ROWS.items():
        if getattr(cfg, name):
            problems.append(
                f"{flag} needs every training row before the first step, which a streamed "
                "run does not read; leave it out, or pass --streaming off"
            )
    if data_cfg.rehearsal_manifest:
        problems.append(
            "--rehearsal_manifest is not mixed into streamed data yet; write both as shards "
            "and train on each, or pass --streaming off"
        )
    return problems


def open_stream(data_cfg: DataConfig, cfg: TrainConfig):
    """The training sources' units (data/sources/units.py), opened once by each process: a
    mix's units after one another, each marked with its source."""
    from fitwhisper.data.sources.units import mixed_sources, stream_source

    columns = data_cfg.manifest_columns()
    specs = sources(cfg)
    return mixed_sources(
        [stream_source(spec, columns) for spec in specs], shares(specs, cfg.mix_temperature)
    )


def planning_lengths(data_cfg: DataConfig, cfg: TrainConfig) -> tuple[DataConfig, str]:
    """`data_cfg` with --max_audio_len and --max_label_tokens lowered to what the training
    sources' indexes record (every source needs one), for planning memory only; and how it
    was decided ("" when unchanged)."""
    from fitwhisper.data.sources.units import index_lengths

    try:
        found = [index_lengths(spec.location) for spec in sources(cfg)]
    except ConfigError:
        return data_cfg, ""
    if not found or None in found:
        return data_cfg, ""
    audio = min(data_cfg.max_audio_len, max(f.longest_s for f in found))
    labels = [f.label_tokens_at_most for f in found]
    tokens = (
        data_cfg.max_label_tokens if None in labels else min(data_cfg.max_label_tokens, max(labels))
    )
    return (
        dataclasses.replace(data_cfg, max_audio_len=audio, max_label_tokens=tokens),
        f"lengths from the shard index (clips up to {audio:.1f} s, labels up to {tokens} tokens)",
    )


def report(source, cfg: TrainConfig) -> dict:
    """What data_report.json records for a streamed training source: each source of a mix
    with its weight, share, shards, clips and hours (from its index where it has one)."""
    from fitwhisper.data.sources.units import index_summary

    parts = []
    for k, spec in enumerate(sources(cfg)):
        units = [u for u in source.units if u.source == k]
        counts = [u.clips for u in units]
        parts.append(
            {
                "source": spec.name,
                "weight": spec.weight,
                "share": round(source.shares[k], 4),
                "shards": len(units),
                "rows": None if None in counts else sum(counts),
                "hours": (index_summary(spec.location) or {}).get("hours"),
            }
        )
    known = [p["hours"] for p in parts]
    return {
        "manifest": cfg.train_manifest,
        "streamed": True,
        "shards": len(source.units),
        "rows": source_clips(source),
        "hours": None if None in known else round(sum(known), 4),
        "sources": parts,
        "checked": "as trained on: bad rows are skipped and counted in the log",
    }


def source_clips(source) -> int | None:
    counts = [u.clips for u in source.units]
    return None if None in counts else sum(counts)


def with_steps(cfg: TrainConfig, clips: int | None, processes: int) -> TrainConfig:
    """`cfg` with `max_steps` set from its epochs and the clips counted (a stream has no
    length for Trainer to count epochs by).

    Raises:
        ConfigError: neither --max_steps nor a count of the clips.
    """
    if cfg.max_steps > 0:
        return cfg
    if not clips:
        raise ConfigError(
            f"the streamed source {cfg.train_manifest} does not say how many clips it holds, "
            "so its epochs cannot be counted in steps",
            hint="pass --max_steps N, or write the data with `fitwhisper shard`, whose index "
            "counts them",
        )
    effective = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * processes
    steps = max(1, math.ceil(clips * cfg.num_train_epochs / effective))
    log.info(
        "streamed data: %d clips x %g epochs / effective batch %d = %d optimizer steps",
        clips,
        cfg.num_train_epochs,
        effective,
        steps,
    )
    return dataclasses.replace(cfg, max_steps=steps)


def dataset(source, processor, model, model_cfg: ModelConfig, data_cfg, cfg, language, augmenter):
    """The streamed training dataset and its collator (trimmed batches as
    --encoder_input asks; several-clip windows are for datasets read whole)."""
    from fitwhisper.codeswitch import dataset_language
    from fitwhisper.data.batching import TrimmedCollator
    from fitwhisper.data.check import row_problems
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.data.stream import StreamCollator, StreamedClips
    from fitwhisper.train import ranks

    clips = SpeechDataset(
        [],
        processor,
        language=dataset_language(data_cfg.language_token, language),
        task=model_cfg.task,
        augment=augmenter,
    )
    ds = StreamedClips(
        source.units,
        source.rows,
        functools.partial(_item, clips, model_cfg.output_script, data_cfg.language_token),
        functools.partial(row_problems, cfg=data_cfg, tokenizer=processor.tokenizer),
        seed=cfg.seed,
        rank=ranks.rank(),
        world=ranks.world_size(),
        augmenting=augmenter is not None,
        shares=source.shares,
    )
    collator = WhisperCollator(processor, model.config.decoder_start_token_id)
    if (mode := cfg.encoder_input_mode) != "full":
        from fitwhisper.models.short_window import allow_short_input, record_training_window

        share = cfg.full_window_share if mode == "mixed" else 0.0
        allow_short_input(model)
        record_training_window(model, mode, share, 0.0)
        collator = TrimmedCollator(collator, full_share=share)
        log.info(_trimming(mode, cfg, share))
    return ds, StreamCollator(collator)


def _trimming(mode: str, cfg: TrainConfig, share: float) -> str:
    """What trimming saves on this stream, its batching replayed on clip lengths the shard
    indexes record (in random order, as streams are read), as data read whole says it."""
    from fitwhisper.data.batching import WithDurations
    from fitwhisper.data.training_data import DESCRIBED_ROWS, describe_trimming

    durations = index_durations(cfg, DESCRIBED_ROWS)
    if not durations:
        kept = f", {share:.0%} of them kept at 30 s" if mode == "mixed" else ""
        return (
            f"--encoder_input {mode} on streamed data: batches cut to their longest clip{kept} "
            "(a source without a shard index: what that saves is not estimated)"
        )
    return describe_trimming(mode, WithDurations(durations, durations), cfg, share)


def index_durations(cfg: TrainConfig, at_most: int) -> list[float] | None:
    """Clip durations from each source's shard index, each source's in proportion to its
    share of the draws; None where a source has no index."""
    from fitwhisper.data.sources.units import index_durations as from_index

    specs = sources(cfg)
    found: list[float] = []
    for spec, part in zip(specs, shares(specs, cfg.mix_temperature), strict=True):
        durations = from_index(spec.location, max(1, round(part * at_most)))
        if durations is None:
            return None
        found += durations
    return found


def _item(clips, script: str | None, strategy: str, row, audio, rng):
    from fitwhisper.chinese_script import rows_in_script
    from fitwhisper.codeswitch import rows_for_strategy

    (row,) = rows_for_strategy(rows_in_script([row], script), strategy)
    return clips.item(row, audio, rng)


def problem_for_readers(ds, world: int, workers: int) -> None:
    """Refuse, before training, a stream with fewer shards than readers."""
    if (why := ds.problem_for(world, workers)) is not None:
        raise ConfigError(
            why,
            hint="write the data in more shards (`fitwhisper shard --shard_size_mb` smaller), "
            "whose index also lets readers share shards, or pass fewer "
            "--dataloader_num_workers",
        )


def resume(ds, checkpoint: Path, rank: int, world: int, workers: int) -> None:
    """Start each of this process's slots where `checkpoint` left it."""
    from fitwhisper.data.stream import StreamPositions

    positions, skipped, draws = StreamPositions.load(checkpoint, rank, ds.slots(world, workers))
    ds.resume_at, ds.skipped_before, ds.draws_before = positions, skipped, draws
    readers = len({slot for slot, _source in positions})
    log.info("streamed data: resuming %d reader(s) where %s left them", readers, checkpoint)


def record_skips(out: Path, trainer) -> int:
    """The bad rows every process skipped in its stream, summed (a collective: every
    process calls it), logged and written into RUN/data_report.json by the main one."""
    import torch

    from fitwhisper.train import ranks

    skipped = torch.tensor([trainer.streamed_skips()], dtype=torch.long)
    if ranks.world_size() > 1:
        import torch.distributed as dist

        dist.all_reduce(skipped)
    total = int(skipped.item())
    if ranks.is_main():
        if total:
            log.warning("streamed training skipped %d bad rows (the first are named above)", total)
        path = out / "data_report.json"
        reports = json.loads(path.read_text())
        reports["train"]["skipped_while_streaming"] = total
        path.write_text(json.dumps(reports, indent=2) + "\n")
    return total


class StreamMixin:
    """Put before GuardMixin: a streamed dataset gets a plain DataLoader (each process reads
    its own shards, Accelerate neither dispatches nor re-splits batches), and each
    checkpoint records how far each reader of this process got."""

    def get_train_dataloader(self):
        from torch.utils.data import DataLoader

        from fitwhisper.data.stream import StreamedClips, StreamPositions

        if not isinstance(self.train_dataset, StreamedClips):
            return super().get_train_dataloader()
        self.stream_positions = StreamPositions()
        self.stream_positions.start_from(self.train_dataset)
        args = self.args
        workers = args.dataloader_num_workers
        return DataLoader(
            self.train_dataset,
            batch_size=self._train_batch_size,
            collate_fn=self.data_collator,
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
        )

    def training_step(self, model, inputs, num_items_in_batch=None):
        from fitwhisper.data.batching import ITEMS_KEY
        from fitwhisper.data.stream import CLIPS_KEY, SKIPPED_KEY

        skipped = inputs.pop(SKIPPED_KEY, None)
        clips = inputs.pop(CLIPS_KEY, None)
        if (positions := getattr(self, "stream_positions", None)) is not None:
            positions.note(inputs.get(ITEMS_KEY), skipped)
            # -v names every clip each process trains on (which reader read what).
            log.debug("streamed batch of process %d: %s", self.args.process_index, clips)
        return super().training_step(model, inputs, num_items_in_batch)

    def _save_checkpoint(self, model, trial) -> None:
        super()._save_checkpoint(model, trial)
        if (positions := getattr(self, "stream_positions", None)) is None:
            return
        from fitwhisper.train import ranks

        ckpt = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        slots = self.train_dataset.slots(ranks.world_size(), self.args.dataloader_num_workers)
        positions.save(ckpt, ranks.rank(), slots)

    def streamed_skips(self) -> int:
        """Bad rows this process skipped in its stream so far."""
        positions = getattr(self, "stream_positions", None)
        return sum(positions.skipped.values()) if positions is not None else 0
