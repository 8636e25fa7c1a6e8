"""Fine-tunes that several slow tests share, each trained once a session (tests/conftest.py
holds the fixtures): a test that only needs "a LoRA fine-tune of real offline/base on real
Mandarin" reads one, never trains its own. Tests read these runs and write elsewhere."""

from __future__ import annotations

import json
import random
import re
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
    zero_shot: dict  # offline/base's metrics on held_out, before training (the run's own)
    result: object  # train()'s TrainResult


def train_mandarin_lora(shared_data: Path, root: Path) -> MandarinLora:
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.train import train

    src = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"]
    train_manifest = aishell_rows(src, sentences[:16], root / "train.jsonl")
    held_out = aishell_rows(src, sentences[-8:], root / "held_out.jsonl")
    english = digit_strings(shared_data / "fsdd-train", root / "english.jsonl", 4)
    traditional = DataConfig(text_column="text_zh_tw")

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
    # The run scored the starting weights on the same clips (RUN/eval/before/, the figure
    # `fitwhisper evaluate offline/base` gives: tests/train/test_train.py checks they agree).
    zero_shot = json.loads((result.output_dir / "eval" / "before" / "metrics.json").read_text())
    assert (zero_shot["model"], zero_shot["manifest"]) == ("offline/base", str(held_out))
    return MandarinLora(result.output_dir, held_out, zero_shot, result)


@dataclass(frozen=True)
class MandarinExports:
    """The Mandarin LoRA run exported from its adapter folder to every format by
    `fitwhisper export` with re-scoring and no --language, and the same adapter merged into
    a plain transformers folder (the source the export merges, by the same function)."""

    folder: Path  # OUT/<format>/ for ct2, ggml, onnx and openai, and OUT/export_report.json
    report: dict  # export_report.json
    held_out: Path  # the 8 sentences every engine re-scored (and the long file is made of)
    merged: Path  # the adapter merged into offline/base: a transformers folder


EXPORT_FORMATS = ("ct2", "ggml", "onnx", "openai")
# ggml stays f16 (see cli/export.py); t2s: base writes either script, as evaluate's docs say.
EXPORT_SCORING = ("--quantization", "float32", "--opencc", "t2s")


def export_mandarin_lora(lora: MandarinLora, shared_data: Path, root: Path) -> MandarinExports:
    from fitwhisper.cli import main
    from fitwhisper.models.merge import merge_adapter

    held_out = mandarin_sentences(shared_data, 300, 8, root / "held_out.jsonl")
    out = root / "exports"
    code = main(
        ["export", str(lora.run / "final"), str(out), "--format", ",".join(EXPORT_FORMATS),
         *EXPORT_SCORING, "--manifest", str(held_out)]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "export_report.json").read_text())
    merged = merge_adapter(lora.run, root / "merged").out
    return MandarinExports(out, report, held_out, Path(merged))


def mandarin_sentences(shared_data: Path, start: int, n: int, path: Path) -> Path:
    """n AISHELL sentences from the start-th on, leaving out those with spelled-out Latin
    letters ("H A N N A H"): they send offline/base into a repetition loop whose length
    differs between engines by chance (measured: 223 characters in one engine, 17 in
    another, on the same clip), which scores the loop, not the conversion."""
    folder = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"][start:]
    picked = [r for r in sentences if not re.search("[A-Za-z]", r["text"])][:n]
    lines = [{"audio": str(folder / r["audio"]), "text": r["text"]} for r in picked]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))
    return path


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
