"""The CTranslate2 engine: faster-whisper on a CTranslate2 model folder.

Files longer than 30 s run through faster-whisper's `BatchedInferencePipeline`
(voice-activity chunks decoded in batches; `--mode auto` and `batched`; speech after a
chunk's early end-of-text decoded again, `ct2_tails`) or, with
`--mode sequential`, its `WhisperModel.transcribe` (Whisper's sequential long-form
algorithm) on the file's speech only (`speech.find_speech`: faster-whisper's `vad_filter`,
done here), its times mapped back onto the file by `Speech.span`.
Clips of up to 30 s are batched *across files*: those with speech are laid end to end and
handed to `BatchedInferencePipeline` with one `clip_timestamps` entry per file, so each is
decoded whole, in batches of `--batch_size`, by faster-whisper's own code (one call per
batch, so a file is out as soon as its batch is); the segments are mapped back to their
files. A file without speech is not decoded. For a model whose
training chose the short window, those batches are encoded on their longest clip and 1 s
(`ct2_short_window`), not on 30 s. On every path a clip or chunk under 30 s reaches the
encoder padded with silence, as in training, not with faster-whisper's zero-filled log-mel
(`ct2_padding`); long files in sequential mode keep faster-whisper's own last window.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from fitwhisper.data.audio import padded_like_training
from fitwhisper.models.ct2_export import export_info  # the export's source, language, task
from fitwhisper.transcribe.ct2_padding import padded_model
from fitwhisper.transcribe.ct2_tails import with_tails_decoded
from fitwhisper.transcribe.formats import Segment, Transcript, Word
from fitwhisper.transcribe.options import TranscribeOptions
from fitwhisper.transcribe.prompt import prompt_tokens
from fitwhisper.transcribe.speech import Speech, find_speech, speech_method
from fitwhisper.whisper_facts import SAMPLE_RATE, WINDOW_SAMPLES, WINDOW_SECONDS, language_code

log = logging.getLogger(__name__)

TEXT_COMPRESSION_RATIO_THRESHOLD = 2.4  # openai-whisper's, on the gzip ratio of the text
SAMPLING_SEED = 0  # for temperature fallback: the same file gives the same transcript


class CT2Engine:
    """Loads the CTranslate2 model once; `transcribe` takes a batch of decoded files."""

    name = "ct2"

    def __init__(
        self, folder: str | Path, opts: TranscribeOptions, device: str, window: str = "full"
    ) -> None:
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        kind, _, index = device.partition(":")
        compute_type = "default" if opts.compute_type == "auto" else opts.compute_type
        self.model = WhisperModel(
            str(folder),
            device=kind,
            device_index=int(index or 0),
            compute_type=compute_type,
            cpu_threads=opts.threads,
        )
        # Chunks padded with silence, as in training, not zero-filled (`ct2_padding`).
        self.pipeline = BatchedInferencePipeline(padded_model(self.model))
        self.opts = opts
        self.speech_method = speech_method() if opts.vad else None
        info = export_info(Path(folder))
        multilingual = self.model.model.is_multilingual
        wanted = opts.language or info.get("language")
        self.language = language_code(wanted) if multilingual and wanted else None
        if not multilingual:
            self.language = "en"
        # Clips up to 30 s on their own length (plus 1 s), for a model that chose it: on
        # the across-file batches only, which need one known language and not sequential.
        self.window = window
        if window == "short" and (opts.mode == "sequential" or not self.language):
            log.warning(
                "the short encoder window needs --language and a --mode other than "
                "sequential on the ct2 engine; clips get 30 s windows"
            )
            self.window = "full"
        if self.window == "short":
            from fitwhisper.transcribe.ct2_short_window import ShortWindowPipeline

            self.short_pipeline = ShortWindowPipeline(padded_model(self.model))

    def transcribe(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> list[Transcript]:
        """Transcribe a batch; `progress(seconds)` is called as audio is done."""
        results = dict(self.stream(names, audios, progress))
        return [results[i] for i in range(len(audios))]

    def stream(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> Iterator[tuple[int, Transcript]]:
        """`(index, transcript)` for each file as soon as it is finished, in the order they
        finish: the clips batched across files one batch of `--batch_size` at a time, then
        the long files one by one."""
        progress = progress or (lambda _s: None)
        finished: set[int] = set()
        speech: dict[int, Speech] = {}
        for i, audio in enumerate(audios):
            if self.speech_method and not self._pipeline_cuts(len(audio)):
                speech[i] = find_speech(audio, self.speech_method)
                if not speech[i].regions:  # nothing to decode: no text, not even "you"
                    t = self._nothing(names[i], len(audio) / SAMPLE_RATE)
                    progress(t.duration_s)
                    finished.add(i)
                    yield i, t
        short = [i for i, a in enumerate(audios) if i not in finished and len(a) <= WINDOW_SAMPLES]
        # Across-file batching needs one prompt language for the batch; the short window
        # is only on that path, so it takes a lone clip too.
        enough = len(short) > (0 if self.window == "short" else 1)
        if self.opts.mode != "sequential" and self.language and enough:
            for k, t in self._short_batched(
                [names[i] for i in short], [audios[i] for i in short], progress
            ):
                finished.add(short[k])
                yield short[k], t
        for i, (name, audio) in enumerate(zip(names, audios, strict=True)):
            if i not in finished:
                yield i, self._one_file(name, audio, progress, speech.get(i))

    # --- helpers --------------------------------------------------------------------------

    def _common(self) -> dict:
        o = self.opts
        return dict(
            language=self.language,
            task=o.task,
            beam_size=o.beam_size,
            best_of=o.beam_size,
            initial_prompt=o.initial_prompt,
            word_timestamps=o.timestamps == "word",
            compression_ratio_threshold=o.compression_ratio_threshold
            or TEXT_COMPRESSION_RATIO_THRESHOLD,
            log_prob_threshold=o.logprob_threshold,
            no_speech_threshold=o.no_speech_threshold,
            max_new_tokens=o.max_new_tokens,
        )

    def _prompt(self, *, timestamps: bool) -> list[int] | None:
        """`--initial_prompt` as token ids for the sequential decoding (transcribe/prompt.py;
        the batched pipeline takes the text alone and encodes it itself)."""
        if not self.opts.initial_prompt:
            return None
        tok = self.model.hf_tokenizer
        first = tok.token_to_id("<|0.00|>") if timestamps else None
        return prompt_tokens(
            lambda t: tok.encode(t, add_special_tokens=False).ids, first, self.opts.initial_prompt
        )

    def _pipeline_cuts(self, samples: int) -> bool:
        """Whether a file this long goes to the batched pipeline, which finds its speech
        itself (Silero VAD, cutting at pauses); `--mode auto` is batched only with VAD."""
        mode = self.opts.mode
        batched = mode == "batched" or (mode == "auto" and self.opts.vad)
        return batched and samples > WINDOW_SAMPLES

    def _nothing(self, name: str, duration: float) -> Transcript:
        return Transcript(name, (), self.language, duration, engine=self.name)

    def _one_file(
        self, name: str, audio: np.ndarray, progress, speech: Speech | None
    ) -> Transcript:
        o = self.opts
        duration = heard = len(audio) / SAMPLE_RATE
        # auto: batched, the faster at equal CER on CPU (bench/RESULTS-transcribe.md).
        if self._pipeline_cuts(len(audio)):
            batched = functools.partial(
                self.pipeline.transcribe,
                audio,
                batch_size=o.batch_size,
                without_timestamps=o.timestamps == "none",
                temperature=0.0,
                **self._common(),
            )
            segments, info = batched(vad_filter=True)
            if o.timestamps != "none":  # speech after a chunk's early end-of-text (ct2_tails)
                segments = with_tails_decoded(
                    audio,
                    segments,
                    lambda clips: list(batched(vad_filter=False, clip_timestamps=clips)[0]),
                )
        else:
            # Temperature fallback samples: a fixed seed per file makes a run repeatable (an
            # unseeded sample once wrote a loop over 30 s of noise that other runs did not).
            import ctranslate2

            ctranslate2.set_random_seed(SAMPLING_SEED)
            decoded = audio if speech is None else speech.audio(audio)
            # Up to 30 s: padded with silence, as in training (`ct2_padding`); a segment
            # that starts in that silence has nothing under it and is dropped below.
            heard = len(decoded) / SAMPLE_RATE
            plain = o.timestamps == "none" and duration <= WINDOW_SECONDS
            segments, info = self.model.transcribe(
                padded_like_training(decoded),
                temperature=list(o.temperatures),
                condition_on_previous_text=o.condition_on_previous_text,
                without_timestamps=plain,
                vad_filter=False,
                **(self._common() | {"initial_prompt": self._prompt(timestamps=not plain)}),
            )
        # Decoded from the speech alone: times go back onto the file's.
        to_file = speech.span if speech is not None else _same
        out, done = [], 0.0
        for s in segments:  # a generator: decoding happens as it is consumed
            if s.start >= heard:
                continue
            out.append(_segment(len(out), s, duration, to_file))
            if out[-1].end > done:
                progress(out[-1].end - done)
                done = out[-1].end
        progress(duration - done)
        return Transcript(name, tuple(out), info.language, duration, engine=self.name)

    def _short_batched(self, names, audios, progress) -> Iterator[tuple[int, Transcript]]:
        """`(index, transcript)` per clip, a batch of `--batch_size` clips per pipeline call,
        so each batch's files are out as soon as its one batched forward pass is (the
        batching, and its speed, are the pipeline's own)."""
        order = list(range(len(audios)))
        pipeline = self.pipeline
        if self.window == "short":  # clips of like length share a batch and its window
            order.sort(key=lambda i: len(audios[i]))
            pipeline = self.short_pipeline
        n = max(1, self.opts.batch_size)
        for b in range(0, len(order), n):
            batch = order[b : b + n]
            done = self._laid_end_to_end(
                [names[i] for i in batch], [audios[i] for i in batch], progress, pipeline
            )
            yield from zip(batch, done, strict=True)

    def _laid_end_to_end(self, names, audios, progress, pipeline) -> list[Transcript]:
        offsets = np.cumsum([0] + [len(a) for a in audios[:-1]]) / SAMPLE_RATE
        durations = [len(a) / SAMPLE_RATE for a in audios]
        clips = [
            {"start": float(t), "end": float(t + d)}
            for t, d in zip(offsets, durations, strict=True)
        ]
        segments, _info = pipeline.transcribe(
            np.concatenate(audios),
            clip_timestamps=clips,
            vad_filter=False,
            batch_size=self.opts.batch_size,
            without_timestamps=self.opts.timestamps == "none",
            temperature=0.0,
            **self._common(),
        )
        per_file: list[list[Segment]] = [[] for _ in audios]
        # Each segment carries `seek`, its clip's offset as faster-whisper computes it.
        fps = self.model.frames_per_second
        clip_of_seek = {int(c["start"] * fps): i for i, c in enumerate(clips)}
        for s in segments:
            i = clip_of_seek[s.seek]
            shift = functools.partial(_shifted, clips[i]["start"])
            per_file[i].append(_segment(len(per_file[i]), s, durations[i], shift))
        results = []
        for name, segs, d in zip(names, per_file, durations, strict=True):
            progress(d)
            results.append(Transcript(name, tuple(segs), self.language, d, engine=self.name))
        return results


def _segment(i: int, s, duration: float, to_file: Callable) -> Segment:
    """A faster-whisper segment as ours; `to_file(start, end)` maps a decoded stretch onto
    the file's times (a clip's offset, or the cut-out pauses)."""

    def span(a: float, b: float) -> tuple[float, float]:
        a, b = to_file(a, b)
        a = min(max(a, 0.0), duration)
        return round(a, 3), round(min(max(b, a), duration), 3)

    words = None
    if s.words is not None:
        words = tuple(
            Word(*span(w.start, w.end), word=w.word, probability=round(w.probability, 4))
            for w in s.words
        )
    # With words, the segment spans them, as faster-whisper's own times do.
    start, end = (words[0].start, words[-1].end) if words else span(s.start, s.end)
    return Segment(
        id=i,
        start=start,
        end=end,
        text=s.text,
        avg_logprob=round(s.avg_logprob, 4),
        no_speech_prob=round(s.no_speech_prob, 4),
        compression_ratio=round(s.compression_ratio, 4),
        words=words,
    )


def _same(start: float, end: float) -> tuple[float, float]:
    return start, end


def _shifted(offset: float, start: float, end: float) -> tuple[float, float]:
    return start - offset, end - offset
