"""Chinese and code-switched scoring pinned on hand-written examples: CER, MER, the share of
output in the expected script, and every normalisation option."""

import json

import pytest

from fitwhisper.chinese_script import (
    char_script,
    check_output_script,
    expected_script,
    script_share,
    to_script,
)
from fitwhisper.errors import ConfigError
from fitwhisper.evaluate import EvalResult, make_scorer, resolve_expected_script
from fitwhisper.scoring import NormalizeOptions, TextNormalizer, mixed_tokens, score

CHINESE = TextNormalizer("chinese")


# --- CER and MER ----------------------------------------------------------------------------


def test_cer_counts_each_wrong_script_character_by_default():
    # 們 and 這 are the Traditional forms the reference asks for; 们 and 这 are errors.
    s = score(["我們這裡"], ["我们这裡"], "cer", CHINESE)
    assert (s.errors, s.ref_units) == (2, 4)
    assert "no OpenCC" in s.normalizer  # the report says nothing was folded


def test_mixed_tokens_split_chinese_characters_and_keep_other_words_whole():
    assert mixed_tokens("我用iPhone拍照 ok 123") == ["我", "用", "iPhone", "拍", "照", "ok", "123"]


def test_mer_on_code_switched_text():
    # Reference tokens: 我 用 iphone 拍 照 (5). "i phone" is a substitution (i for iphone)
    # plus an insertion (phone); 照 for 照 is right; 相 for 拍 is a substitution.
    s = score(["我用iPhone拍照"], ["我用 i phone 相照"], "mer", CHINESE)
    assert (s.errors, s.ref_units) == (3, 5)
    assert s.normalized == pytest.approx(3 / 5)
    # CER over the same texts counts letters: "iphone" (6 letters) vs "iphone" is right.
    c = score(["我用iPhone拍照"], ["我用 i phone 相照"], "cer", CHINESE)
    assert (c.errors, c.ref_units) == (1, 10)


def test_mer_treats_an_english_word_as_one_token():
    s = score(["明天meeting取消"], ["明天 meting 取消"], "mer", CHINESE)
    assert (s.errors, s.ref_units) == (1, 5)


# --- script consistency -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ch, script",
    [("们", "simplified"), ("发", "simplified"), ("們", "traditional"), ("發", "traditional"),
     ("台", "both"), ("后", "both"), ("乾", "both"), ("一", "both")],
)  # fmt: skip
def test_character_script(ch, script):
    assert char_script(ch) == script


def test_script_share_counts_han_characters_in_the_other_script():
    texts = ["們发这台后乾", "OK 123"]  # Latin letters and digits are not Han characters
    trad = script_share(texts, "traditional")
    assert (trad.han_chars, trad.wrong_chars, trad.wrong) == (6, 2, {"发": 1, "这": 1})
    assert trad.share == pytest.approx(4 / 6)
    simp = script_share(texts, "simplified")
    assert (simp.wrong_chars, simp.share) == (1, pytest.approx(5 / 6))
    assert script_share(["hello"], "traditional").share == 1.0
    with pytest.raises(ConfigError, match="unknown script"):
        script_share(["x"], "cyrillic")  # type: ignore[arg-type]


def test_expected_script_follows_the_option_or_the_references():
    assert resolve_expected_script("auto", None, ["我們去"]) == "traditional"
    assert resolve_expected_script("auto", None, ["我们去"]) == "simplified"
    assert resolve_expected_script("auto", None, ["hello"]) is None
    assert resolve_expected_script("auto", "traditional", ["我们去"]) == "traditional"
    assert resolve_expected_script("none", "traditional", ["我们去"]) is None
    assert expected_script("s2twp") == "traditional" and expected_script("t2s") == "simplified"


# --- output script ----------------------------------------------------------------------------


def test_to_script_converts_output_and_leaves_other_text_alone():
    assert to_script("这个软件 OK", "traditional") == "這個軟件 OK"
    assert to_script("這個", "simplified") == "这个"
    assert to_script("这个", None) == to_script("这个", "none") == "这个"
    assert to_script("软件", "s2twp") == "軟體"  # Taiwanese phrasing, not only characters
    with pytest.raises(ConfigError, match="unknown output script 'klingon'") as e:
        check_output_script("klingon")
    assert "traditional (OpenCC s2tw)" in e.value.hint


# --- normalisation options, each applied to both sides ---------------------------------------


@pytest.mark.parametrize(
    "options, text, want",
    [
        ({}, "你好，世界。 Hello World!", "你好世界hello world"),
        ({"punctuation": "halfwidth"}, "你好，世界。「好」", '你好,世界."好"'),
        ({"punctuation": "keep"}, "你好，世界。", "你好，世界。"),
        ({"spaces": "remove"}, "我 用 iPhone 拍照 ok", "我用iphone拍照ok"),
        ({"spaces": "keep"}, "我 用  iPhone", "我 用  iphone"),
        ({"case": "keep"}, "用 iPhone", "用iPhone"),
        ({"numerals": "arabic"}, "设定二十九度", "设定29度"),
        ({"numerals": "chinese"}, "设定29度", "设定二十九度"),
        ({}, "ＡＢＣ１２", "abc12"),  # full-width letters and digits are the same text
    ],
)
def test_normalisation_options(options, text, want):
    assert TextNormalizer("chinese", options=NormalizeOptions(**options))(text) == want


def test_numerals_option_makes_digits_and_chinese_numerals_score_alike():
    refs, hyps = ["设定二十九度"], ["设定29度"]
    assert score(refs, hyps, "cer", CHINESE).errors > 0  # default: numerals as written
    arabic = TextNormalizer("chinese", options=NormalizeOptions(numerals="arabic"))
    assert score(refs, hyps, "cer", arabic).errors == 0
    assert "numerals arabic" in arabic.describe()


@pytest.mark.parametrize("opencc, errors", [(None, 3), ("s2tw", 0), ("s2twp", 0), ("t2s", 0)])
def test_opencc_on_both_sides_folds_scripts_only_when_asked(opencc, errors):
    n = TextNormalizer("chinese", opencc_config=opencc)
    assert score(["我們這裡"], ["我们这里"], "cer", n).errors == errors
    assert (f"OpenCC {opencc}" if opencc else "no OpenCC") in n.describe()


def test_bad_options_are_config_errors_naming_the_choices():
    with pytest.raises(ConfigError, match="unknown numerals option 'roman'") as e:
        NormalizeOptions(numerals="roman")  # type: ignore[arg-type]
    assert e.value.hint == "use one of: keep, arabic, chinese"
    with pytest.raises(ConfigError, match="apply to the chinese normaliser"):
        TextNormalizer("whisper_english", options=NormalizeOptions(numerals="arabic"))
    # With auto, asking for a Chinese option picks the chinese normaliser.
    assert make_scorer("en", options=NormalizeOptions(spaces="remove"))[1].name == "chinese"


# --- what a report holds --------------------------------------------------------------------


def test_report_has_mer_script_share_and_a_breakdown_per_language():
    refs = ("我們去台北", "我用iPhone拍照", "hello world")
    hyps = ("我们去台北", "我用iphone拍照", "hello word")
    metric, norm = make_scorer("zh")
    res = EvalResult(
        score=score(list(refs), list(hyps), metric, norm),
        references=refs,
        hypotheses=hyps,
        ids=("a", "b", "c"),
        normalizer=norm,
        languages=("zh", "zh", "en"),
        expected_script="traditional",
    )
    m = res.metrics()
    assert m["normalizer"].startswith("chinese (punctuation remove, spaces cjk, case lower")
    assert m["output_script"] == "none"
    # CER: 们 for 們 (1) + "word" for "world" (1 deletion) over 5 + 10 + 10 characters.
    assert (m["errors"], m["ref_units"]) == (2, 25)
    # MER: 们 (1) + word for world (1) over 5 + 5 + 2 tokens.
    assert (m["mer"]["errors"], m["mer"]["ref_units"]) == (2, 12)
    sc = m["script"]
    assert (sc["han_characters"], sc["wrong_script_characters"]) == (9, 1)
    assert sc["most_frequent_wrong"] == {"们": 1} and sc["reference_share"] == 1.0
    by = m["by_language"]
    assert by["zh"]["metric"] == "cer" and by["zh"]["errors"] == 1
    assert by["en"]["metric"] == "wer" and by["en"]["wer"] == pytest.approx(0.5)
    summary = res.format_summary()
    assert "traditional share  88.89%  of 9 Han characters in the output" in summary
    assert "wrong script: 们" in summary


def test_comparison_shows_mer_and_script_share_of_both_models(tmp_path):
    from fitwhisper.evaluate import Comparison

    refs = ("我們去台北", "我用iPhone拍照")
    metric, norm = make_scorer("zh")

    def result(name, hyps):
        return EvalResult(
            score=score(list(refs), list(hyps), metric, norm),
            references=refs,
            hypotheses=hyps,
            ids=("a", "b"),
            normalizer=norm,
            model=name,
            expected_script="traditional",
        )

    cmp = Comparison(
        model=result("fine-tuned", ("我們去台北", "我用iphone拍照")),
        baseline=result("zero-shot", ("我们去台北", "我用 i phone 拍照")),
    )
    table = cmp.format_table()
    assert "traditional share of output Han characters: 100.00% (model), 88.89% (--compare)" in (
        table
    )
    assert "MER normalised" in table
    written = json.loads(cmp.write(tmp_path)["comparison"].read_text())
    assert written["baseline"]["script"]["wrong_script_characters"] == 1
    assert written["baseline"]["mer"] == pytest.approx(3 / 10)
