"""The transformers engine: `WhisperForConditionalGeneration.generate`'s own long-form
algorithm, batched over files.

Any model the resolver accepts runs here, a LoRA adapter folder included: it loads as its
base plus a PeftModel, unmerged. Files longer than 30 s go to `generate` whole, with an
attention mask, so transformers runs Whisper's sequential algorithm on them (timestamps,
previous-text conditioning, temperature fallback on compression ratio and log-probability,
no-speech skipping); shorter files take the same path in one window. With `--vad` (default)
a file is first cut to its speech (`speech.find_speech`, as faster-whisper's `vad_filter`
does): generate sees the speech laid end to end, the segments are mapped back onto the
file's times, and a file without speech is not decoded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fitwhisper.data.timestamp_tokens import has_timestamp_tokens
from fitwhisper.errors import ConfigError
from fitwhisper.transcribe.formats import Segment, Transcript
from fitwhisper.transcribe.options import TranscribeOptions
from fitwhisper.transcribe.prompt import prompt_tokens
from fitwhisper.transcribe.speech import Speech, find_speech, speech_method
from fitwhisper.whisper_facts import (
    FRAMES_PER_SECOND,
    HOP_LENGTH,
    SAMPLE_RATE,
    WINDOW_FRAMES,
    WINDOW_SAMPLES,
    decoding,
    language_code,
)

if TYPE_CHECKING:
    from fitwhisper.models.resolve import ResolvedModel

log = logging.getLogger(__name__)

# transformers measures repetition on token ids (zlib ratio of their bytes), not on text as
# openai-whisper does; its documentation recommends 1.35 where openai-whisper uses 2.4.
HF_COMPRESSION_RATIO_THRESHOLD = 1.35


def _counting(progress: Callable[[float], None] | None, spent: list[float]):
    """`progress`, also adding up what it is told in `spent[0]`, so a batch decoded again
    can take its part back."""
    if progress is None:
        return None

    def counted(seconds: float) -> None:
        spent[0] += seconds
        progress(seconds)

    return counted


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's CPU threads set to `n` (0: left as they are) for the block, then given back."""
    import torch

    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n:
            torch.set_num_threads(before)


class TransformersEngine:
    """Loads the model once; `transcribe` takes a batch of decoded files."""

    name = "transformers"

    def __init__(
        self, model: str | Path | ResolvedModel, opts: TranscribeOptions, device: str
    ) -> None:
        import torch

        from fitwhisper.models.generation import language_for
        from fitwhisper.models.resolve import as_resolved, load_model, load_processor
        from fitwhisper.models.short_window import allow_short_input, window_for

        if opts.timestamps == "word":
            raise ConfigError(
                "--timestamps word needs the ct2 engine",
                hint="pass --engine ct2 (fitwhisper exports the model to CTranslate2 once, "
                "cached), or --timestamps segment",
            )
        # --threads holds while this engine transcribes, not for the caller's whole process.
        self.threads = opts.threads if device == "cpu" else 0
        self.opts = opts
        self.device = device
        self.batch = max(1, opts.batch_size)  # halved after an out-of-memory error
        self.speech_method = speech_method() if opts.vad else None
        resolved = as_resolved(model)  # once, for the processor and the weights
        self.processor = load_processor(resolved)
        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        self.model = load_model(resolved, dtype=dtype).to(device).eval()
        # Clips up to 30 s on their own length, for a model trained on trimmed input.
        self.window = window_for(self.model.config, opts.encoder_window)  # full or short
        if self.window == "short":
            allow_short_input(self.model)
        gen = self.model.generation_config
        self.multilingual = bool(getattr(gen, "is_multilingual", False))
        # A fine-tune's generation config carries its language: that is the default.
        # (The offline models' generation configs have no `language` attribute at all.)
        self.language = language_for(self.model, opts.language) or (
            getattr(gen, "language", None) if self.multilingual else None
        )
        lang_to_id = getattr(gen, "lang_to_id", None) or {}
        self._lang_of_id = {v: language_code(k) for k, v in lang_to_id.items()}
        # (timestamped, plain) prompts: which one a batch takes depends on its decoding.
        self.prompt_ids = {}
        if opts.initial_prompt:
            tok = self.processor.tokenizer
            start = tok.convert_tokens_to_ids("<|startofprev|>")
            first = tok.convert_tokens_to_ids("<|0.00|>") if has_timestamp_tokens(tok) else None
            for timed in (True, False):
                ids = prompt_tokens(
                    lambda t: tok(t, add_special_tokens=False).input_ids,
                    first if timed else None,
                    opts.initial_prompt,
                )
                self.prompt_ids[timed] = torch.tensor([start, *ids], device=device)

    def transcribe(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> list[Transcript]:
        """Transcribe a batch; `progress(seconds)` is called as audio is done. With `--vad`,
        each file's speech alone is decoded (a file without speech not at all) and the
        segments' times are mapped back onto the file."""
        method = self.speech_method
        with torch_threads(self.threads):
            speech = [find_speech(a, method) if method else None for a in audios]
            todo = [i for i, sp in enumerate(speech) if sp is None or sp.regions]
            inputs = [audios[i] if speech[i] is None else speech[i].audio(audios[i]) for i in todo]
            decoded = dict(zip(todo, self._generate(inputs, progress) if todo else [], strict=True))
        if progress:  # the audio skipped as silence is done too
            skipped = sum(len(a) for a in audios) - sum(len(a) for a in inputs)
            progress(skipped / SAMPLE_RATE)
        results = []
        for i, (name, audio) in enumerate(zip(names, audios, strict=True)):
            duration = len(audio) / SAMPLE_RATE
            segments, lang = decoded.get(i, ((), self._default_language()))
            if speech[i] is not None:
                segments = tuple(_to_file_times(s, speech[i], duration) for s in segments)
            results.append(Transcript(name, segments, lang, duration, engine=self.name))
        return results

    def stream(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> Iterator[tuple[int, Transcript]]:
        """`(index, transcript)` per file, each as soon as it exists: `generate` decodes the
        files in batches of `--batch_size`, and a batch's files are out when its call is.

        A batch that runs out of GPU memory is decoded again in halves, and the smaller
        batch holds for the rest of the run, as `evaluate`'s generation backs off
        (memory/backoff.py): beam search keeps every beam's copy of the encoder's keys
        and values, 5 times greedy's."""
        b = 0
        while b < len(audios):
            n = self.batch
            done, spent = None, [0.0]
            try:
                done = self.transcribe(
                    names[b : b + n], audios[b : b + n], _counting(progress, spent)
                )
            except Exception as e:
                from fitwhisper.memory.backoff import is_oom

                if not is_oom(e):
                    raise
            if done is None:  # out of the except block, so its tensors can be freed
                self._back_off(min(n, len(audios) - b))
                if progress and spent[0]:
                    progress(-spent[0])  # the batch is decoded again
                continue
            yield from enumerate(done, start=b)
            b += n

    def _back_off(self, failed: int) -> None:
        from fitwhisper.errors import OutOfMemoryError
        from fitwhisper.memory.backoff import release_memory

        release_memory()
        if failed == 1:
            beams = self.opts.beam_size
            ways = ["use a smaller model or --engine ct2 (int8/float16)", "--device cpu"]
            if beams > 1:
                ways.insert(0, "pass --beam_size 1 (greedy keeps one sequence per file)")
            raise OutOfMemoryError(
                f"out of memory transcribing one file at a time on {self.device} "
                f"({decoding(beams)})",
                hint=", ".join(ways[:-1]) + " or " + ways[-1],
            )
        self.batch = failed // 2
        log.warning(
            "out of memory transcribing %d files at once: %d at a time from here",
            failed,
            self.batch,
        )

    def _generate(self, audios: Sequence[np.ndarray], progress) -> list[tuple]:
        """`generate` over the batch: per audio, (segments in its own times, language)."""
        import torch

        from fitwhisper.models.short_window import generate_short

        opts = self.opts
        feats, mask = self._features(audios)
        langs = self._languages(feats) if self.multilingual else None
        done = [0.0]

        def monitor(p: torch.Tensor) -> None:  # p: (batch, 2) = (seek, max_frames) in frames
            now = float(torch.minimum(p[:, 0], p[:, 1]).sum()) / FRAMES_PER_SECOND
            if progress and now > done[0]:
                progress(now - done[0])
                done[0] = now

        ratio = opts.compression_ratio_threshold or HF_COMPRESSION_RATIO_THRESHOLD
        # Without timestamps a clip of up to 30 s is one generate call (no seeking).
        plain = opts.timestamps == "none" and feats.shape[-1] <= WINDOW_FRAMES
        kwargs = dict(
            attention_mask=mask,
            return_timestamps=not plain,
            return_segments=not plain,
            num_beams=opts.beam_size,
            condition_on_prev_tokens=opts.condition_on_previous_text,
            temperature=opts.temperatures if len(opts.temperatures) > 1 else 0.0,
            compression_ratio_threshold=ratio,
            logprob_threshold=opts.logprob_threshold,
            no_speech_threshold=opts.no_speech_threshold,
            monitor_progress=monitor,
        )
        if self.multilingual:
            kwargs.update(language=langs, task=opts.task)
        if self.prompt_ids:
            kwargs["prompt_ids"] = self.prompt_ids[not plain]
        if opts.max_new_tokens:
            kwargs["max_new_tokens"] = opts.max_new_tokens
        with torch.inference_mode():
            out = generate_short(self.model, feats.to(self.device, self.model.dtype), **kwargs)
        total = sum(len(a) for a in audios) / SAMPLE_RATE
        if progress and total > done[0]:
            progress(total - done[0])
        results = []
        for i, audio in enumerate(audios):
            duration = len(audio) / SAMPLE_RATE
            if plain:
                text = self.processor.tokenizer.decode(out[i], skip_special_tokens=True)
                segments = (Segment(0, 0.0, round(duration, 3), text),)
            else:
                segments = self._segments(out["segments"][i], duration)
            results.append((segments, langs[i] if langs else self._default_language()))
        return results

    def _default_language(self) -> str | None:
        """The language of a file not detected: the one asked for, English for an English
        model, else unknown."""
        if not self.multilingual:
            return "en"
        return language_code(self.language) if self.language else None

    # --- helpers --------------------------------------------------------------------------

    def _features(self, audios: Sequence[np.ndarray]):
        fe = self.processor.feature_extractor
        if max(len(a) for a in audios) > WINDOW_SAMPLES:
            # Whole files, padded to the longest; the mask tells generate where each ends.
            inputs = fe(
                list(audios),
                sampling_rate=SAMPLE_RATE,
                return_tensors="pt",
                truncation=False,
                padding="longest",
                return_attention_mask=True,
            )
        else:
            inputs = fe(
                list(audios),
                sampling_rate=SAMPLE_RATE,
                return_tensors="pt",
                return_attention_mask=True,
            )
            if self.window == "short":  # the batch's longest clip and a margin, not 30 s
                from fitwhisper.models.short_window import inference_frames

                keep = inference_frames(math.ceil(max(len(a) for a in audios) / HOP_LENGTH))
                return inputs.input_features[..., :keep], None
        return inputs.input_features, inputs.attention_mask.to(self.device)

    def _languages(self, feats) -> list[str]:
        import torch

        if self.language:
            return [language_code(self.language)] * feats.shape[0]
        with torch.inference_mode():
            ids = self.model.detect_language(
                input_features=feats[..., :WINDOW_FRAMES].to(self.device, self.model.dtype)
            )
        return [self._lang_of_id.get(int(i), "en") for i in ids]

    def _segments(self, raw: list[dict], duration: float) -> tuple[Segment, ...]:
        tok = self.processor.tokenizer
        out = []
        logprob_of: dict[int, float | None] = {}
        for seg in raw:
            ids = [int(t) for t in seg["tokens"]]
            text = tok.decode(ids, skip_special_tokens=True)
            result = seg.get("result")
            key = id(result)
            if key not in logprob_of:
                logprob_of[key] = self._avg_logprob(result)
            start = min(float(seg["start"]), duration)
            end = min(max(float(seg["end"]), start), duration)
            out.append(
                Segment(
                    id=len(out),
                    start=round(start, 3),
                    end=round(end, 3),
                    text=text,
                    avg_logprob=logprob_of[key],
                )
            )
        return tuple(out)

    def _avg_logprob(self, result) -> float | None:
        """Mean log-probability of the window's tokens (eos included, as openai-whisper),
        from the scores generate kept for its log-probability threshold."""
        import torch

        if not isinstance(result, dict) or result.get("scores") is None:
            return None
        scores = torch.stack(list(result["scores"])).float()  # (steps, vocab)
        tokens = result["sequences"][-scores.shape[0] :].to(scores.device)
        # In a batch, a window that ended early is padded with eos after its own eos.
        eos = (tokens == self.model.generation_config.eos_token_id).nonzero()
        n = int(eos[0]) + 1 if len(eos) else len(tokens)
        logprobs = torch.log_softmax(scores[:n], dim=-1).gather(-1, tokens[:n].unsqueeze(-1))
        return round(float(logprobs.mean()), 4)


def _to_file_times(s: Segment, speech: Speech, duration: float) -> Segment:
    """A segment decoded from the speech-only audio, with its times in the file."""
    start, end = speech.span(s.start, s.end)
    start = min(start, duration)
    end = min(max(end, start), duration)
    return dataclasses.replace(s, start=round(start, 3), end=round(end, 3))
