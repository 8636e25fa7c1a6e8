"""`--initial_prompt` as the decoder reads it: the prompt's tokens, written as one short
timestamped segment when the decoding writes timestamps.

Whisper's long-form context is the text of the windows before, timestamps included, and a
fine-tune's training context is the same (data/recordings.py). A prompt of plain text with
no timestamp in it reads as one segment as long as the window: given one, tiny.en and its
fine-tunes wrote each 30 s window of a 3-minute recording as a single segment, cut its
last sentence at the window's end and lost it (the prompted long-form WER of
bench/RESULTS-quality.md, +7.8 to +10.2 points). The same words between `<|0.00|>` and
`<|PROMPT_SEGMENT_S|>` kept the segments (20 in the first 90 s, as without a prompt) and
the text.
"""

from __future__ import annotations

from collections.abc import Callable

from fitwhisper.whisper_facts import TIMESTAMP_SECONDS

# How long the prompt's segment says it was: a typical Whisper segment, short enough that
# the model keeps writing segments of a sentence.
PROMPT_SEGMENT_S = 3.0


def prompt_tokens(
    encode: Callable[[str], list[int]], first_timestamp: int | None, text: str
) -> list[int]:
    """The prompt's token ids, without `<|startofprev|>` (each engine adds its own).

    Args:
        encode: the engine tokenizer's text -> ids, without special tokens.
        first_timestamp: the id of `<|0.00|>` when the decoding writes timestamps and the
            vocabulary has them; None for a plain prompt.

    Returns:
        ` text` as Whisper encodes a prompt, between `<|0.00|>` and
        `<|PROMPT_SEGMENT_S|>` when `first_timestamp` is given.
    """
    body = encode(" " + text.strip())
    return body if first_timestamp is None else as_segment(body, first_timestamp)


def as_segment(body: list[int], first_timestamp: int) -> list[int]:
    """A prompt's text tokens between `<|0.00|>` (id `first_timestamp`) and
    `<|PROMPT_SEGMENT_S|>`."""
    end = first_timestamp + round(PROMPT_SEGMENT_S / TIMESTAMP_SECONDS)
    return [first_timestamp, *body, end]
