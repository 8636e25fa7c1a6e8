"""onnxruntime runs an exported ONNX folder (`transcribe_onnx`): the encoder once per
batch, then the decoder with past key values, greedy, with the generation config's
suppress lists and timestamp rules applied as transformers applies them; the fine-tune's
language from its generation config when none is given, else detected from the
language-token logits. Audio over 30 s is read by Whisper's sequential algorithm (seek to the
last whole segment's end, window after window), greedy, without conditioning on the previous
window's text and without temperature fallback."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

import numpy as np

from fitwhisper.errors import ConfigError, DataError
from fitwhisper.export.onnx_format import (
    BATCH_SIZE,
    CONFIG_FILES,
    DECODER_FILE,
    DECODER_WITH_PAST_FILE,
    ENCODER_FILE,
    GRAPH_FILES,
)
from fitwhisper.whisper_facts import SAMPLE_RATE, WINDOW_SAMPLES, language_code

log = logging.getLogger(__name__)


def transcribe_onnx(
    dest: Path,
    audios: list[np.ndarray],
    *,
    language: str | None,
    task: str = "transcribe",
    timestamps: bool = False,
    max_new_tokens: int = 224,
) -> list[dict]:
    """Transcribe clips with an exported folder: onnxruntime, greedy.

    The folder's feature extractor makes the log-mel input (padded to 30 s), and the
    generation config's `suppress_tokens` (every step) and `begin_suppress_tokens` (first
    step) apply as in transformers' `generate`; with timestamps, its timestamp rules too.
    Clips over 30 s are decoded one by one, window after window, always with timestamps
    (they choose where the next window starts); `timestamps` then only shapes the result.

    Args:
        dest: a folder written by `write_onnx`.
        audios: (samples,) float32 arrays, 16 kHz mono, of any length.
        language: a code or name ("zh", "chinese"); None: the model's recorded language
            (generation_config.language), else detected per clip from the language-token
            logits; English-only models always use "en".
        task: "transcribe" or "translate" (multilingual models only).
        timestamps: predict timestamp tokens and return one segment per timestamp pair.
        max_new_tokens: at most this many tokens per clip (and the model's 448 in all).

    Returns:
        Per clip: {"text", "language", "segments": [{"start", "end", "text"}]}, times in
        seconds; without timestamps one segment spans the clip.

    Raises:
        ConfigError: an unknown or unsupported language or task.
        DataError: a clip that is not a 1-D array.
    """
    # 1. the sessions and processor (cached per folder), prompt settings checked up front
    runner = _runner(Path(dest))
    if timestamps and runner.no_timestamps is None:
        raise ConfigError(
            f"{dest}: generation_config.json has no no_timestamps_token_id, so no timestamps",
            hint="pass timestamps=False, or re-export from a folder whose generation config "
            "has Whisper's timestamp settings",
        )
    fixed_language = runner.language_id(language)
    task_id = runner.task_id(task)
    clips = [_check_clip(i, a) for i, a in enumerate(audios)]

    # 2. per batch of short clips: features, encoder, language, greedy decoding
    results: dict[int, dict] = {}
    short = [i for i, c in enumerate(clips) if c.size <= WINDOW_SAMPLES]
    for start in range(0, len(short), BATCH_SIZE):
        index = short[start : start + BATCH_SIZE]
        batch = [clips[i] for i in index]
        features = runner.features(batch)
        encoded = runner.encoder.run(None, {"input_features": features})[0]
        lang_ids = (
            [fixed_language] * len(batch)
            if fixed_language is not None or not runner.multilingual
            else runner.detect_language(encoded)
        )
        prompt = np.array(
            [runner.prompt(lang, task_id, timestamps) for lang in lang_ids], dtype=np.int64
        )
        tokens = runner.greedy(encoded, prompt, timestamps, max_new_tokens)
        for i, lang, toks in zip(index, lang_ids, tokens, strict=True):
            results[i] = runner.result(toks, lang, clips[i].size / SAMPLE_RATE, timestamps)

    # 3. long clips, one at a time: window after window
    for i in (i for i in range(len(clips)) if i not in results):
        results[i] = runner.long_clip(clips[i], fixed_language, task_id, max_new_tokens)
        if not timestamps:
            end = round(clips[i].size / SAMPLE_RATE, 3)
            results[i]["segments"] = [{"start": 0.0, "end": end, "text": results[i]["text"]}]
    return [results[i] for i in range(len(clips))]


def _check_clip(i: int, audio) -> np.ndarray:
    a = np.asarray(audio, dtype=np.float32)
    if a.ndim != 1:
        raise DataError(
            f"audio {i} has shape {a.shape}; expected (samples,)", hint="pass mono 16 kHz arrays"
        )
    return a


def _runner(dest: Path) -> _Runner:
    missing = [n for n in GRAPH_FILES + CONFIG_FILES if not (dest / n).is_file()]
    if missing:
        raise ConfigError(
            f"{dest} is not an ONNX Whisper folder: {', '.join(missing)} missing",
            hint="write one with fitwhisper.export.onnx_format.write_onnx",
        )
    stamp = tuple((n, (dest / n).stat().st_mtime_ns) for n in GRAPH_FILES)
    return _cached_runner(str(dest.resolve()), stamp)


@functools.lru_cache(maxsize=1)  # sessions of the last folder used; a large model's are GBs
def _cached_runner(dest: str, stamp: tuple) -> _Runner:
    return _Runner(Path(dest))


class _Runner:
    """onnxruntime sessions, processor and generation settings of one exported folder."""

    def __init__(self, dest: Path) -> None:
        import onnxruntime as ort
        from transformers import WhisperProcessor

        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only: not each initializer it folds away

        def session(name: str):
            return ort.InferenceSession(str(dest / name), opts, providers=["CPUExecutionProvider"])

        self.encoder = session(ENCODER_FILE)
        self.decoder = session(DECODER_FILE)
        self.decoder_with_past = session(DECODER_WITH_PAST_FILE)
        self.processor = WhisperProcessor.from_pretrained(dest)
        self.config = json.loads((dest / "config.json").read_text(encoding="utf-8"))
        gen = json.loads((dest / "generation_config.json").read_text(encoding="utf-8"))
        self.gen = gen
        self.lang_to_id: dict[str, int] = gen.get("lang_to_id") or {}
        self.lang_of = {v: language_code(k) for k, v in self.lang_to_id.items()}
        self.multilingual = bool(gen.get("is_multilingual", bool(self.lang_to_id)))
        self.eos = gen["eos_token_id"]
        self.sot = gen.get("decoder_start_token_id", self.config["decoder_start_token_id"])
        self.no_timestamps = gen.get("no_timestamps_token_id")
        self.ts_begin = self.no_timestamps + 1 if self.no_timestamps is not None else 1 << 30
        self.suppress = np.array(gen.get("suppress_tokens") or [], dtype=np.int64)
        self.begin_suppress = np.array(gen.get("begin_suppress_tokens") or [], dtype=np.int64)
        self.max_initial_ts = gen.get("max_initial_timestamp_index")
        fe = self.processor.feature_extractor
        self.time_precision = fe.chunk_length / self.config["max_source_positions"]  # 0.02 s
        self.present_names = [o.name for o in self.decoder.get_outputs()][1:]
        self.self_names = [o.name for o in self.decoder_with_past.get_outputs()][1:]

    # prompt ------------------------------------------------------------------------------

    def language_id(self, language: str | None) -> int | None:
        """The language token asked for or recorded; None: detect it (or English-only)."""
        if not self.multilingual:
            if language and language_code(language) != "en":
                raise ConfigError(
                    f"language {language!r} was asked for, but this model is English-only",
                    hint="pass language=None or 'en', or export a multilingual model",
                )
            return None
        wanted = language or self.gen.get("language")
        if not wanted:
            return None
        token = f"<|{language_code(wanted)}|>"
        if token not in self.lang_to_id:
            raise ConfigError(
                f"unknown language {wanted!r}",
                hint="use a code or name such as "
                + ", ".join(language_code(t) for t in list(self.lang_to_id)[:8])
                + " ...",
            )
        return self.lang_to_id[token]

    def task_id(self, task: str) -> int | None:
        task_to_id = self.gen.get("task_to_id") or {}
        if not self.multilingual:
            if task != "transcribe":
                raise ConfigError(
                    f"task {task!r} needs a multilingual model; this one is English-only",
                    hint="use task='transcribe'",
                )
            return None
        if task not in task_to_id:
            raise ConfigError(f"unknown task {task!r}", hint="use " + " or ".join(task_to_id))
        return task_to_id[task]

    def prompt(self, lang: int | None, task: int | None, timestamps: bool) -> list[int]:
        """transformers' init tokens: <|startoftranscript|> [lang task] [<|notimestamps|>]."""
        ids = [self.sot] + ([lang, task] if self.multilingual else [])
        if not timestamps and self.no_timestamps is not None:
            ids.append(self.no_timestamps)
        return ids

    def detect_language(self, encoded: np.ndarray) -> list[int]:
        """transformers' detect_language: argmax over language tokens after <|sot|>."""
        start = np.full((encoded.shape[0], 1), self.sot, dtype=np.int64)
        logits = self.decoder.run(
            ["logits"], {"input_ids": start, "encoder_hidden_states": encoded}
        )[0][:, -1]
        ids = np.array(list(self.lang_to_id.values()))
        return [int(ids[j]) for j in logits[:, ids].argmax(-1)]

    # decoding ----------------------------------------------------------------------------

    def features(self, clips: list[np.ndarray]) -> np.ndarray:
        fe = self.processor.feature_extractor
        out = fe(clips, sampling_rate=SAMPLE_RATE, return_tensors="np")
        return out["input_features"].astype(np.float32)  # (batch, n_mels, 3000)

    def greedy(
        self, encoded: np.ndarray, prompt: np.ndarray, timestamps: bool, max_new_tokens: int
    ) -> list[list[int]]:
        """Greedy decoding with the cache; per clip the new tokens, without the last eos."""
        batch, begin = prompt.shape
        limit = min(max_new_tokens, self.config["max_target_positions"] - begin)
        out = self.decoder.run(None, {"input_ids": prompt, "encoder_hidden_states": encoded})
        cache = dict(zip(self.present_names, out[1:], strict=True))
        logits = out[0][:, -1]
        new = np.zeros((batch, 0), dtype=np.int64)
        done = np.zeros(batch, dtype=bool)
        for step in range(limit):
            scores = self.process(logits.astype(np.float32), new, step, timestamps)
            token = np.where(done, self.eos, scores.argmax(-1))
            new = np.concatenate([new, token[:, None]], axis=1)
            done |= token == self.eos
            if done.all() or step + 1 == limit:
                break
            feed = {"input_ids": token[:, None]}
            feed.update((n.replace("present", "past_key_values"), t) for n, t in cache.items())
            out = self.decoder_with_past.run(None, feed)
            cache.update(zip(self.self_names, out[1:], strict=True))  # cross K/V stay
            logits = out[0][:, -1]
        return [[int(t) for t in row if t != self.eos] for row in new]

    def process(self, scores: np.ndarray, new: np.ndarray, step: int, timestamps: bool):
        """transformers' processors, in generate's order: begin-suppress, suppress,
        timestamp rules. `new`: the tokens generated so far (batch, step)."""
        if step == 0 and self.begin_suppress.size:
            scores[:, self.begin_suppress] = -np.inf
        if self.suppress.size:
            scores[:, self.suppress] = -np.inf
        if timestamps:
            for k in range(scores.shape[0]):
                self._timestamp_rules(scores[k], new[k].tolist())
        return scores

    def _timestamp_rules(self, scores: np.ndarray, seq: list[int]) -> None:
        """WhisperTimeStampLogitsProcessor for one row, in place: timestamps in pairs,
        never decreasing, the first within max_initial_timestamp_index, and a timestamp
        whenever all of them together outweigh the likeliest text token."""
        tb = self.ts_begin
        scores[self.no_timestamps] = -np.inf
        last_ts = len(seq) >= 1 and seq[-1] >= tb
        penultimate_ts = len(seq) < 2 or seq[-2] >= tb
        if last_ts:
            if penultimate_ts:
                scores[tb:] = -np.inf  # a pair just closed: text (or eos) next
            else:
                scores[: self.eos] = -np.inf  # after a lone timestamp: no text
        stamps = [t for t in seq if t >= tb]
        if stamps:
            floor = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
            scores[tb:floor] = -np.inf
        if not seq:
            scores[:tb] = -np.inf
            if self.max_initial_ts is not None:
                scores[tb + self.max_initial_ts + 1 :] = -np.inf
        logprobs = _log_softmax(scores)
        if _logsumexp(logprobs[tb:]) > logprobs[:tb].max():
            scores[:tb] = -np.inf

    # long audio --------------------------------------------------------------------------

    def long_clip(self, audio: np.ndarray, lang: int | None, task: int | None, limit: int):
        """openai-whisper's sequential algorithm, greedy: decode a 30 s window with
        timestamps; if it ends inside a segment, the next window starts at the last closed
        segment's end, else after the window. The language is detected on the first
        window when neither asked for nor recorded."""
        tb, precision = self.ts_begin, self.time_precision
        samples_per_step = round(precision * SAMPLE_RATE)  # 320: one timestamp step
        segments: list[dict] = []
        seek = 0
        while seek < audio.size:
            window = audio[seek : seek + WINDOW_SAMPLES]
            encoded = self.encoder.run(None, {"input_features": self.features([window])})[0]
            if lang is None and self.multilingual:
                (lang,) = self.detect_language(encoded)
            prompt = np.array([self.prompt(lang, task, True)], dtype=np.int64)
            (tokens,) = self.greedy(encoded, prompt, True, limit)
            offset = seek / SAMPLE_RATE
            is_ts = [t >= tb for t in tokens]
            ends_closed = is_ts[-2:] == [False, True]  # text then a lone timestamp
            cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
            if cuts:
                cuts += [len(tokens)] if ends_closed else []
                for begin, cut in zip([0, *cuts], cuts, strict=False):
                    self._add(segments, tokens[begin:cut], offset)
                step = (tokens[cuts[-1] - 1] - tb) * samples_per_step
                seek += window.size if ends_closed or step <= 0 else step
            else:
                stamps = [t for t in tokens if t >= tb]
                last = (stamps[-1] - tb) * precision if stamps and stamps[-1] > tb else None
                end = offset + (last if last is not None else window.size / SAMPLE_RATE)
                if text := self._decode([t for t in tokens if t < tb]):
                    segments.append({"start": round(offset, 2), "end": round(end, 2), "text": text})
                seek += window.size
        language = self.lang_of.get(lang, "en") if lang is not None else "en"
        text = " ".join(s["text"] for s in segments)
        return {"text": text, "language": language, "segments": segments}

    def _add(self, segments: list[dict], part: list[int], offset: float) -> None:
        """One <|t0|> text <|t1|> slice as a segment, in the file's time."""
        tb = self.ts_begin
        stamps = [t for t in part if t >= tb]
        if not stamps or not (text := self._decode([t for t in part if t < tb])):
            return
        start = offset + (stamps[0] - tb) * self.time_precision
        end = offset + (stamps[-1] - tb) * self.time_precision
        segments.append({"start": round(start, 2), "end": round(end, 2), "text": text})

    # output ------------------------------------------------------------------------------

    def result(self, tokens: list[int], lang: int | None, duration_s: float, timestamps: bool):
        language = self.lang_of.get(lang, "en") if lang is not None else "en"
        text_tokens = [t for t in tokens if t < self.ts_begin]
        text = self._decode(text_tokens)
        if not timestamps:
            segments = [{"start": 0.0, "end": round(duration_s, 3), "text": text}]
        else:
            segments = self._segments(tokens, duration_s)
        return {"text": text, "language": language, "segments": segments}

    def _segments(self, tokens: list[int], duration_s: float) -> list[dict]:
        """One segment per <|t0|> text <|t1|> pair; text left open ends at the clip's end."""
        segments, start, pending = [], None, []
        for t in tokens:
            if t < self.ts_begin:
                pending.append(t)
                continue
            at = round((t - self.ts_begin) * self.time_precision, 2)
            if start is None:
                start = at
            else:
                if text := self._decode(pending):
                    segments.append({"start": start, "end": at, "text": text})
                start, pending = None, []
        if text := self._decode(pending):
            begin = start if start is not None else (segments[-1]["end"] if segments else 0.0)
            segments.append({"start": begin, "end": round(max(begin, duration_s), 2), "text": text})
        return segments

    def _decode(self, tokens: list[int]) -> str:
        return self.processor.tokenizer.decode(tokens, skip_special_tokens=True).strip()


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def _logsumexp(x: np.ndarray) -> float:
    m = x.max()
    return float(m + np.log(np.exp(x - m).sum())) if np.isfinite(m) else float(m)
