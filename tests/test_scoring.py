"""The one scorer: hand-computed WER/CER, normalisers applied to both sides."""

import pytest

from fitwhisper.errors import ConfigError
from fitwhisper.scoring import (
    TextNormalizer,
    metric_for_language,
    normalizer_for_language,
    score,
    utterance_errors,
)


def test_wer_counts_substitutions_deletions_insertions():
    none = TextNormalizer("none")
    # 1 substitution (sat->sit) + 1 deletion (mat) + 1 insertion (now) over 6 + 2 words
    s = score(["the cat sat on the mat", "hello there"], ["the cat sit on the", "hello there now"],
              "wer", none)  # fmt: skip
    assert (s.errors, s.ref_units, s.n_utterances) == (3, 8, 2)
    assert s.normalized == pytest.approx(3 / 8)


def test_cer_ignores_spaces_and_counts_characters():
    s = score(["我們去北京"], ["我 門 去 背景"], "cer", TextNormalizer("none"))
    # 門 for 們, 背 for 北, 景 for 京: 3 substitutions over 5 characters
    assert (s.errors, s.ref_units) == (3, 5)


def test_english_normalizer_applied_to_both_sides_and_raw_kept():
    s = score(["Hello, World!"], ["hello world"], "wer", TextNormalizer("whisper_english"))
    assert s.normalized == 0.0
    assert s.raw == pytest.approx(1.0)  # raw: "Hello," != "hello", "World!" != "world"


def test_english_normalizer_standardises_spelling_with_the_shipped_table():
    n = TextNormalizer("whisper_english")
    assert n("The colour of the Harbour") == "the color of the harbor"


def test_english_normalizer_scores_written_and_spoken_digit_strings_alike():
    # Whisper's normaliser makes "eight four zero" one token "840" but "8, 4, 0" three, and
    # writes a lone 1 back as "one" ("7 3 0 1" -> "7 3 0 one").
    s = score(["eight four zero", "room three four", "seven three zero one", "one six one"],
              ["8, 4, 0.", "Room 3, 4", "7 3 0 1", "1 6 1"], "wer",
              TextNormalizer("whisper_english"))  # fmt: skip
    assert s.errors == 0
    n = TextNormalizer("whisper_english")
    assert n("room 12 and 3 4") == "room 12 and 34"
    assert n("one of them") == "one of them" and n("8 6 4 0 1 3") == "864013"


def test_chinese_normalizer_drops_fullwidth_and_ascii_punctuation_and_spaces():
    n = TextNormalizer("chinese")
    assert n("你好，世界。 OK! 「測試」") == "你好世界ok測試"


def test_opencc_conversion_applies_to_both_sides():
    n = TextNormalizer("chinese", opencc_config="s2tw")
    s = score(["我们去北京"], ["我們去北京"], "cer", n)
    assert s.normalized == 0.0
    assert "OpenCC s2tw" in n.describe()


def test_empty_reference_counts_hypothesis_words_as_insertions():
    s = score(["", "a b"], ["x y", "a b"], "wer", TextNormalizer("none"))
    assert (s.errors, s.ref_units) == (2, 2)


def test_utterance_errors_split_into_substitutions_deletions_insertions():
    e = utterance_errors("a b c d", "a x c d e", "wer")
    assert (e.substitutions, e.deletions, e.insertions, e.ref_units) == (1, 0, 1, 4)
    assert e.errors == 2
    e = utterance_errors("我們去北京", "我去 北京了", "cer")  # 們 deleted, 了 inserted
    assert (e.substitutions, e.deletions, e.insertions, e.ref_units) == (0, 1, 1, 5)
    assert utterance_errors("", "x y", "wer").insertions == 2


def test_unknown_opencc_config_is_a_config_error_listing_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        TextNormalizer("chinese", opencc_config="s2xx")
    assert e.value.message == "unknown OpenCC conversion 's2xx'"
    assert "s2tw" in e.value.hint and "t2s" in e.value.hint


def test_opencc_config_accepts_stem_json_and_none():
    assert TextNormalizer("chinese", opencc_config="s2tw.json").opencc_config == "s2tw"
    assert TextNormalizer("chinese", opencc_config="none").opencc_config is None
    assert TextNormalizer("chinese", opencc_config="t2s")("我們") == "我们"


@pytest.mark.parametrize(
    ("language", "metric", "normalizer"),
    [
        (None, "wer", "whisper_english"),
        ("en", "wer", "whisper_english"),
        ("zh", "cer", "chinese"),
        ("ja", "cer", "chinese"),
        ("de", "wer", "whisper_basic"),
    ],
)
def test_defaults_per_language(language, metric, normalizer):
    assert metric_for_language(language) == metric
    assert normalizer_for_language(language) == normalizer


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 references but 1 hypotheses"):
        score(["a", "b"], ["a"], "wer", TextNormalizer("none"))


@pytest.mark.parametrize(
    "spelled, written",
    [
        ("zero three five one", "0351"),
        ("zero zero seven", "007"),
        ("call oh one two three", "call 0123"),
    ],
)
def test_a_digit_string_scores_the_same_spelled_or_written_leading_zeros_kept(
    spelled: str, written: str
) -> None:
    """Whisper's normaliser keeps the zeros of a spelled string and dropped those of a
    written one ("0351" -> "351"): a model writing the digits of a spelled reference was
    counted wrong."""
    english = TextNormalizer("whisper_english")
    assert english(spelled) == english(written)
    assert english("0351") == "0351" and english("10.05") != english("10.5")


def test_digit_by_digit_scoring_counts_each_digit_and_says_so() -> None:
    from fitwhisper.evaluate import make_scorer

    metric, each = make_scorer("en", digits="each")
    reference, hypothesis = "my number is 0 3 5 1 2 4 6 8", "my number is 0 3 5 1 2 4 6 9"
    whole = score([reference], [hypothesis], "wer", TextNormalizer("whisper_english"))
    per_digit = score([reference], [hypothesis], metric, each)
    assert (whole.errors, whole.ref_units) == (1, 4)  # the 8-digit number is one word
    assert (per_digit.errors, per_digit.ref_units) == (1, 11)
    assert "every digit a word" in per_digit.normalizer
    assert "every digit" not in whole.normalizer
