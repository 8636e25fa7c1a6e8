"""How two pieces of a transcript join: with a space between words of scripts written with
spaces, with none where a script is written without (Chinese, Japanese, Thai and the like).

One rule for every join: clips packed into one window, a long recording's segments joined
as its text or its previous-text context, a timestamped segment's leading space in a
training label, and the segments a transcription engine returns. Whisper's own
segments carry their leading space in the text (" It was"), but a model fine-tuned on
labels without one returns "It was", and a plain concatenation then glues the last word of
one segment to the first of the next ("therePop it"), which costs two errors a join.
"""

from __future__ import annotations

from collections.abc import Iterable

# Scripts written without spaces between words, as code point ranges.
_UNSPACED = (
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x0F00, 0x0FFF),  # Tibetan
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x2E80, 0x2FFF),  # CJK radicals, Kangxi radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation (。、「」)
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x31FF),  # Bopomofo, CJK strokes, Katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # full-width and half-width forms (，！？)
    (0x20000, 0x3FFFF),  # CJK extensions B onward
)


def unspaced(char: str) -> bool:
    """Whether `char` belongs to a script written without spaces between words."""
    code = ord(char)
    return any(low <= code <= high for low, high in _UNSPACED)


def needs_space(before: str, after: str) -> bool:
    """Whether joining `after` to `before` needs a space between them: both non-empty,
    neither has whitespace at the join, and neither side of it is an unspaced script."""
    if not before or not after or before[-1].isspace() or after[0].isspace():
        return False
    return not (unspaced(before[-1]) or unspaced(after[0]))


def join_texts(texts: Iterable[str]) -> str:
    """Pieces of one transcript joined in order by `needs_space`; empty pieces add nothing."""
    out = ""
    for text in texts:
        if text:
            out += (" " if needs_space(out, text) else "") + text
    return out


def leading_space(text: str) -> str:
    """`text` as Whisper writes a segment after a timestamp: with one leading space where
    its script is written with spaces (" It was"), as it is (Chinese, Japanese)."""
    text = text.strip()
    return " " + text if text and not unspaced(text[0]) else text
