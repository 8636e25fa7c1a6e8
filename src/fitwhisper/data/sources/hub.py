"""Hugging Face Hub datasets (and local folders in the Hub's layout), streamed.

`datasets.load_dataset(..., streaming=True)` reads Parquet, Arrow and WebDataset files as
the Hub stores them, from the Hub or from a local folder, without an Arrow cache. Audio is
kept undecoded (`Audio(decode=False)`, or raw bytes for WebDataset files) and decoded by
fitwhisper's own decoder, so no torchcodec is needed. A gated dataset uses the token of
`huggingface-cli login` or HF_TOKEN. Offline (HF_HUB_OFFLINE=1, or no network) a name that
is not in the local cache is one clear error.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fitwhisper.data.audio import InMemoryAudio
from fitwhisper.data.sources.spec import SourceSpec
from fitwhisper.data.sources.tar_shards import AUDIO_EXTENSIONS, TEXT_EXTENSIONS
from fitwhisper.errors import DataError


def open_stream(spec: SourceSpec):
    """The source as a `datasets.IterableDataset`, audio left undecoded.

    Raises:
        DataError: the dataset, config or split cannot be found or read.
    """
    import datasets

    where = spec.location if Path(spec.location).is_dir() else f"hf://{spec.location}"
    try:
        stream = datasets.load_dataset(
            spec.location, spec.config, split=spec.split or "train", streaming=True
        )
    except Exception as e:  # ConnectionError offline, FileNotFoundError, ValueError (split), ...
        raise DataError(
            f"cannot open the dataset {where}: {_first_line(e)}",
            hint=_open_hint(spec, e),
        ) from e
    features = stream.features or {}
    for column, feature in features.items():
        if isinstance(feature, datasets.Audio):
            # WebDataset files give an audio file's raw bytes; Parquet gives {bytes, path}.
            raw = column in AUDIO_EXTENSIONS
            kind = datasets.Value("binary") if raw else datasets.Audio(decode=False)
            stream = stream.cast_column(column, kind)
    return stream


def columns_of(stream) -> list[str]:
    """The stream's columns, from its features (a first example when none are stated)."""
    if stream.features:
        return list(stream.features)
    first = next(iter(stream), None)
    return list(first) if first else []


def audio_value(value, name: str) -> InMemoryAudio | None:
    """An example's audio as an `InMemoryAudio` (bytes, array or path), None when empty."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return InMemoryAudio(name, value={"bytes": bytes(value), "path": name})
    if isinstance(value, dict):
        return InMemoryAudio(name, value=value)
    if isinstance(value, str):
        return InMemoryAudio(name, value={"path": value})
    return None


def text_columns(columns: list[str], manifest_text_columns: tuple[str, ...]) -> tuple[str, ...]:
    """Text columns in the order they are looked for: the manifest's names, then a
    WebDataset file's extensions."""
    return (*manifest_text_columns, *TEXT_EXTENSIONS, *(c for c in columns if c == "json"))


def examples(stream) -> Iterator[dict]:
    yield from stream


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _open_hint(spec: SourceSpec, e: BaseException) -> str:
    offline = "Offline" in str(e) or isinstance(e, ConnectionError)
    if offline:
        return (
            "this machine cannot reach the Hub (or HF_HUB_OFFLINE=1 is set) and the dataset "
            "is not in the local cache: download it where there is a network (`huggingface-cli "
            "download --repo-type dataset NAME --local-dir DIR`) and pass DIR, or write it as "
            "shards with `fitwhisper shard`"
        )
    return (
        "check the name, :CONFIG and @SPLIT (hf://ORG/NAME:CONFIG@SPLIT); a gated dataset needs "
        "its terms accepted on the Hub and a token (`huggingface-cli login` or HF_TOKEN)"
    )
