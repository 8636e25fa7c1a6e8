"""Data as users hold it: source strings, tar shards, NeMo manifests, Hub-layout folders and
`fitwhisper shard`, read through `load_manifest` like any manifest; bad sources are one
paragraph."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.data import sources_fixtures as make

from fitwhisper.cli import main
from fitwhisper.data.audio import load_audio_with_info
from fitwhisper.data.manifest import load_manifest
from fitwhisper.data.sources.spec import parse_source
from fitwhisper.errors import ConfigError, DataError


@pytest.fixture(autouse=True)
def _offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_source_strings_name_their_kind_and_weight(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text("")
    assert parse_source(tmp_path / "m.jsonl").kind == "manifest"
    spec = parse_source("hf://mozilla-foundation/common_voice_17_0:zh-TW@test:0.3")
    assert (spec.kind, spec.location, spec.config, spec.split, spec.weight) == (
        "hub",
        "mozilla-foundation/common_voice_17_0",
        "zh-TW",
        "test",
        0.3,
    )
    assert spec.name == "hf://mozilla-foundation/common_voice_17_0:zh-TW@test"
    for shards in ("a/shard-{000..009}.tar", "pipe:curl -s https://x/y.tar", "https://h/s.tar"):
        assert parse_source(shards).kind == "shards"
    assert parse_source(f"{tmp_path}/s.tar:0.7").weight == 0.7
    for bad in (f"{tmp_path}/s.tar:0", f"{tmp_path}/s.tar:-1", "hf://", "hf://a/b/c"):
        with pytest.raises(ConfigError):
            parse_source(bad)


def test_each_source_reads_the_same_clips(shared_data: Path, tmp_path: Path) -> None:
    rows = make.speech_rows(shared_data, 6)
    sources = {
        "nemo": make.nemo_manifest(rows, tmp_path / "nemo.json"),
        "tar glob": make.write_tar(rows, tmp_path / "tars" / "a.tar").parent / "*.tar",
        "pipe": f"pipe:cat {make.write_tar(rows, tmp_path / 'p.tar')}",
        "hub parquet": make.hub_parquet_folder(rows, tmp_path / "hub-pq"),
        "hub webdataset": make.hub_webdataset_folder(rows, tmp_path / "hub-wds"),
    }
    want = [r["text"] for r in rows]
    for name, source in sources.items():
        manifest = load_manifest(str(source))
        assert [r.text for r in manifest.rows] == want, name
        assert all(r.problem is None for r in manifest.rows), name
        decoded, info = load_audio_with_info(manifest.rows[0].audio)
        assert abs(info.duration_s - rows[0]["duration"]) < 0.01, name
        assert decoded.dtype.name == "float32"


def test_shard_round_trips_a_manifest(shared_data: Path, tmp_path: Path, capsys) -> None:
    rows = make.speech_rows(shared_data, 12)
    broken = {"audio": str(tmp_path / "gone.flac"), "text": "lost"}
    source = make.jsonl_manifest([*rows, broken], tmp_path / "train.jsonl")
    out = tmp_path / "shards"
    args = ["shard", str(source), str(out), "--shard_size_mb", "0.15", "--sort_by_duration"]
    assert main([*args, "-q"]) == 0
    said = capsys.readouterr().out
    assert "wrote 12 clips" in said and "1 rows left out (1 missing_file)" in said

    summary = json.loads((out / "shards.json").read_text())
    assert summary["clips"] == 12 and len(summary["shards"]) > 1
    assert summary["skipped"] == {"missing_file": 1}
    assert "gone.flac" in summary["skipped_rows"][0]
    index = [json.loads(line) for line in (out / "index.jsonl").open()]
    for shard in summary["shards"]:  # sorted by duration within each shard
        durations = [e["duration"] for e in index if e["shard"] == shard["name"]]
        assert durations == sorted(durations)

    back = load_manifest(str(out))
    # Each clip keeps the id it had (here the audio path as the manifest wrote it).
    assert sorted((r.id, r.text) for r in back.rows) == sorted(
        (r["audio"], r["text"]) for r in rows
    )
    for row, entry in zip(back.rows, index, strict=True):
        assert load_audio_with_info(row.audio)[1].duration_s == pytest.approx(
            entry["duration"], abs=1e-6
        )

    # Again into the same folder: refused, then replaced when told.
    assert main([*args, "-q"]) == 1
    assert "--force" in capsys.readouterr().err
    assert main([*args, "-q", "--force"]) == 0


def test_bad_sources_are_one_paragraph(shared_data: Path, tmp_path: Path, capsys) -> None:
    rows = make.speech_rows(shared_data, 4)
    whole = make.write_tar(rows, tmp_path / "whole.tar")
    cut = tmp_path / "cut" / "cut.tar"
    cut.parent.mkdir()
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    cases = {
        str(cut): "cannot be read after",
        "hf://nobody/no-such-dataset": "cannot open the dataset hf://nobody/no-such-dataset",
        f"{whole}:0": "weight 0 is not positive",
        f"{whole}:0.7": "is a source's share in a mix of streamed sources",
        str(tmp_path / "none-*.tar"): "no tar shard matches",
    }
    for source, said in cases.items():
        assert main(["check-data", source, "-q"]) == 1, source
        err = capsys.readouterr().err
        assert said in err, (source, err)
        assert "Traceback" not in err

    # A corrupt clip inside a shard is a bad row of the check, counted, not a crash.
    bad = make.write_tar(rows, tmp_path / "bad" / "bad.tar")
    with bad.open("r+b") as f:
        f.seek(512 + 100)  # inside the first clip's FLAC data
        f.write(b"\0" * 2000)
    assert main(["check-data", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "undecodable_audio" in out and "rows fit for training        3  of 4" in out


def test_hub_names_need_the_network_or_the_cache(tmp_path: Path) -> None:
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    with pytest.raises(DataError) as e:
        load_manifest("hf://nobody/no-such-dataset:cfg@test")
    assert "huggingface-cli download" in e.value.hint


def test_a_second_check_of_the_same_data_decodes_nothing(
    shared_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """train, evaluate and check-data check through usable_rows: once per content."""
    from fitwhisper.config import DataConfig
    from fitwhisper.data import check
    from fitwhisper.data.usable import usable_rows

    rows = make.speech_rows(shared_data, 6)
    source = make.jsonl_manifest(rows, tmp_path / "train.jsonl")
    decoded: list = []
    real = check.load_audio_with_info

    def counting(audio):
        decoded.append(audio)
        return real(audio)

    monkeypatch.setattr(check, "load_audio_with_info", counting)
    first = usable_rows(source, DataConfig())
    assert len(decoded) == 6
    again = usable_rows(source, DataConfig())
    assert len(decoded) == 6  # nothing decoded the second time
    assert again.durations == first.durations and again.report.counts() == first.report.counts()

    # A clip replaced by another is decoded again (and only it).
    clip = tmp_path / "clip.flac"
    clip.write_bytes(Path(rows[1]["audio"]).read_bytes())
    source = make.jsonl_manifest([rows[0], {**rows[1], "audio": str(clip)}], source)
    usable_rows(source, DataConfig())
    assert decoded[6:] == [clip]
    clip.write_bytes(Path(rows[2]["audio"]).read_bytes())
    usable_rows(source, DataConfig())
    assert decoded[7:] == [clip]


def test_audio_dir_resolves_relative_paths(shared_data: Path, tmp_path: Path) -> None:
    """Common Voice's train.tsv names clips relative to the clips/ folder beside it."""
    folder = shared_data / "speechocean-train"
    rows = make.speech_rows(shared_data, 3)
    tsv = tmp_path / "train.tsv"
    tsv.write_text(
        "client_id\tpath\tsentence\tlocale\n"
        + "".join(f"c{i}\t{Path(r['audio']).name}\t{r['text']}\ten\n" for i, r in enumerate(rows))
    )
    manifest = load_manifest(tsv, language_column="locale", audio_dir=folder)
    assert [r.audio for r in manifest.rows] == [Path(r["audio"]) for r in rows]
    assert [r.language for r in manifest.rows] == ["en"] * 3
    assert all(Path(r.audio).is_file() for r in manifest.rows)
