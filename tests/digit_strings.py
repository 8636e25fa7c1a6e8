"""English digit strings from the shared Free Spoken Digit Dataset, for the fine-tuning tests
(tests/test_default_training_windows.py, tests/test_finetune_quantised.py,
tests/test_packed_timestamps.py).

The task is digit strings (phone numbers, codes): several single-digit recordings of one
speaker joined with short gaps into one clip, transcribed "3 5 1 9". Zero-shot tiny.en
writes them in many ways ("351-9", "Three, five.") and sometimes runs away repeating a
digit; a fine-tune must learn the one format and hear the digits. Training and held-out
clips use different recordings of each digit (FSDD indexes 5-39 train, 40-49 held out) and
different digit strings. Clips are written where the caller says (a tmp_path); nothing is
copied into the repository.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GAP_S = 0.25  # silence between two digits, seconds
HELD_OUT_FROM = 40  # FSDD recording index: below trains, from here on is held out


@dataclass(frozen=True)
class DigitStrings:
    train_manifest: Path
    eval_manifest: Path
    n_train: int
    n_eval: int


def make_digit_strings(
    fsdd: Path,
    out: Path,
    *,
    n_train: int = 48,
    n_eval: int = 16,
    digits_per_clip: tuple[int, int] = (3, 5),
    speakers: tuple[str, ...] = ("george", "jackson", "lucas", "nicolas"),
    seed: int = 0,
) -> DigitStrings:
    """Write `n_train` + `n_eval` digit-string clips and two JSONL manifests under `out`.

    Transcripts are digits separated by spaces ("3 5 1 9"): Whisper's English normaliser
    keeps them as they are, so each digit counts as one word.
    """
    import soundfile

    rng = random.Random(seed)
    recordings = _recordings_by_speaker_digit(fsdd)
    used: set[str] = set()
    manifests = {}
    for split, n in (("train", n_train), ("eval", n_eval)):
        rows = []
        for i in range(n):
            speaker = speakers[i % len(speakers)]
            digits = _new_string(rng, digits_per_clip, used)
            pieces, sr = [], None
            for d in digits:
                pool = [
                    (idx, p)
                    for idx, p in recordings[speaker][d]
                    if (idx >= HELD_OUT_FROM) == (split == "eval")
                ]
                _, path = rng.choice(pool)
                audio, sr = soundfile.read(str(path), dtype="float32")
                pieces += [audio, np.zeros(int(GAP_S * sr), dtype=np.float32)]
            rel = f"{split}/{i:03d}_{speaker}.flac"
            (out / split).mkdir(parents=True, exist_ok=True)
            soundfile.write(str(out / rel), np.concatenate(pieces[:-1]), sr, subtype="PCM_16")
            rows.append({"audio": rel, "text": " ".join(str(d) for d in digits), "language": "en"})
        manifests[split] = out / f"{split}.jsonl"
        manifests[split].write_text("".join(json.dumps(r) + "\n" for r in rows))
    return DigitStrings(manifests["train"], manifests["eval"], n_train, n_eval)


def _recordings_by_speaker_digit(fsdd: Path) -> dict[str, dict[int, list[tuple[int, Path]]]]:
    out: dict[str, dict[int, list[tuple[int, Path]]]] = {}
    for line in (fsdd / "manifest.jsonl").read_text().splitlines():
        r = json.loads(line)
        index = int(Path(r["audio"]).stem.rsplit("_", 1)[1])
        out.setdefault(r["speaker"], {}).setdefault(int(r["digit"]), []).append(
            (index, fsdd / r["audio"])
        )
    return out


def _new_string(rng: random.Random, lengths: tuple[int, int], used: set[str]) -> list[int]:
    while True:
        digits = [rng.randrange(10) for _ in range(rng.randint(*lengths))]
        key = "".join(map(str, digits))
        if key not in used:  # no digit string appears twice, across both splits
            used.add(key)
            return digits
