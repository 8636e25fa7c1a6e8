"""faster-whisper fed the log-mel frames a fitwhisper model was trained on.

faster-whisper computes a chunk's log-mel on the chunk alone and fills the rest of the 30 s
window with zeros (`faster_whisper.audio.pad_or_trim`). transformers' feature extractor,
which every fitwhisper training and evaluation uses, pads the audio with silence first, so
the frames after the speech sit at the clip's floor (its loudest frame minus 2, after
Whisper's normalisation), not at 0. A fine-tune never saw zero-filled frames, and on clips
where it hesitates that moves words (docs/export.md). `padded_model` gives
faster-whisper's batched pipeline a feature extractor that pads each chunk with silence to
30 s before computing its log-mel, as training does; the short window
(`ct2_short_window`) then cuts those frames, so its 1 s margin is silence too. The same
wrapper writes `--initial_prompt` as the sequential path does, as a timestamped segment
(transcribe/prompt.py).
"""

from __future__ import annotations

from fitwhisper.data.audio import padded_like_training
from fitwhisper.transcribe.prompt import as_segment


class SilencePaddedFeatures:
    """faster-whisper's `FeatureExtractor`, on the chunk padded with silence to 30 s."""

    def __init__(self, extractor) -> None:
        self._extractor = extractor

    def __call__(self, waveform, padding=160, chunk_length=None):
        window_s = chunk_length or self._extractor.chunk_length
        samples = window_s * self._extractor.sampling_rate  # faster-whisper's own figures
        return self._extractor(
            padded_like_training(waveform, samples), padding=padding, chunk_length=chunk_length
        )

    def __getattr__(self, name: str):
        return getattr(self._extractor, name)


class _PaddedModel:
    """A `WhisperModel` seen through `SilencePaddedFeatures`, its prompt written as a
    timestamped segment (transcribe/prompt.py); everything else is its own."""

    def __init__(self, model) -> None:
        self._model = model
        self.feature_extractor = SilencePaddedFeatures(model.feature_extractor)

    def get_prompt(self, tokenizer, previous_tokens, without_timestamps=False, **kwargs):
        # The batched pipeline's only previous tokens are `--initial_prompt`'s, encoded
        # from the text it is given (it takes no token ids).
        if previous_tokens and not without_timestamps:
            previous_tokens = as_segment(list(previous_tokens), tokenizer.timestamp_begin)
        return self._model.get_prompt(tokenizer, previous_tokens, without_timestamps, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._model, name)


def padded_model(model):
    """What to hand `BatchedInferencePipeline(...)` instead of the `WhisperModel`."""
    return _PaddedModel(model)
