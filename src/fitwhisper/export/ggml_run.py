"""whisper.cpp runs an exported ggml file (`transcribe_ggml`), through pywhispercpp:
greedy, without temperature fallback, as transformers' greedy `generate` decodes; the
language the export recorded (its sidecar) when none is given, since whisper.cpp's own
default is English whatever the model."""

from __future__ import annotations

import contextlib
import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fitwhisper.errors import ConfigError, ModelLoadError
from fitwhisper.export.ggml import (
    GGML_MAGIC,
    HPARAM_ORDER,
    MODEL_FILE,
    SIDECAR_FILE,
)
from fitwhisper.whisper_facts import SAMPLE_RATE, language_code

log = logging.getLogger(__name__)


def read_header(path: Path) -> dict[str, int]:
    """The hparams of a whisper.cpp ggml file (raises ConfigError if it is not one)."""
    with open(path, "rb") as f:
        head = f.read(48)
    if len(head) < 48 or struct.unpack("<i", head[:4])[0] != GGML_MAGIC:
        raise ConfigError(f"{path} is not a whisper.cpp ggml model", hint="run write_ggml first")
    values = struct.unpack("<11i", head[4:])
    return {**dict(zip(HPARAM_ORDER, values[:10], strict=True)), "ftype": values[10]}


def transcribe_ggml(
    dest: Path,
    audios: list[np.ndarray],
    *,
    language: str | None,
    task: str = "transcribe",
    timestamps: bool = False,
    threads: int = 2,
) -> list[dict]:
    """Transcribe 16 kHz float32 clips with whisper.cpp (pywhispercpp), greedy.

    Args:
        dest: the folder `write_ggml` wrote (or a ggml `.bin` file).
        language: a code or name ("zh", "chinese", "auto"); None: the fine-tune's language
            from the sidecar, else whisper.cpp's auto-detection. English-only models: "en".
        task: "transcribe" or "translate" (multilingual models only).
        timestamps: decode with timestamp tokens (several segments per 30 s window);
            without, one segment per window.

    Returns:
        One dict per clip: {"text", "language", "segments": [{"start", "end", "text"}]},
        times in seconds.
    """
    path = Path(dest)
    path = path / MODEL_FILE if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"no ggml model at {path}", hint="run write_ggml into that folder")
    sidecar_path = path.parent / SIDECAR_FILE
    sidecar = json.loads(sidecar_path.read_text(encoding="utf-8")) if sidecar_path.is_file() else {}
    header = read_header(path)
    multilingual = header["n_vocab"] >= 51865  # as whisper.cpp decides
    if task not in ("transcribe", "translate"):
        raise ConfigError(f"unknown task {task!r}", hint="use transcribe or translate")
    lang = language_code(language or "") or sidecar.get("language") or "auto"
    if not multilingual:
        if lang not in ("en", "auto") or task == "translate":
            raise ConfigError(
                f"this model is English-only; language {language!r}, task {task!r} are not",
                hint="use a multilingual model",
            )
        lang = "en"
    try:
        from pywhispercpp.model import Model
    except ImportError as e:
        raise ConfigError(
            "transcribing a ggml model needs pywhispercpp", hint="pip install pywhispercpp"
        ) from e
    import _pywhispercpp as pw

    known = {pw.whisper_lang_str(i) for i in range(pw.whisper_lang_max_id() + 1)}
    if lang != "auto" and lang not in known:
        raise ConfigError(f"whisper.cpp knows no language {language!r}", hint="use e.g. en, zh")

    with _whispercpp_logs() as errors:
        model = Model(
            str(path),
            n_threads=threads,
            translate=task == "translate",
            no_timestamps=not timestamps,
            # greedy and no temperature fallback, as transformers' greedy generate
            greedy={"best_of": 1},
            temperature=0.0,
            temperature_inc=0.0,
            suppress_nst=bool(sidecar.get("suppress_non_speech", True)),
            no_context=True,
            print_progress=False,
            print_realtime=False,
            print_timestamps=False,
        )
        try:
            if errors:  # whisper.cpp returns a null context, pywhispercpp does not check
                raise ModelLoadError(
                    f"whisper.cpp cannot load {path}: " + "; ".join(e.strip() for e in errors),
                    hint="re-export it with write_ggml",
                )
            return [_transcribe_one(model, pw, audio, lang, timestamps) for audio in audios]
        finally:
            del model  # frees the context while our log callback is still installed


def _transcribe_one(model, pw, audio: np.ndarray, lang: str, timestamps: bool) -> dict:
    audio = np.ascontiguousarray(np.asarray(audio, dtype=np.float32).reshape(-1))
    if audio.size == 0:
        return {"text": "", "language": None if lang == "auto" else lang, "segments": []}
    duration = audio.size / SAMPLE_RATE
    if audio.size < SAMPLE_RATE:  # whisper.cpp skips input under 1 s; pad it with silence
        audio = np.pad(audio, (0, SAMPLE_RATE - audio.size))
    # whisper.cpp's own default language is "en": always name it (or "auto"). Passed here,
    # not at load, where "auto" would make whisper_lang_id log an error line.
    model.transcribe(audio, language=lang)
    ctx = model._ctx  # pywhispercpp strips segment text and hides the detected language
    segments, raw, previous_end = [], b"", 0.0
    for i in range(pw.whisper_full_n_segments(ctx)):
        text = pw.whisper_full_get_segment_text(ctx, i)
        raw += text
        end = min(pw.whisper_full_get_segment_t1(ctx, i) / 100, duration)  # 10 ms units
        # Without timestamp tokens whisper.cpp's t0 is junk (from a suppressed timestamp,
        # e.g. -1007 s); the segment is then its 30 s window, which starts where the last
        # one ended.
        start = pw.whisper_full_get_segment_t0(ctx, i) / 100 if timestamps else previous_end
        start = min(max(start, 0.0), end)
        text = text.decode("utf-8", errors="replace").strip()
        segments.append({"start": start, "end": end, "text": text})
        previous_end = end
    detected = pw.whisper_lang_str(pw.whisper_full_lang_id(ctx)) if lang == "auto" else lang
    # joined as bytes: a character split across segments decodes whole
    text = raw.decode("utf-8", errors="replace").strip()
    return {"text": text, "language": detected, "segments": segments}


@contextlib.contextmanager
def _whispercpp_logs() -> Iterator[list[str]]:
    """Route whisper.cpp's and ggml's C-level log lines to this module's logger (debug)
    instead of stderr; yields the error lines. The default logger is restored on exit:
    a Python callback left installed crashes the interpreter at shutdown."""
    import _pywhispercpp as pw

    errors: list[str] = []

    def callback(level: int, text: str) -> None:
        if level == 4:  # GGML_LOG_LEVEL_ERROR
            errors.append(text)
        log.debug("whisper.cpp: %s", text.rstrip())

    pw.whisper_log_set(callback)
    try:
        yield errors
    finally:
        pw.whisper_log_set(None)
