"""The rows a training run uses: checked, in the output script, with the language-token
strategy, rehearsal rows mixed in, and the regression set for the forgetting guard.

`checked_split` checks a manifest (data/usable.py) and records what it found in
RUN/data_report.json; `prepare_rows` shapes the rows for training.
`--rehearsal_manifest` + `--rehearsal_share` mix such data into training (against
forgetting); `--regression_manifest` is scored before and after (regression.py).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import DataConfig, EvalConfig, ModelConfig, TrainConfig
from fitwhisper.errors import DataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunRows:
    """The rows a run trains and scores on, and what the data check left out."""

    train: list
    eval: list
    skipped: int
    durations: list[float]  # seconds, one per training row (packing cuts clips at them)
    stream: object | None = None  # a streamed training source (train/streamed.py): no rows

    @property
    def n_train(self) -> int:
        """Training clips: the rows, or the clips a streamed source counts (0: unknown)."""
        if self.stream is None:
            return len(self.train)
        from fitwhisper.train.streamed import source_clips

        return source_clips(self.stream) or 0


def checked_rows(
    data_cfg: DataConfig, train_cfg: TrainConfig, tokenizer, out: Path, manifests: dict
) -> RunRows:
    """Check the training and held-out manifests (the tokenizer measures transcripts);
    write RUN/data_report_{split}.csv and RUN/data_report.json.

    Raises:
        DataError: unfit rows with --bad_rows error, or no usable training row.
    """
    from fitwhisper.data.sampled_check import sample_size
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.train import streamed

    reports, rows, skipped, durations = {}, {"train": [], "eval": []}, 0, []
    stream = None
    if streamed.is_streamed(train_cfg):
        # Checked as it is trained on (data/stream.py): only its shards are listed here.
        stream = streamed.open_stream(data_cfg, train_cfg)
        reports["train"] = streamed.report(stream, train_cfg)
    for split, path, limit in (
        ("train", train_cfg.train_manifest, data_cfg.max_train_samples),
        ("eval", train_cfg.eval_manifest, data_cfg.max_eval_samples),
    ):
        if not path or (split == "train" and stream is not None):
            continue
        report_path = out / f"data_report_{split}.csv"
        # Held-out rows are scored as they are: always checked in full.
        sample = sample_size(train_cfg.check) if split == "train" else None
        data = usable_rows(
            path, data_cfg, tokenizer, limit=limit, report_path=report_path, sample=sample
        )
        skipped += len(data.skipped)
        rows[split] = data.rows
        durations = data.durations if split == "train" else durations
        # Each manifest is hashed once, for the run record (record.py).
        reports[split] = data.summary(path, manifests[split]["sha256"])
    if not rows["train"] and stream is None:
        raise DataError(
            f"no usable training rows in {train_cfg.train_manifest}",
            hint="run `fitwhisper check-data` on it to see why",
        )
    (out / "data_report.json").write_text(json.dumps(reports, indent=2) + "\n")
    return RunRows(rows["train"], rows["eval"], skipped, durations, stream)


def prepare_rows(
    model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig, processor, rows: RunRows
):
    """Training and eval rows in the output script and with the language-token strategy,
    rehearsal rows mixed in (counted, their durations measured), and the regression guard
    (None without the option)."""
    from fitwhisper.chinese_script import rows_in_script
    from fitwhisper.codeswitch import rows_for_strategy
    from fitwhisper.data.usable import usable_rows
    from fitwhisper.train.regression import RegressionGuard

    strategy = data_cfg.language_token
    train_rows = rows_for_strategy(rows_in_script(rows.train, model_cfg.output_script), strategy)
    eval_rows = rows_for_strategy(rows.eval, strategy)
    durations = rows.durations
    if data_cfg.rehearsal_manifest:
        # Another manifest: its own columns are found by name, as --bad_rows says.
        extra = usable_rows(
            data_cfg.rehearsal_manifest, DataConfig(bad_rows=data_cfg.bad_rows), processor.tokenizer
        )
        train_rows, added = mix_rehearsal(
            train_rows, extra.rows, data_cfg.rehearsal_share, train_cfg.seed
        )
        durations = _with_rehearsal_durations(durations, train_rows)
        log.info(
            "rehearsal: %d rows drawn from %d usable of %s (%d skipped) = %.1f%% of %d "
            "training rows",
            added,
            len(extra.rows),
            data_cfg.rehearsal_manifest,
            len(extra.skipped),
            100 * added / len(train_rows),
            len(train_rows),
        )
    regression = None
    if train_cfg.regression_manifest:
        reg = usable_rows(
            train_cfg.regression_manifest,
            DataConfig(bad_rows=data_cfg.bad_rows),
            processor.tokenizer,
            purpose="scoring",
        )
        if reg.skipped:
            log.warning("regression set: %d rows skipped (--bad_rows skip)", len(reg.skipped))
        scoring = EvalConfig(
            language=model_cfg.language,
            task=model_cfg.task,
            batch_size=train_cfg.per_device_eval_batch_size,
            generation_max_length=train_cfg.generation_max_length,
        )
        regression = RegressionGuard(reg.rows, processor, train_cfg.regression_manifest, scoring)
    return RunRows(train_rows, eval_rows, rows.skipped, durations, rows.stream), regression


def mix_rehearsal(
    train_rows: Sequence, rehearsal_rows: Sequence, share: float, seed: int
) -> tuple[list, int]:
    """Training rows plus rehearsal rows making up `share` of the result; returns the rows
    and how many were added. Sampled with `seed` (the same rows on resume), with
    repetition only when the rehearsal set is smaller than what is asked."""
    if not rehearsal_rows or share <= 0:
        return list(train_rows), 0
    n = round(share / (1 - share) * len(train_rows))
    rng = random.Random(seed)
    rows = list(rehearsal_rows)
    picked = [*rows * (n // len(rows)), *rng.sample(rows, n % len(rows))]
    return [*train_rows, *picked], n


def option_problems(model_cfg: ModelConfig, data_cfg: DataConfig, train_cfg: TrainConfig):
    """Problems of the guard, rehearsal, language-token and output-script options."""
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.errors import ConfigError

    problems = []
    for flag, path in (
        ("--rehearsal_manifest", data_cfg.rehearsal_manifest),
        ("--regression_manifest", train_cfg.regression_manifest),
    ):
        if path and not Path(path).exists():
            problems.append(f"{flag} {path}: no such file or folder")
    if data_cfg.language_token == "fixed" and not model_cfg.language:
        problems.append("--language_token fixed needs --language (the token every row gets)")
    try:
        check_output_script(model_cfg.output_script)
    except ConfigError as e:
        problems.append(f"--output_script: {e.message}; {e.hint}")
    return problems + _check_problems(train_cfg)


def _check_problems(train_cfg: TrainConfig) -> list[str]:
    from fitwhisper.data.sampled_check import sample_size
    from fitwhisper.errors import ConfigError

    try:
        sampled = sample_size(train_cfg.check) is not None
    except ConfigError as e:
        return [f"{e.message}: {e.hint}"]
    if sampled and train_cfg.cache_encoder_outputs:
        return [
            "--check sample:N with --cache_encoder_outputs: the cache decodes every training "
            "clip before the first step, so a bad one would stop it there; pass --check full"
        ]
    return []


def _with_rehearsal_durations(durations: list[float], train_rows: list) -> list[float]:
    """Durations for the rehearsal rows appended after the checked training rows (the
    training check did not measure them): read from their headers, since packing and the
    short encoder window cut each clip at its duration."""
    from fitwhisper.data.audio import probe_audio

    extra = train_rows[len(durations) :]
    return [*durations, *(probe_audio(r.audio).duration_s for r in extra)]
