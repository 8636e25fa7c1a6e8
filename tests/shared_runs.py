"""Fine-tunes that several slow tests share, each trained once a session (tests/conftest.py
holds the fixtures): a test that only needs "a LoRA fine-tune of real offline/base on real
Mandarin" reads one, never trains its own. Tests read these runs and write elsewhere."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class MandarinLora:
    """offline/base with LoRA adapters (decoder only) trained 4 steps on 16 AISHELL sentences
    with Traditional references, scored on 8 held-out ones before and after, with 4 English
    digit strings as the forgetting guard's regression set."""

    run: Path  # the run folder: final/ (an adapter), eval/metrics.json, eval/regression.json
    held_out: Path  # 8 sentences of the same speaker, never trained on
    zero_shot: dict  # offline/base's metrics on held_out, before training
    result: object  # train()'s TrainResult


def train_mandarin_lora(shared_data: Path, root: Path) -> MandarinLora:
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.evaluate import evaluate_manifest
    from fitwhisper.train import train

    src = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"]
    train_manifest = aishell_rows(src, sentences[:16], root / "train.jsonl")
    held_out = aishell_rows(src, sentences[-8:], root / "held_out.jsonl")
    english = digit_strings(shared_data / "fsdd-train", root / "english.jsonl", 4)
    traditional = DataConfig(text_column="text_zh_tw")

    zero_shot = evaluate_manifest(
        "offline/base", held_out, generation_max_length=48, data_cfg=traditional
    )
    result = train(
        ModelConfig(
            model="offline/base",
            language="zh",
            output_script="traditional",
            use_lora=True,
            freeze_encoder=True,  # CPU time: the encoder runs forward only
        ),
        traditional,
        TrainConfig(
            output_dir=str(root / "run"),
            train_manifest=str(train_manifest),
            eval_manifest=str(held_out),
            regression_manifest=str(english),
            per_device_train_batch_size=8,
            per_device_eval_batch_size=8,
            learning_rate=1e-3,
            max_steps=4,
            generation_max_length=48,
            report_to="none",
            seed=0,
        ),
    )
    return MandarinLora(result.output_dir, held_out, zero_shot.metrics(), result)


def aishell_rows(src: Path, rows: list[dict], out: Path) -> Path:
    """Rows of aishell-s0150 as they are: `text` Simplified, `text_zh_tw` Traditional."""
    lines = [{**r, "audio": str(src / r["audio"])} for r in rows]
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
    return out


def digit_strings(src: Path, out: Path, n: int) -> Path:
    """English digit strings: 3-6 fsdd digits of one speaker joined by 0.15 s of silence."""
    import soundfile

    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    by_speaker: dict[str, list[dict]] = {}
    for r in rows:
        by_speaker.setdefault(r["speaker"], []).append(r)
    rng, lines = random.Random(0), []
    for i, speaker in enumerate(sorted(by_speaker)[:n]):
        picked = rng.sample(by_speaker[speaker], rng.randint(3, 6))
        pieces = []
        for r in picked:
            audio, sr = soundfile.read(str(src / r["audio"]), dtype="float32")
            pieces += [audio, np.zeros(int(0.15 * sr), np.float32)]
        path = out.parent / f"digits_{i}.flac"
        soundfile.write(str(path), np.concatenate(pieces), sr)
        text = " ".join(r["text"] for r in picked)
        lines.append({"audio": str(path), "text": text, "language": "en"})
    out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return out
