"""faster-whisper's batched pipeline on a short encoder window, for models that chose it.

`BatchedInferencePipeline.transcribe` pads every clip's features to 30 s; CTranslate2's
encoder takes any even frame count (as whisper.cpp's `audio_ctx` does). This pipeline cuts
each batch's features to its longest clip and the inference margin before faster-whisper's
own `forward` (encode, generate, timestamps, word alignment) runs, so only a model whose
training chose the short window (`models.short_window.window_for`) should be given it: one
trained on 30 s windows breaks on short ones (bench/RESULTS-transcribe.md).
"""

from __future__ import annotations

import math

from faster_whisper import BatchedInferencePipeline

from fitwhisper.models.short_window import inference_frames


class ShortWindowPipeline(BatchedInferencePipeline):
    """`BatchedInferencePipeline` whose batches are encoded on their longest clip + 1 s."""

    def forward(self, features, tokenizer, chunks_metadata, options):
        longest = max(chunk["duration"] for chunk in chunks_metadata)
        # Word alignment reads ceil(duration) s of encoder frames: the 1 s margin holds them.
        frames = inference_frames(math.ceil(longest * self.model.frames_per_second))
        return super().forward(features[..., :frames], tokenizer, chunks_metadata, options)
