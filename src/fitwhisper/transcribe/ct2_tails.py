"""Speech that faster-whisper's batched pipeline cut into a chunk and then never decoded.

The pipeline cuts a long file at pauses into chunks of up to 30 s of speech and decodes
each chunk once. Where the decoder writes end-of-text after a few sentences, the rest of
that chunk's speech is lost: unlike Whisper's sequential algorithm, which seeks to the last
timestamp and decodes on, nothing decodes it again. Measured on `tests/transcribe/
test_long_audio.py`'s 5-minute file on an AVX2-only CPU: 4 of 46 sentences lost, at the
ends of two chunks, CER 20.7% against 16.4% for the same sentences one clip each.

Here the file's speech is cut into the pipeline's own chunks (its VAD settings and its
30 s of speech per chunk); each chunk whose decoded segments end at least `MIN_TAIL_S` of
speech before the chunk does gets that tail decoded again, as clips of up to 30 s. A chunk
with no segment at all is left alone (the decoder judged it not speech, and would again),
and so is every chunk decoded without timestamps, whose one segment spans it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fitwhisper.whisper_facts import SAMPLE_RATE, WINDOW_SECONDS

# Whisper's timestamps on the last words of a window are often a second early, and the VAD
# pads each stretch by 0.4 s: a shorter gap is not taken for lost speech.
MIN_TAIL_S = 2.0
ROUNDS = 2  # a re-decoded tail may stop early too; twice recovers what the test file lost

Stamp = tuple[float, float]  # a speech stretch, (start, end) in the file's seconds


def speech_chunks(audio: np.ndarray, chunk_s: float = WINDOW_SECONDS) -> list[list[Stamp]]:
    """The speech stretches the batched pipeline finds, grouped into its chunks: VAD as in
    `BatchedInferencePipeline.transcribe`, up to `chunk_s` of speech per chunk, the same
    rule as faster-whisper's `collect_chunks`."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    options = VadOptions(max_speech_duration_s=chunk_s, min_silence_duration_ms=160)
    found = get_speech_timestamps(audio.astype(np.float32, copy=False), options)
    return grouped([(s["start"] / SAMPLE_RATE, s["end"] / SAMPLE_RATE) for s in found], chunk_s)


def grouped(stamps: Sequence[Stamp], speech_s: float) -> list[list[Stamp]]:
    """Consecutive stretches, a new group whenever the speech would pass `speech_s`."""
    groups: list[list[Stamp]] = []
    held = 0.0
    for start, end in stamps:
        if not groups or held + end - start > speech_s:
            groups.append([])
            held = 0.0
        groups[-1].append((start, end))
        held += end - start
    return groups


def undecoded_tails(chunks: Sequence[Sequence[Stamp]], decoded: Sequence[Stamp]) -> list[Stamp]:
    """Clips (start, end), each spanning at most 30 s, over the speech each chunk holds after
    its last decoded segment, where that is at least `MIN_TAIL_S`."""
    starts = [c[0][0] for c in chunks]
    last_end: dict[int, float] = {}
    for seg_start, seg_end in decoded:
        # A segment may start a little before its chunk's first stretch; one that starts
        # after its chunk's last stretch belongs to none (a later round's other chunks).
        k = int(np.searchsorted(starts, seg_start + 0.5, side="right")) - 1
        if k >= 0 and seg_start < chunks[k][-1][1]:
            last_end[k] = max(last_end.get(k, 0.0), seg_end)
    clips: list[Stamp] = []
    for k, end in last_end.items():
        tail = [(max(s, end), e) for s, e in chunks[k] if e > end]
        if sum(e - s for s, e in tail) < MIN_TAIL_S:
            continue
        for group in _spanning(tail, WINDOW_SECONDS):
            clips.append((group[0][0], group[-1][1]))
    return clips


def _spanning(stamps: list[Stamp], span_s: float) -> list[list[Stamp]]:
    """Consecutive stretches, a new group where one would make the group span past
    `span_s`; a stretch longer than that alone is cut at `span_s`."""
    groups: list[list[Stamp]] = []
    for start, end in stamps:
        while end - start > span_s:
            groups.append([(start, start + span_s)])
            start += span_s
        if groups and end - groups[-1][0][0] <= span_s:
            groups[-1].append((start, end))
        else:
            groups.append([(start, end)])
    return groups


def with_tails_decoded(
    audio: np.ndarray, first_pass: list, decode: Callable[[list[dict]], list]
) -> list:
    """`first_pass` (the pipeline's segments for `audio`) with the speech it left
    undecoded decoded by `decode(clip_timestamps)`, in time order."""
    segments = list(first_pass)
    chunks = speech_chunks(audio)
    for _ in range(ROUNDS):
        clips = undecoded_tails(chunks, [(s.start, s.end) for s in segments])
        if not clips:
            break
        found = decode([{"start": s, "end": e} for s, e in clips])
        if not found:
            break
        segments = sorted([*segments, *found], key=lambda s: s.start)
        # The next round looks only inside what was decoded again.
        chunks = [[(s, e)] for s, e in clips]
    return segments
