"""One rule joins pieces of a transcript: spaces between words of spaced scripts, none in
scripts written without them."""

from __future__ import annotations

import pytest

from fitwhisper.text_joins import join_texts, leading_space, needs_space


@pytest.mark.parametrize(
    ("before", "after", "space"),
    [
        ("get there", "Pop it", True),  # a fine-tune's segments without Whisper's space
        ("get there", " Pop it", False),  # Whisper's own: the space is in the text
        ("there ", "Pop", False),
        ("Привет", "мир", True),  # spaced scripts beyond ASCII
        ("schön", "Über", True),
        ("你好", "世界", False),
        ("你好。", "Hello", False),  # CJK punctuation is unspaced
        ("I said", "你好", False),
        ("こんにちは", "世界", False),
        ("สวัสดี", "ครับ", False),
        ("안녕", "하세요", True),  # Korean is written with spaces
        ("", "a", False),
        ("a", "", False),
    ],
)
def test_needs_space(before: str, after: str, space: bool) -> None:
    assert needs_space(before, after) is space


def test_join_texts_never_glues_nor_doubles() -> None:
    assert join_texts(["It was", "Pop it", " on the list", "", "你好", "世界"]) == (
        "It was Pop it on the list你好世界"
    )


def test_leading_space_as_whisper_writes_a_segment() -> None:
    assert leading_space("It was") == " It was"
    assert leading_space("  It was ") == " It was"
    assert leading_space("你好") == "你好"
    assert leading_space("") == ""
