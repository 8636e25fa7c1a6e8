"""Whisper's timestamp tokens `<|0.00|>` ... `<|30.00|>` in a tokenizer: whether it has
them and which id a time is (used by packed windows and by windows of long recordings)."""

from __future__ import annotations

from fitwhisper.whisper_facts import TIMESTAMP_SECONDS


def timestamp_id(tokenizer, seconds: float) -> int:
    """The id of the timestamp token nearest `seconds` (`<|0.00|>` + seconds / 0.02)."""
    return tokenizer.convert_tokens_to_ids("<|0.00|>") + round(seconds / TIMESTAMP_SECONDS)


def has_timestamp_tokens(tokenizer) -> bool:
    """Whether the vocabulary has `<|0.00|>` ... `<|30.00|>` (old tokenizer files may lack them)."""
    first = tokenizer.convert_tokens_to_ids("<|0.00|>")
    return first is not None and first != tokenizer.unk_token_id
