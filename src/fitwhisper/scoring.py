"""Text normalisation and error rates: the one scorer behind training-time eval and `evaluate`.

The same normaliser is applied to reference and hypothesis, and both raw and normalised
figures are reported, so a number printed during training equals the one `evaluate` prints.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Literal

import jiwer

from fitwhisper.errors import ConfigError

# mer: mixed error rate for code-switched text, over Chinese characters and other words.
Metric = Literal["wer", "cer", "mer"]
METRICS: tuple[str, ...] = ("wer", "cer", "mer")
NormalizerName = Literal["auto", "whisper_english", "whisper_basic", "chinese", "none"]
NORMALIZERS: tuple[str, ...] = ("auto", "whisper_english", "whisper_basic", "chinese", "none")
# OpenCC's conversion tables (the .json configs its package ships), e.g. s2tw: Simplified
# to Taiwan Traditional characters; s2twp adds Taiwanese phrasing.
OPENCC_CONFIGS: tuple[str, ...] = (
    "s2t",
    "t2s",
    "s2tw",
    "tw2s",
    "s2twp",
    "tw2sp",
    "s2hk",
    "hk2s",
    "s2hkp",
    "hk2sp",
    "t2tw",
    "tw2t",
    "t2hk",
    "hk2t",
    "t2jp",
    "jp2t",
)

# Languages written without spaces between words: word error rate is meaningless there.
CER_LANGUAGES = frozenset(
    {
        "zh",
        "chinese",
        "mandarin",
        "yue",
        "cantonese",
        "ja",
        "japanese",
        "th",
        "thai",
        "lo",
        "lao",
        "my",
        "burmese",
        "km",
        "khmer",
        "bo",
        "tibetan",
    }
)
ENGLISH = frozenset({"en", "english"})


def metric_for_language(language: str | None) -> Metric:
    """CER for languages written without spaces, WER otherwise (English-only models: WER)."""
    return "cer" if language and language.lower() in CER_LANGUAGES else "wer"


def normalizer_for_language(language: str | None) -> NormalizerName:
    """The default normaliser: Whisper's English one for English (and English-only models)."""
    if language is None or language.lower() in ENGLISH:
        return "whisper_english"
    # Languages scored by CER share the space-free normaliser (punctuation, spaces removed).
    return "chinese" if language.lower() in CER_LANGUAGES else "whisper_basic"


@dataclass(frozen=True)
class NormalizeOptions:
    """What the ``chinese`` normaliser folds, applied to reference and hypothesis alike.

    The defaults fold what is not a transcription error (punctuation, spacing, letter case)
    and keep what is: numerals as written and the script of every character (no OpenCC
    conversion unless asked), so Simplified output against Traditional references counts.
    """

    punctuation: Literal["remove", "halfwidth", "keep"] = "remove"
    spaces: Literal["cjk", "remove", "keep"] = "cjk"
    case: Literal["lower", "keep"] = "lower"
    numerals: Literal["keep", "arabic", "chinese"] = "keep"

    def __post_init__(self) -> None:
        for f in fields(self):
            allowed = _OPTION_CHOICES[f.name]
            if getattr(self, f.name) not in allowed:
                raise ConfigError(
                    f"unknown {f.name} option {getattr(self, f.name)!r}",
                    hint=f"use one of: {', '.join(allowed)}",
                )

    def describe(self) -> str:
        return ", ".join(f"{f.name} {getattr(self, f.name)}" for f in fields(self))


# punctuation: remove all (full- and half-width); halfwidth: keep, with full-width and CJK
#   marks folded to ASCII (，->, 。->.); keep: as written.
# spaces: cjk: removed next to Chinese characters, one space kept between other words
#   ("iPhone 拍照" = "iPhone拍照", "hello world" stays two words); remove: all; keep: as written.
# numerals: arabic: Chinese numerals to digits (二十九 -> 29); chinese: digits to Chinese
#   numerals (29 -> 二十九); both by cn2an's sentence conversion.
_OPTION_CHOICES = {
    "punctuation": ("remove", "halfwidth", "keep"),
    "spaces": ("cjk", "remove", "keep"),
    "case": ("lower", "keep"),
    "numerals": ("keep", "arabic", "chinese"),
}
NORMALIZE_OPTION_CHOICES = _OPTION_CHOICES


class TextNormalizer:
    """Maps text to the form it is scored in.

    - ``whisper_english``: Whisper's English normaliser (lower case, numbers and spellings
      standardised, punctuation removed), from transformers with openai/whisper's table;
      runs of single digits are then joined ("8 4 0" -> "840"), as it already joins spelled
      ones ("eight four zero" -> "840").
    - ``whisper_basic``: Whisper's language-neutral normaliser (lower case, punctuation and
      symbols to spaces).
    - ``chinese``: by default punctuation (full- and half-width) removed, spaces removed next
      to Chinese characters, Latin letters lower-cased (`NormalizeOptions` changes each);
      numerals converted only when asked.
    - ``none``: unchanged.

    An optional OpenCC conversion (``s2tw``, ``s2twp``, ``t2s``, ...) is applied to both sides
    first, with any normaliser. None by default: folding scripts would hide script errors.
    """

    def __init__(
        self,
        name: NormalizerName,
        opencc_config: str | None = None,
        options: NormalizeOptions | None = None,
        digits: str = "numbers",
    ) -> None:
        if name == "auto":
            raise ValueError("resolve 'auto' with normalizer_for_language() first")
        if name not in NORMALIZERS:
            raise ConfigError(
                f"unknown normalizer {name!r}",
                hint="use one of: " + ", ".join(NORMALIZERS),
            )
        options = options or NormalizeOptions()
        if name != "chinese" and options != NormalizeOptions():
            raise ConfigError(
                f"punctuation, spaces, case and numerals options apply to the chinese "
                f"normaliser, not {name!r}",
                hint="add --normalizer chinese, or leave those options at their defaults",
            )
        if digits not in DIGIT_MODES:
            raise ConfigError(f"unknown digits mode {digits!r}", hint="use numbers or each")
        self.name = name
        self.digits = digits
        self.options = options
        self.opencc_config = check_opencc_config(opencc_config)
        self._fn = _build(name, options)
        self._opencc = opencc_converter(self.opencc_config) if self.opencc_config else None

    def __call__(self, text: str) -> str:
        if self._opencc is not None:
            text = self._opencc.convert(text)
        text = self._fn(text)
        if self.digits == "each":
            text = " ".join(_EACH_DIGIT.sub(r" \g<0> ", text).split())
        return text

    def describe(self) -> str:
        """One line for reports: which normalisation was applied to both sides."""
        opts = f" ({self.options.describe()})" if self.name == "chinese" else ""
        # Chinese reports always say whether scripts were folded; others only when they were.
        conv = f" + OpenCC {self.opencc_config}" if self.opencc_config else ""
        if not conv and self.name == "chinese":
            conv = " + no OpenCC"
        digits = "; every digit a word" if self.digits == "each" else ""
        return f"{self.name}{opts}{conv}{digits} (applied to reference and hypothesis alike)"


@dataclass(frozen=True)
class Score:
    """Error rates of a set of hypotheses against references, raw and normalised.

    Rates are fractions (0.25 = 25%). ``errors`` and ``ref_units`` count words (WER) or
    characters (CER) after normalisation.
    """

    metric: Metric
    normalizer: str
    raw: float
    normalized: float
    errors: int
    ref_units: int
    n_utterances: int

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "metric": self.metric,
            "normalizer": self.normalizer,
            f"{self.metric}": self.normalized,
            f"{self.metric}_raw": self.raw,
            "errors": self.errors,
            "ref_units": self.ref_units,
            "n_utterances": self.n_utterances,
        }


def score(
    references: list[str], hypotheses: list[str], metric: Metric, normalizer: TextNormalizer
) -> Score:
    """Corpus-level WER or CER; utterances whose normalised reference is empty are skipped
    for the normalised figure only when the hypothesis is empty too."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    norm_refs = [normalizer(r) for r in references]
    norm_hyps = [normalizer(h) for h in hypotheses]
    raw_errors, raw_units = _errors(references, hypotheses, metric)
    errors, units = _errors(norm_refs, norm_hyps, metric)
    return Score(
        metric=metric,
        normalizer=normalizer.describe(),
        raw=raw_errors / max(raw_units, 1),
        normalized=errors / max(units, 1),
        errors=errors,
        ref_units=units,
        n_utterances=len(references),
    )


def check_opencc_config(config: str | None) -> str | None:
    """An OpenCC table name (``s2tw`` or ``s2tw.json``) as its stem; None for none.

    Raises:
        ConfigError: a table OpenCC does not ship.
    """
    if config is None or config.lower() == "none":
        return None
    stem = config.removesuffix(".json")
    if stem not in OPENCC_CONFIGS:
        raise ConfigError(
            f"unknown OpenCC conversion {config!r}",
            hint="use none or one of: "
            + ", ".join(OPENCC_CONFIGS)
            + " (s2tw: Simplified to Taiwan Traditional; t2s: Traditional to Simplified)",
        )
    return stem


@dataclass(frozen=True)
class UtteranceErrors:
    """One utterance's alignment against its reference, in words (WER) or characters (CER)."""

    substitutions: int
    deletions: int
    insertions: int
    ref_units: int

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions


def utterance_errors(reference: str, hypothesis: str, metric: Metric) -> UtteranceErrors:
    """Substitutions, deletions and insertions of one utterance, and its reference length.

    An empty reference makes every hypothesis unit an insertion (jiwer rejects it).
    """
    r_units, h_units = _units(reference, metric), _units(hypothesis, metric)
    if not r_units:
        return UtteranceErrors(0, 0, len(h_units), 0)
    out = jiwer.process_words(" ".join(r_units), " ".join(h_units))
    return UtteranceErrors(out.substitutions, out.deletions, out.insertions, len(r_units))


def aligned_units(reference: str, hypothesis: str, metric: Metric) -> list[tuple[str, str, str]]:
    """The edit alignment of one utterance, as `utterance_errors` counts it: runs of
    ("=" | "S" | "D" | "I", reference units, hypothesis units), units joined by a space for
    words and tokens, run together for characters."""
    r_units, h_units = _units(reference, metric), _units(hypothesis, metric)
    sep = "" if metric == "cer" else " "
    if not r_units or not h_units:
        return [
            (op, sep.join(r), sep.join(h))
            for op, r, h in (("D", r_units, []), ("I", [], h_units))
            if r or h
        ]
    out = jiwer.process_words(" ".join(r_units), " ".join(h_units))
    ops = {"equal": "=", "substitute": "S", "delete": "D", "insert": "I"}
    return [
        (
            ops[c.type],
            sep.join(r_units[c.ref_start_idx : c.ref_end_idx]),
            sep.join(h_units[c.hyp_start_idx : c.hyp_end_idx]),
        )
        for c in out.alignments[0]
    ]


def _errors(refs: list[str], hyps: list[str], metric: Metric) -> tuple[int, int]:
    """Total substitutions + deletions + insertions and reference length over the corpus.

    jiwer rejects empty references, so those count as all-insertion utterances here.
    """
    errors = units = 0
    pairs_r, pairs_h = [], []
    for r, h in zip(refs, hyps, strict=True):
        r_units = _units(r, metric)
        if not r_units:
            errors += len(_units(h, metric))
            continue
        units += len(r_units)
        pairs_r.append(r if metric == "wer" else " ".join(r_units))
        pairs_h.append(h if metric == "wer" else " ".join(_units(h, metric)))
    if pairs_r:
        # CER is computed as WER over space-joined characters so that both metrics share
        # one alignment code path; spaces themselves are not scored characters.
        out = jiwer.process_words(pairs_r, [h if h.strip() else "" for h in pairs_h])
        errors += out.substitutions + out.deletions + out.insertions
    return errors, units


def mixed_tokens(text: str) -> list[str]:
    """Tokens of code-switched text for MER: each Chinese (Han) character on its own, and
    each run of other non-space characters (an English word, a number) as one token.

    "我用iPhone拍照 ok" -> ["我", "用", "iPhone", "拍", "照", "ok"].
    """
    return _MIXED_TOKEN.findall(text)


# Han characters for a regex class: CJK Unified Ideographs, Extension A, compatibility
# ideographs, Extensions B and beyond.
HAN_CLASS = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
# A Han character, or a run of characters that are neither space nor Han.
_MIXED_TOKEN = re.compile(rf"[{HAN_CLASS}]|[^\s{HAN_CLASS}]+")
_SPACE_NEXT_TO_HAN = re.compile(rf"\s+(?=[{HAN_CLASS}])|(?<=[{HAN_CLASS}])\s+")


def _units(text: str, metric: Metric) -> list[str]:
    if metric == "wer":
        return text.split()
    if metric == "mer":
        return mixed_tokens(text)
    return [c for c in text if not c.isspace()]


def _build(name: NormalizerName, options: NormalizeOptions):
    if name == "none":
        return lambda s: s
    if name == "whisper_english":
        from transformers.models.whisper.english_normalizer import EnglishTextNormalizer

        english = EnglishTextNormalizer(_english_spelling())
        return lambda text: _join_digit_runs(english(_spaced_leading_zeros(text)))
    if name == "whisper_basic":
        from transformers.models.whisper.english_normalizer import BasicTextNormalizer

        return BasicTextNormalizer()
    if name == "chinese":
        return lambda text: _normalize_chinese(text, options)
    raise ValueError(f"unknown normalizer {name!r}")


# Whisper's English normaliser joins spelled digits ("eight four zero" -> "840") but leaves
# written ones apart ("8, 4, 0" -> "8 4 0"), and writes a lone digit 1 back as "one"
# ("7 3 0 1" -> "7 3 0 one"): the same digit string would score up to 300% WER. A run of
# single digits, "one" among them, is joined into one number as the spelled form is.
_DIGIT_RUN = re.compile(r"(?<!\S)(?:\d|one)(?: (?:\d|one))+(?!\S)")


# It also reads a written digit string as a number, dropping its leading zeros ("0351" ->
# "351"), while the spelled "zero three five one" keeps them ("0351"): the same string
# written two ways would differ. Written strings that start with 0 are spaced into digits
# first, which the join above puts back together, zeros kept, on both sides.
_LEADING_ZERO = re.compile(r"(?<![\d.,])0\d+(?![.,]?\d)")
_EACH_DIGIT = re.compile(r"\d")
DIGIT_MODES = ("numbers", "each")


def _spaced_leading_zeros(text: str) -> str:
    return _LEADING_ZERO.sub(lambda m: " ".join(m.group()), text)


def _join_digit_runs(text: str) -> str:
    return _DIGIT_RUN.sub(lambda m: m.group().replace("one", "1").replace(" ", ""), text)


# CJK punctuation with no NFKC half-width form, folded to the ASCII mark it stands for.
_CJK_PUNCT_TO_ASCII = str.maketrans(
    {
        "。": ".",
        "、": ",",
        "「": '"',
        "」": '"',
        "『": '"',
        "』": '"',
        "《": '"',
        "》": '"',
        "〈": '"',
        "〉": '"',
        "【": "[",
        "】": "]",
        "〔": "(",
        "〕": ")",
        "・": "-",
        "～": "~",
    }
)


def _normalize_chinese(text: str, options: NormalizeOptions = NormalizeOptions()) -> str:
    if options.numerals != "keep":
        text = _convert_numerals(text, options.numerals)
    kept = []
    for ch in text:
        is_punct = unicodedata.category(ch)[0] in "PS"
        if is_punct:
            if options.punctuation == "remove":
                continue
            if options.punctuation == "halfwidth":
                ch = unicodedata.normalize("NFKC", ch).translate(_CJK_PUNCT_TO_ASCII)
        else:
            # Full-width letters and digits (ＡＢＣ１２) are the same text as ABC12.
            ch = unicodedata.normalize("NFKC", ch)
        kept.append(ch.lower() if options.case == "lower" else ch)
    out = "".join(kept)
    if options.spaces == "remove":
        return "".join(out.split())
    if options.spaces == "cjk":
        return " ".join(_SPACE_NEXT_TO_HAN.sub("", out).split())
    return out


def _convert_numerals(text: str, to: str) -> str:
    """Chinese numerals to Arabic digits or back, by cn2an's sentence-level conversion."""
    import cn2an

    return cn2an.transform(text, "cn2an" if to == "arabic" else "an2cn")


@cache
def _english_spelling() -> dict[str, str]:
    path = resources.files("fitwhisper") / "assets" / "english_spelling.json"
    return json.loads(path.read_text(encoding="utf-8"))


@cache
def opencc_converter(config: str):
    """OpenCC's converter for a table name such as s2tw (one per table, reused)."""
    import opencc

    return opencc.OpenCC(f"{config}.json")
