"""Training on data as users hold it: every source trains, streamed sources clip by clip with
each clip read once per epoch by exactly one reader, bad clips skipped and counted, and a
killed streamed run resuming to the uninterrupted run's losses."""

from __future__ import annotations

import dataclasses
import itertools
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.conftest import write_tone
from tests.data import sources_fixtures as make
from torch.utils.data import DataLoader

from fitwhisper.cli import main
from fitwhisper.data.batching import ITEMS_KEY
from fitwhisper.data.manifest import RowMaker
from fitwhisper.data.stream import StreamedClips, StreamPositions, Unit, decode

KILL_AFTER_CHECKPOINT = Path(__file__).with_name("kill_after_checkpoint.py")


def _train(model: Path, data: str, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model", str(model),
        "--train_manifest", data,
        "--output_dir", str(out),
        "--per_device_train_batch_size", "2",
        "--logging_steps", "1",
        "--learning_rate", "1e-3",
        "--seed", "0",
        "-q",
        *extra,
    ]  # fmt: skip


def test_each_source_trains(
    tiny_whisper_dir: Path, shared_data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rows = make.speech_rows(shared_data, 6)
    broken = make.write_tar(rows[:2], tmp_path / "tars" / "b.tar")
    with broken.open("r+b") as f:  # the first clip's FLAC data overwritten: undecodable
        f.seek(512 + 100)
        f.write(b"\0" * 2000)
    make.write_tar(rows[2:4], tmp_path / "tars" / "a.tar")  # 3 good clips: both shards read
    sources = {
        "tar shards": str(tmp_path / "tars" / "*.tar"),
        "NeMo manifest": str(make.nemo_manifest(rows, tmp_path / "nemo.json")),
        "Hub Parquet": str(make.hub_parquet_folder(rows, tmp_path / "hub-pq")),
        "Hub WebDataset": str(make.hub_webdataset_folder(rows, tmp_path / "hub-wds")),
    }
    for name, source in sources.items():
        out = tmp_path / name.replace(" ", "-")
        assert main(_train(tiny_whisper_dir, source, out, "--max_steps", "2")) == 0, name
        state = json.loads((out / "trainer_state.json").read_text())
        assert state["global_step"] == 2, name
        report = json.loads((out / "data_report.json").read_text())["train"]
        assert report.get("streamed", False) == (name != "NeMo manifest"), name
    err = capsys.readouterr().err
    assert "skipped b.tar/000360036.flac" not in err  # named by its row id
    assert "streamed training: skipped 000360036" in err and "undecodable_audio" in err


def _tone_units(tmp_path: Path, sizes: list[int]) -> list[Unit]:
    units, n = [], 0
    for u, size in enumerate(sizes):
        clips = []
        for _ in range(size):
            path = write_tone(tmp_path / f"c{n}.wav", 0.3, freq=200.0 + 10 * n)
            clips.append((n + 1, {"audio": str(path), "text": f"clip {n}"}))
            n += 1
        units.append(Unit(f"unit {u}", size, _Clips(clips)))
    return units


class _Clips:
    def __init__(self, clips: list) -> None:
        self.clips = clips

    def __call__(self, start: int, order: list[int] | None):
        for k in (order if order is not None else range(len(self.clips)))[start:]:
            line, record = self.clips[k]
            yield line, record, None


@pytest.mark.parametrize("sizes", [[3, 2, 4, 1, 2, 3], [5, 4, 6]], ids=["whole", "parts"])
def test_every_clip_is_read_once_an_epoch_by_one_reader(tmp_path: Path, sizes) -> None:
    """Two processes of two data-loader workers each (four readers): whole units dealt when
    there are enough, parts of units when there are fewer units than readers."""
    units = _tone_units(tmp_path, sizes)
    head = [rec for u in units for rec in u.read(0, None)][:5]
    maker = RowMaker.for_records(head, tmp_path, tmp_path, None, None, None)
    total = sum(sizes)
    seen: dict[int, Counter] = {0: Counter(), 1: Counter()}
    for rank in (0, 1):
        ds = StreamedClips(
            units, [maker], lambda row, audio, rng: {"text": row.text}, lambda *a: [], 0, rank, 2
        )
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        for k, item in enumerate(loader):
            _, _, position = decode(item[ITEMS_KEY])
            if position.epoch < 2:
                seen[position.epoch][item["text"]] += 1
            if k > 4 * total:
                break
    for epoch in (0, 1):
        assert seen[epoch] == Counter(f"clip {n}" for n in range(total)), epoch


def test_killed_stream_resumes_to_the_uninterrupted_losses(
    tiny_whisper_dir: Path, tmp_path: Path
) -> None:
    rows = []
    for i in range(10):
        path = write_tone(tmp_path / "clips" / f"t{i}.wav", 0.6 + 0.1 * i, freq=250.0 + 40 * i)
        rows.append({"audio": str(path), "text": f"tone number {i} is playing"})
    shards = tmp_path / "shards"
    source = make.jsonl_manifest(rows, tmp_path / "train.jsonl")
    assert main(["shard", str(source), str(shards), "--shard_size_mb", "0.05", "-q"]) == 0

    def argv(out: Path, *extra: str) -> list[str]:
        return _train(
            tiny_whisper_dir,
            str(shards),
            out,
            *("--max_steps", "8", "--save_strategy", "steps", "--save_steps", "4"),
            *("--augment", "light", "--dataloader_num_workers", "2"),
            *extra,
        )

    killed, ref = tmp_path / "killed", tmp_path / "uninterrupted"
    proc = subprocess.Popen(
        [sys.executable, str(KILL_AFTER_CHECKPOINT), "4", *argv(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert main(argv(ref)) == 0
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stderr
    state = json.loads((killed / "checkpoint-4" / "stream_state_rank0.json").read_text())
    assert state["slots"] == 2 and {p[0] for p in state["positions"]} == {0, 1}

    assert main(argv(killed, "--resume")) == 0

    def losses(run: Path) -> dict[int, float]:
        history = json.loads((run / "trainer_state.json").read_text())["log_history"]
        return {e["step"]: e["loss"] for e in history if "loss" in e}

    assert list(losses(killed)) == list(range(1, 9))
    assert losses(killed) == pytest.approx(losses(ref), rel=1e-5)


@pytest.mark.slow
def test_two_nodes_read_every_clip_once_an_epoch(tiny_whisper_dir: Path, tmp_path: Path) -> None:
    """Two "machines" (two torchrun launchers of one process each, joined by c10d
    rendezvous on localhost over gloo) train one epoch of a shard folder: each reads its own
    shards, and together they train every clip exactly once."""
    import os
    import socket

    import fitwhisper

    rows = []
    for i in range(8):
        path = write_tone(tmp_path / "clips" / f"t{i}.wav", 0.5 + 0.05 * i, freq=260.0 + 30 * i)
        rows.append({"audio": str(path), "text": f"tone number {i}", "id": f"clip{i}"})
    shards = tmp_path / "shards"
    source = make.jsonl_manifest(rows, tmp_path / "train.jsonl")
    assert main(["shard", str(source), str(shards), "--shard_size_mb", "0.03", "-q"]) == 0
    assert len(json.loads((shards / "shards.json").read_text())["shards"]) >= 2

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = Path(fitwhisper.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    args = _train(tiny_whisper_dir, str(shards), tmp_path / "run", "--num_train_epochs", "1")
    args = [a for a in args if a != "-q"] + ["-v", "--report_to", "none"]
    launchers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc_per_node",
                "1",
                "--node_rank",
                str(node),
                "--rdzv_backend",
                "c10d",
                "--rdzv_endpoint",
                f"127.0.0.1:{port}",
                "--rdzv_id",
                "two-nodes",
                "-m",
                "fitwhisper",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )  # fmt: skip
        for node in (0, 1)
    ]
    logs = []
    for proc in launchers:
        try:
            logs.append(proc.communicate(timeout=300)[0])
        except subprocess.TimeoutExpired:
            for p in launchers:
                os.killpg(p.pid, signal.SIGKILL)
            pytest.fail(
                "two-node run hung:\n" + "\n".join(p.communicate()[0][-2000:] for p in launchers)
            )
    for proc, log in zip(launchers, logs, strict=True):
        assert proc.returncode == 0, log[-4000:]
    # 8 clips / (2 per batch x 2 processes) = 2 steps, each process 4 clips of its shards.
    trained: dict[int, list[str]] = {0: [], 1: []}
    for log in logs:
        for line in log.splitlines():
            if line.startswith("streamed batch of process "):
                rank, _, clips = line.removeprefix("streamed batch of process ").partition(": ")
                trained[int(rank)] += [c.rsplit("/", 1)[1] for c in eval(clips)]  # noqa: S307
    assert sorted(trained[0] + trained[1]) == sorted(r["id"] for r in rows)
    assert len(trained[0]) == len(trained[1]) == 4
    shard_of = {e["id"]: e["shard"] for e in map(json.loads, (shards / "index.jsonl").open())}
    assert not {shard_of[c] for c in trained[0]} & {shard_of[c] for c in trained[1]}


def _mix(tmp_path: Path, **resume) -> StreamedClips:
    first = _tone_units(tmp_path / "a", [4, 3, 5])
    second = [dataclasses.replace(u, source=1) for u in _tone_units(tmp_path / "b", [2, 2])]
    head = [rec for u in first for rec in u.read(0, None)][:5]
    maker = RowMaker.for_records(head, tmp_path, tmp_path, None, None, None)
    return StreamedClips(
        [*first, *second],
        [maker, maker],
        lambda row, audio, rng: {"text": row.text},
        lambda *a: [],
        seed=0,
        shares=[0.7, 0.3],
        **resume,
    )


def test_a_mix_draws_by_its_shares_and_a_resumed_mix_draws_on_as_before(tmp_path: Path) -> None:
    """Two sources at 0.7/0.3 (12 and 4 clips: the small one repeats): the shares drawn are
    within 0.04 of the weights over 1000 clips, and a mix resumed from the positions the
    trainer noted after 300 clips gives the uninterrupted mix's next 200, source by source."""
    items = list(itertools.islice(_mix(tmp_path), 500))
    drawn = Counter(decode(item[ITEMS_KEY])[1] for item in items)
    more = Counter(decode(i[ITEMS_KEY])[1] for i in itertools.islice(_mix(tmp_path), 1000))
    assert abs(more[0] / 1000 - 0.7) < 0.04 and abs(more[1] / 1000 - 0.3) < 0.04, more
    assert drawn[1] > 4 * 3  # the 4-clip source went round several epochs

    noted = StreamPositions()
    for item in items[:300]:
        noted.note(torch.tensor([item[ITEMS_KEY]]), None)
    resumed = _mix(tmp_path, resume_at=noted.positions, draws_before=noted.draws)
    again = list(itertools.islice(resumed, 200))
    assert [i["text"] for i in again] == [i["text"] for i in items[300:]]
    assert [i[ITEMS_KEY] for i in again] == [i[ITEMS_KEY] for i in items[300:]]


def test_mix_shares_follow_the_weights_and_the_temperature() -> None:
    from fitwhisper.data.sources.spec import parse_source
    from fitwhisper.train.streamed import shares

    specs = [parse_source("hf://a/b:0.75"), parse_source("hf://c/d:0.25"), parse_source("hf://e/f")]
    assert shares(specs, 1.0) == pytest.approx([0.375, 0.125, 0.5])
    # T = 2: square roots of the weights, normalised.
    assert shares(specs[:2], 2.0) == pytest.approx(
        [0.75**0.5, 0.25**0.5] / np.float64(0.75**0.5 + 0.25**0.5)
    )


def test_a_mix_of_two_shard_sources_trains_and_its_record_lists_each(
    tiny_whisper_dir: Path, shared_data: Path, tmp_path: Path, capsys
) -> None:
    rows = make.speech_rows(shared_data, 6)
    ours = make.write_tar(rows[:4], tmp_path / "ours" / "a.tar")
    general = make.write_tar(rows[4:], tmp_path / "general" / "g.tar")
    out = tmp_path / "run"
    argv = _train(tiny_whisper_dir, f"{ours}:0.7", out, "--max_steps", "2")
    assert main([*argv, "--train_mix", f"{general}:0.3"]) == 0
    report = json.loads((out / "data_report.json").read_text())["train"]
    assert [(p["source"], p["weight"], p["share"]) for p in report["sources"]] == [
        (str(ours), 0.7, 0.7),
        (str(general), 0.3, 0.3),
    ]
    card = (out / "final" / "README.md").read_text()
    assert f"`{general}`: weight 0.3, 30.0% of the clips drawn" in card

    # A manifest in a mix is refused before training, with the command that streams it.
    manifest = make.jsonl_manifest(rows, tmp_path / "m.jsonl")
    argv = _train(tiny_whisper_dir, str(ours), tmp_path / "refused", "--max_steps", "2")
    capsys.readouterr()
    assert main([*argv, "--train_mix", str(manifest)]) == 1
    err = capsys.readouterr().err
    assert f"{manifest} is a manifest, which is read whole" in err and "fitwhisper shard" in err


def test_auto_fit_plans_a_streamed_run_at_the_lengths_its_index_records(
    shared_data: Path, tmp_path: Path
) -> None:
    from fitwhisper.config import DataConfig, TrainConfig
    from fitwhisper.train.streamed import planning_lengths

    rows = make.speech_rows(shared_data, 4)
    source = make.jsonl_manifest(rows, tmp_path / "m.jsonl")
    assert main(["shard", str(source), str(tmp_path / "shards"), "-q"]) == 0
    summary = json.loads((tmp_path / "shards" / "shards.json").read_text())

    cfg = TrainConfig(train_manifest=str(tmp_path / "shards"))
    planned, said = planning_lengths(DataConfig(), cfg)
    assert planned.max_audio_len == summary["durations_s"]["max"] < 30
    assert planned.max_label_tokens == summary["transcript_bytes"]["max"] + 5 < 448
    assert "lengths from the shard index" in said
    # A manifest has no index: the options stand.
    unchanged, said = planning_lengths(DataConfig(), TrainConfig(train_manifest=str(source)))
    assert unchanged == DataConfig() and said == ""


def test_trimming_on_a_stream_is_estimated_from_its_index(shared_data: Path, tmp_path: Path):
    from fitwhisper.config import TrainConfig
    from fitwhisper.train.streamed import _trimming, index_durations

    rows = make.speech_rows(shared_data, 6)
    for name, part in (("a", rows[:4]), ("b", rows[4:])):
        source = make.jsonl_manifest(part, tmp_path / f"{name}.jsonl")
        assert main(["shard", str(source), str(tmp_path / name), "-q"]) == 0
    index, b_index = (
        [json.loads(line)["duration"] for line in (tmp_path / n / "index.jsonl").open()]
        for n in "ab"
    )
    cfg = TrainConfig(train_manifest=str(tmp_path / "a"))
    assert index_durations(cfg, 100) == index
    assert index_durations(cfg, 2) == index[::2]  # every k-th line, at most as asked
    said = _trimming("mixed", cfg, 0.05)
    assert f"clips average {np.mean(index):.1f} s" in said and "less work" in said
    # A mix samples each source by its share; a source without an index: no estimate.
    mix = dataclasses.replace(cfg, train_mix=[str(tmp_path / "b")])
    assert index_durations(mix, 100) == index + b_index
    assert index_durations(mix, 2) == [index[0], b_index[0]]  # half of 2 from each
    tar = make.write_tar(rows[:2], tmp_path / "c.tar")
    plain = TrainConfig(train_manifest=str(tar))
    assert index_durations(plain, 100) is None
    assert "not estimated" in _trimming("trimmed", plain, 0.0)
