"""What `run` asks of a transcription engine: both engines (`hf_engine`'s transformers,
`ct2_engine`'s faster-whisper) have this shape, and the code that drives them (`run`,
`cli/transcribe`, export re-scoring) knows only this."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np

from fitwhisper.transcribe.formats import Transcript


class Engine(Protocol):
    name: str  # "transformers" or "ct2", as --engine names it
    language: str | None  # the language decoded; None: detected per file
    window: str  # the encoder window: "full" (30 s) or "short" (a clip's own length)
    language_why: str  # why that language (set by `run.make_engine`)

    def transcribe(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> list[Transcript]:
        """Each file's transcript, in order; `progress(seconds)` as audio is done."""
        ...

    def stream(
        self,
        names: Sequence[str],
        audios: Sequence[np.ndarray],
        progress: Callable[[float], None] | None = None,
    ) -> Iterator[tuple[int, Transcript]]:
        """`(index, transcript)` per file, each as soon as it is finished."""
        ...
