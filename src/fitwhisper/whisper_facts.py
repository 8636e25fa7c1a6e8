"""Whisper's fixed facts, said once: its audio window, how its special tokens are read and
how a beam size decodes, in words.

Every Whisper model hears 16 kHz audio as log-mel frames 10 ms apart, in windows of 30 s
(3000 frames; the encoder's stride-2 convolution halves them to 1500 positions), and writes
times as tokens `<|0.00|>` ... `<|30.00|>` 0.02 s apart. Nothing here imports fitwhisper,
so every module may import it (tests/test_package_shape.py); where a loaded model or its
feature extractor states one of these, code that has the model reads it from there.
"""

from __future__ import annotations

SAMPLE_RATE = 16_000  # samples per second: Whisper's feature extractor takes nothing else
HOP_LENGTH = 160  # samples per log-mel frame
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100 log-mel frames
WINDOW_SECONDS = 30.0  # what the encoder hears at once; shorter input is padded to it
WINDOW_SAMPLES = round(WINDOW_SECONDS * SAMPLE_RATE)  # 480_000
WINDOW_FRAMES = WINDOW_SAMPLES // HOP_LENGTH  # 3000: the only length stock encoders take
ENCODER_POSITIONS = WINDOW_FRAMES // 2  # 1500: after the encoder's stride-2 convolution
TIMESTAMP_SECONDS = 0.02  # between timestamp tokens: <|0.00|>, <|0.02|>, ... <|30.00|>
TIMESTAMP_TOKENS = round(WINDOW_SECONDS / TIMESTAMP_SECONDS) + 1  # 1501


# Whisper's vocabularies: GPT-2's 50257 tokens for English-only models, so their
# <|startoftranscript|> is id 50257; multilingual ones add a token and start at 50258.
_ENGLISH_ONLY_SOT_ID = 50257


def is_multilingual(tokenizer) -> bool:
    """Whether a Whisper tokenizer belongs to a multilingual model, whose prefix names a
    language (English-only vocabularies hold the language tokens too, never used)."""
    return tokenizer.convert_tokens_to_ids("<|startoftranscript|>") != _ENGLISH_ONLY_SOT_ID


def token_text(token: str) -> str:
    """A special token's text, bare: `<|transcribe|>` -> `transcribe`; `zh` stays `zh`."""
    return token.strip().strip("<|>")


def language_code(token: str) -> str:
    """A language as Whisper's tokens name it: `<|zh|>`, `zh`, `ZH`, `chinese` or `Mandarin`
    -> `zh`. Anything else comes back bare and lower-case, for the caller to refuse."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    text = token_text(token).lower()
    return TO_LANGUAGE_CODE.get(text, text)


def decoding(beam_size: int) -> str:
    """How a beam size decodes, in words (logs, plans and errors say it one way)."""
    return "greedy decoding" if beam_size == 1 else f"beam search of {beam_size}"
