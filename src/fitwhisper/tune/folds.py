"""Speaker folds for `fitwhisper tune --folds N`: cross-validation by speaker.

The training manifest's speakers are dealt into N folds. Each trial trains N times, each
time without one fold, and scores that fold: every training clip is judged once, by a run
that never heard its speaker, and the trial's error is the pooled error over all of them.
One held-out manifest of a few speakers judges trials on those few voices: on
speechocean762 the lowest of 12 trials led the defaults by 1.6 points on its 10 validation
speakers and lost by 1.0 on 20 unseen ones (bench/RESULTS-quality.md).

The folds are written once into STUDY/folds as JSONL manifests (every column kept, audio
paths made absolute), the same for a given manifest, N and seed, so a resumed or shared
study trains every trial on the same folds.
"""

from __future__ import annotations

import json
import logging
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from fitwhisper.config import DataConfig
from fitwhisper.errors import DataError

log = logging.getLogger(__name__)

FOLDS_DIR = "folds"


@dataclass(frozen=True)
class Fold:
    number: int
    train: Path  # the other folds' rows
    held_out: Path  # this fold's rows
    speakers: int
    clips: int


def write_folds(
    manifest: str,
    data_cfg: DataConfig,
    n: int,
    speaker_column: str,
    seed: int,
    study_dir: Path,
) -> list[Fold]:
    """The `n` folds of `manifest`'s rows (as --max_train_samples keeps them), written to
    STUDY/folds.

    Raises:
        DataError: a manifest that is not a file, rows without a speaker, audio stored in
            the manifest, or fewer speakers than folds.
    """
    from fitwhisper.data.manifest import file_records, load_manifest, select

    loaded = load_manifest(manifest, **data_cfg.manifest_columns())
    pairs = list(zip(loaded.rows, file_records(loaded.path), strict=True))
    pairs = select(pairs, data_cfg.max_train_samples)
    by_speaker: dict[str, list[dict]] = defaultdict(list)
    unreadable, no_speaker = 0, []
    for row, record in pairs:
        if record is None or row.audio is None:  # the data check reports these rows
            unreadable += 1
            continue
        if not isinstance(row.audio, Path):
            raise DataError(
                f"{loaded.where(row)}: its audio is stored in the manifest; --folds writes "
                "the folds as manifests that name audio files",
                hint="judge the trials on --eval_manifest instead of --folds",
            )
        speaker = record.get(speaker_column)
        if speaker in (None, ""):
            no_speaker.append(loaded.where(row))
            continue
        by_speaker[str(speaker)].append({**record, loaded.audio_column: str(row.audio)})
    if no_speaker:
        raise DataError(
            f"{len(no_speaker)} rows of {loaded.path} have no '{speaker_column}' (the first: "
            f"{no_speaker[0]}): --folds deals speakers, not clips, into folds",
            hint="give every row its speaker, name the column with --speaker_column, or "
            "judge the trials on an --eval_manifest of other speakers instead",
        )
    if len(by_speaker) < n:
        raise DataError(
            f"{loaded.path} has {len(by_speaker)} speakers in '{speaker_column}': too few "
            f"for --folds {n}",
            hint=f"give --folds {max(2, len(by_speaker))} or fewer",
        )
    if unreadable:
        log.warning(
            "%d rows of %s without readable audio are in no fold (`fitwhisper check-data` "
            "names them)",
            unreadable,
            loaded.path,
        )
    groups = deal(by_speaker, n, seed)
    out = study_dir / FOLDS_DIR
    out.mkdir(parents=True, exist_ok=True)
    folds = []
    for k, speakers in enumerate(groups):
        held = [r for s in speakers for r in by_speaker[s]]
        rest = [r for j, g in enumerate(groups) if j != k for s in g for r in by_speaker[s]]
        train_path, held_path = out / f"fold-{k}-train.jsonl", out / f"fold-{k}-held-out.jsonl"
        _write_if_changed(train_path, rest)
        _write_if_changed(held_path, held)
        folds.append(Fold(k, train_path, held_path, len(speakers), len(held)))
    log.info(
        "%d speaker folds: %s",
        n,
        ", ".join(f"{f.speakers} speakers / {f.clips} clips" for f in folds),
    )
    return folds


def deal(by_speaker: dict[str, list], n: int, seed: int) -> list[list[str]]:
    """Speakers into `n` groups of about equal clips: in an order shuffled by `seed`, the
    speakers with most clips first, each to the group with fewest clips so far."""
    order = sorted(by_speaker)
    random.Random(seed).shuffle(order)
    order.sort(key=lambda s: -len(by_speaker[s]))  # stable: ties keep the shuffled order
    groups: list[list[str]] = [[] for _ in range(n)]
    sizes = [0] * n
    for speaker in order:
        k = min(range(n), key=lambda i: (sizes[i], i))
        groups[k].append(speaker)
        sizes[k] += len(by_speaker[speaker])
    return groups


def _write_if_changed(path: Path, rows: list[dict]) -> None:
    """A study's processes may all write the folds; the same text is left alone."""
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
