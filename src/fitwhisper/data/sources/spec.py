"""What a data source string names: a manifest, tar shards, or a Hub dataset.

Every option that takes data (`--train_manifest`, `--eval_manifest`, `check-data`,
`evaluate`, `shard`, ...) accepts these forms, decided here once:

- a manifest file or folder as before (JSON, JSONL, CSV/TSV, audiofolder, `save_to_disk`);
  NeMo's JSONL manifests (`audio_filepath`, `text`, `duration`) are JSONL manifests;
- tar shards in WebDataset's layout (each clip its audio file plus a .txt or .json of the
  same key): a path, a glob (`shards/*.tar`), a brace range (`shards-{000..099}.tar`), a
  `pipe:COMMAND` whose output is a tar, or an http(s) URL; a folder written by
  `fitwhisper shard` (its `index.jsonl` knows every clip without reading the shards);
- a Hugging Face Hub dataset, `hf://ORG/NAME[:CONFIG][@SPLIT]`, or a local folder laid out as
  the Hub stores datasets (Parquet or WebDataset files), both read by `datasets` streaming.

A trailing `:WEIGHT` (a number) sets the source's share in a mix of several.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fitwhisper.errors import ConfigError

HUB_PREFIX = "hf://"
INDEX_FILE = "index.jsonl"  # written by `fitwhisper shard`, one line per clip
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# Files that make a folder a Hub-layout dataset (when it is no audiofolder / save_to_disk).
HUB_DATA_SUFFIXES = (".parquet", ".arrow", *SHARD_SUFFIXES)
_WEIGHT = re.compile(r"^(?P<spec>.+?):(?P<weight>[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)$")

Kind = Literal["manifest", "shards", "hub"]


@dataclass(frozen=True)
class SourceSpec:
    """One data source as the user wrote it, and what it is.

    Attributes:
        text: the source as given (weight included), for messages and the run record.
        kind: "manifest", "shards" or "hub".
        location: the path, pattern, URL or Hub id (without `hf://`, config, split, weight).
        config: a Hub dataset's configuration (`:CONFIG`), else None.
        split: a Hub dataset's split (`@SPLIT`), else None (datasets' "train").
        weight: the share in a mix (`:WEIGHT`), None when not given.
    """

    text: str
    kind: Kind
    location: str
    config: str | None = None
    split: str | None = None
    weight: float | None = None

    @property
    def name(self) -> str:
        """The source without its weight, as messages name it."""
        return self.text if self.weight is None else self.text.rsplit(":", 1)[0]


def parse_source(text: str | os.PathLike) -> SourceSpec:
    """The source named by `text` (see the module's docstring for the forms).

    Raises:
        ConfigError: a weight that is not a positive number, an empty Hub name.
    """
    raw = str(text)
    spec, weight = raw, None
    match = _WEIGHT.match(raw)
    # A path may end in ":2" only by accident; a weight is never read off an existing file.
    if match and not Path(raw).exists():
        spec, weight = match["spec"], float(match["weight"])
        if not weight > 0:
            raise ConfigError(
                f"data source {raw}: weight {match['weight']} is not positive",
                hint="give each source of a mix a weight above 0 (e.g. a/:0.7 b/:0.3), or "
                "leave the source out",
            )
    if spec.startswith(HUB_PREFIX):
        return _hub_spec(raw, spec[len(HUB_PREFIX) :], weight)
    if is_shards(spec):
        return SourceSpec(raw, "shards", spec, weight=weight)
    if is_hub_layout(spec):
        return SourceSpec(raw, "hub", spec, weight=weight)
    return SourceSpec(raw, "manifest", spec, weight=weight)


def is_shards(location: str) -> bool:
    """Tar shards: a .tar path or pattern, `pipe:`, a URL to a tar, or a shard folder."""
    if location.startswith("pipe:"):
        return True
    bare = location.split("?", 1)[0].lower()
    if bare.endswith(SHARD_SUFFIXES):
        return True
    return (Path(location).expanduser() / INDEX_FILE).is_file()


def is_hub_layout(location: str) -> bool:
    """A local folder laid out as the Hub stores a dataset: Parquet, Arrow or tar files (in
    it or in split folders such as data/ or train/), and none of the files that make it an
    audiofolder or a `save_to_disk` folder."""
    folder = Path(location).expanduser()
    if not folder.is_dir():
        return False
    own = ("metadata.csv", "metadata.jsonl", "metadata.tsv", "dataset_info.json", "state.json")
    if any((folder / name).is_file() for name in own) or (folder / "dataset_dict.json").is_file():
        return False
    for depth in ("*", "*/*", "*/*/*"):
        if any(p.name.lower().endswith(HUB_DATA_SUFFIXES) for p in folder.glob(depth)):
            return True
    return False


def _hub_spec(raw: str, rest: str, weight: float | None) -> SourceSpec:
    name, _, split = rest.partition("@")
    name, _, config = name.partition(":")
    if name.count("/") > 1 or not name.strip("/"):
        raise ConfigError(
            f"data source {raw}: not a Hub dataset name",
            hint="write hf://ORG/NAME, optionally with :CONFIG and @SPLIT, e.g. "
            "hf://mozilla-foundation/common_voice_17_0:zh-TW@train",
        )
    return SourceSpec(raw, "hub", name, config or None, split or None, weight)
