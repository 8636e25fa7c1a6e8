"""Chinese script: which characters belong to Simplified or Traditional writing, how much of a
text is in the expected script, and conversion of transcripts into a wanted script.

Taiwanese users expect Traditional characters (zh-TW); a model that mixes scripts is wrong
for them even when a Simplified-folding scorer calls it right. `script_share` measures that,
and `to_script` is the one function that turns output into the wanted script (used by
`fitwhisper evaluate --output_script` and by training-time evaluation; transcription can call
it on its output too).

Definition (stated in every report):
- a Han character is **Simplified-only** when OpenCC's `s2t` table changes it and it has no
  code in CP950 (Big5 as used in Taiwan, the Traditional character set): 们, 发, 这;
- it is **Traditional-only** when OpenCC's `t2s` table changes it and it has no code in
  GB2312 (the Simplified character set of the mainland): 們, 發, 這;
- every other Han character (一, 人, 台, 后, 乾) is valid in both scripts.
The character sets keep characters that OpenCC maps but that are standard in the other
script too (台 and 后 in Taiwan, 乾 in 乾坤 on the mainland) from counting as errors.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from fitwhisper.errors import ConfigError
from fitwhisper.scoring import HAN_CLASS, check_opencc_config, opencc_converter

Script = Literal["traditional", "simplified"]
CharScript = Literal["simplified", "traditional", "both"]
# The output scripts users ask for, each as the OpenCC table that produces it: s2tw gives
# Taiwan's character forms (character conversion, no phrase rewriting); t2s Simplified.
SCRIPT_OPENCC: dict[str, str] = {"traditional": "s2tw", "simplified": "t2s"}
OUTPUT_SCRIPTS: tuple[str, ...] = ("none", "traditional", "simplified")
SCRIPT_DEFINITION = (
    "share of Han characters valid in the expected script; a character is Simplified-only "
    "when OpenCC s2t changes it and CP950 (Big5) cannot encode it, Traditional-only when "
    "OpenCC t2s changes it and GB2312 cannot encode it; characters valid in both count as "
    "correct"
)

_HAN = re.compile(f"[{HAN_CLASS}]")


def check_output_script(script: str | None) -> str | None:
    """`traditional`, `simplified` or an OpenCC table name (s2twp, ...); None for none.

    Raises:
        ConfigError: anything else.
    """
    if script is None or script.lower() == "none":
        return None
    if script.lower() in SCRIPT_OPENCC:
        return script.lower()
    try:
        return check_opencc_config(script)
    except ConfigError as e:
        raise ConfigError(
            f"unknown output script {script!r}",
            hint="use none, traditional (OpenCC s2tw), simplified (OpenCC t2s) or an OpenCC "
            "table such as s2twp (Taiwan Traditional with Taiwanese phrasing)",
        ) from e


def to_script(text: str, script: str | None) -> str:
    """`text` converted into `script` (traditional, simplified, an OpenCC table, or None:
    unchanged). Non-Chinese text passes through unchanged."""
    script = check_output_script(script)
    if script is None:
        return text
    return opencc_converter(SCRIPT_OPENCC.get(script, script)).convert(text)


def rows_in_script(rows: Sequence, script: str | None) -> list:
    """Manifest rows with their transcripts converted into `script` (unchanged for None), so
    a model trained on them learns to write that script: a window of a long recording's
    segments and previous text too (data/recordings.py)."""
    if check_output_script(script) is None:
        return list(rows)

    def converted(r):
        segments = getattr(r, "segments", None)
        if segments is not None:
            segments = tuple(
                dataclasses.replace(s, text=to_script(s.text, script)) for s in segments
            )
        previous = getattr(r, "previous_text", None)
        return dataclasses.replace(
            r,
            text=to_script(r.text or "", script),
            **({} if segments is None else {"segments": segments}),
            **({} if previous is None else {"previous_text": to_script(previous, script)}),
        )

    return [converted(r) for r in rows]


def expected_script(script: str | None) -> Script | None:
    """The script an output-script option produces (s2twp -> traditional), None if neither."""
    script = check_output_script(script)
    if script is None:
        return None
    if script in SCRIPT_OPENCC:
        return script  # type: ignore[return-value]
    target = script.split("2", 1)[-1]
    return "simplified" if target.startswith("s") else "traditional"


@cache
def char_script(ch: str) -> CharScript:
    """Which script a Han character belongs to (see the module docstring for the rule)."""
    if opencc_converter("s2t").convert(ch) != ch and not _encodes(ch, "cp950"):
        return "simplified"
    if opencc_converter("t2s").convert(ch) != ch and not _encodes(ch, "gb2312"):
        return "traditional"
    return "both"


@dataclass(frozen=True)
class ScriptShare:
    """How much of a set of texts is written in the expected script.

    ``share`` is the fraction of Han characters valid in ``expected`` (1.0 when there are
    none); ``wrong`` counts each character written in the other script.
    """

    expected: Script
    han_chars: int
    wrong_chars: int
    wrong: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return 1.0 - self.wrong_chars / self.han_chars if self.han_chars else 1.0

    def as_dict(self, top: int = 20) -> dict:
        return {
            "expected_script": self.expected,
            "share_in_expected_script": self.share,
            "han_characters": self.han_chars,
            "wrong_script_characters": self.wrong_chars,
            "most_frequent_wrong": dict(Counter(self.wrong).most_common(top)),
            "definition": SCRIPT_DEFINITION,
        }


def script_share(texts: Iterable[str], expected: Script) -> ScriptShare:
    """Count the Han characters of `texts` and those in the script other than `expected`."""
    if expected not in ("traditional", "simplified"):
        raise ConfigError(f"unknown script {expected!r}", hint="use traditional or simplified")
    other = "simplified" if expected == "traditional" else "traditional"
    wrong: Counter[str] = Counter()
    han = 0
    for text in texts:
        for ch in _HAN.findall(text):
            han += 1
            if char_script(ch) == other:
                wrong[ch] += 1
    return ScriptShare(expected, han, sum(wrong.values()), dict(wrong))


def is_han(ch: str) -> bool:
    """Whether a character is a Chinese (Han) character."""
    return bool(_HAN.fullmatch(ch))


def _encodes(ch: str, encoding: str) -> bool:
    try:
        ch.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True
