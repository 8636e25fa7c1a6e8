"""Data sources as users hold them, made from real shared clips: a JSONL manifest, a NeMo
manifest, WebDataset tar shards, and Hub-layout folders (Parquet, WebDataset) as the Hub
stores datasets; each offline."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path


def speech_rows(shared_data: Path, n: int) -> list[dict]:
    """The first `n` rows of speechocean-train, audio paths made absolute."""
    folder = shared_data / "speechocean-train"
    rows = [json.loads(line) for line in (folder / "manifest.jsonl").open()][:n]
    return [{**r, "audio": str(folder / r["audio"])} for r in rows]


def jsonl_manifest(rows: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def nemo_manifest(rows: list[dict], path: Path) -> Path:
    """NeMo's names: audio_filepath, text, duration."""
    nemo = [
        {"audio_filepath": r["audio"], "text": r["text"], "duration": r["duration"]} for r in rows
    ]
    return jsonl_manifest(nemo, path)


def write_tar(rows: list[dict], path: Path, *, as_json: bool = False) -> Path:
    """A WebDataset shard: per clip KEY.flac and KEY.txt (or KEY.json with the text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for r in rows:
            key = Path(r["audio"]).stem
            label = (
                ("json", json.dumps({"text": r["text"], "language": "en"}).encode())
                if as_json
                else ("txt", r["text"].encode())
            )
            for ext, data in (("flac", Path(r["audio"]).read_bytes()), label):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def hub_parquet_folder(rows: list[dict], folder: Path) -> Path:
    """A dataset as the Hub stores Parquet: data/train-00000-of-00001.parquet with an Audio
    feature ({bytes, path}) and a `sentence` column (Common Voice's name)."""
    import datasets
    import pyarrow as pa

    table = pa.table(
        {
            "audio": [
                {"bytes": Path(r["audio"]).read_bytes(), "path": Path(r["audio"]).name}
                for r in rows
            ],
            "sentence": [r["text"] for r in rows],
        }
    )
    (folder / "data").mkdir(parents=True)
    # The Audio feature is recorded in the file's metadata, as the Hub's Parquet files have it.
    dataset = datasets.Dataset(table).cast_column("audio", datasets.Audio(decode=False))
    dataset.to_parquet(str(folder / "data" / "train-00000-of-00001.parquet"))
    return folder


def hub_webdataset_folder(rows: list[dict], folder: Path) -> Path:
    """A dataset as the Hub stores WebDataset files: train/0000.tar, train/0001.tar, each clip
    with a .json of its transcript and language."""
    half = len(rows) // 2
    write_tar(rows[:half], folder / "train" / "0000.tar", as_json=True)
    write_tar(rows[half:], folder / "train" / "0001.tar", as_json=True)
    return folder
