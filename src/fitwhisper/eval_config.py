"""`EvalConfig`: how a model is scored by generation (metric, normaliser, scripts,
batching), the options of `fitwhisper evaluate` and of every score a run reports. Kept out
of config.py, which holds the training options; `fitwhisper.config` re-exports it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class EvalConfig:
    """How to score a model by generation: metric, normaliser, scripts, batching."""

    language: str | None = field(
        default=None,
        metadata={
            "help": "Language of the speech (multilingual models), e.g. zh; a row's own "
            "language column wins. Also picks the metric and normaliser."
        },
    )
    task: Literal["transcribe", "translate"] = field(
        default="transcribe", metadata={"help": "transcribe, or translate into English."}
    )
    metric: Literal["wer", "cer", "mer"] | None = field(
        default=None,
        metadata={
            "help": "Default: CER for languages written without spaces (Chinese, Japanese, "
            "Thai, ...), WER otherwise. mer: mixed error rate for code-switched text, each "
            "Chinese character and each other word (English, numbers) one token; CER and MER "
            "are reported together."
        },
    )
    normalizer: Literal["auto", "whisper_english", "whisper_basic", "chinese", "none"] = field(
        default="auto",
        metadata={
            "help": "Text normalisation applied to reference and hypothesis alike before "
            "scoring. auto: whisper_english for English, chinese (punctuation and spaces "
            "removed) for languages scored by CER, whisper_basic otherwise; none: texts as "
            "written."
        },
    )
    opencc: str | None = field(
        default=None,
        metadata={
            "help": "OpenCC conversion applied to both sides before normalising: none, or an "
            "OpenCC table such as s2tw (Simplified to Taiwan Traditional), t2s, s2twp.",
            "metavar": "CONFIG",
        },
    )
    # The chinese normaliser's options, stated in every report with the normaliser.
    punctuation: Literal["remove", "halfwidth", "keep"] = field(
        default="remove",
        metadata={
            "help": "chinese normaliser: remove: full- and half-width punctuation dropped; "
            "halfwidth: kept, full-width and CJK marks folded to ASCII (，=, 。=.); keep: as "
            "written."
        },
    )
    spaces: Literal["cjk", "remove", "keep"] = field(
        default="cjk",
        metadata={
            "help": "chinese normaliser: cjk: removed next to Chinese characters, one kept "
            "between other words; remove: all; keep: as written."
        },
    )
    case: Literal["lower", "keep"] = field(
        default="lower",
        metadata={
            "help": "chinese normaliser: lower: Latin letters lower-cased; keep: as written."
        },
    )
    numerals: Literal["keep", "arabic", "chinese"] = field(
        default="keep",
        metadata={
            "help": "chinese normaliser: keep: as written; arabic: Chinese numerals to digits "
            "(二十九 -> 29); chinese: digits to Chinese numerals. Applied to both sides."
        },
    )
    digits: Literal["numbers", "each"] = field(
        default="numbers",
        metadata={
            "help": "How digit strings count in WER. numbers (default, as Whisper's English "
            "normaliser and published figures count them): a run of digits is one word "
            '("zero three five one" and "0351" are both 0351); each: every digit is a '
            "word, for number domains (phone numbers, codes), so one wrong digit of eight "
            "costs one word in eight, not the whole number. Applied to both sides."
        },
    )
    output_script: str | None = field(
        default=None,
        metadata={
            "help": "Convert the model's output into this Chinese script before scoring: none, "
            "traditional (OpenCC s2tw, for zh-TW), simplified (t2s), or an OpenCC table such "
            "as s2twp. Unlike --opencc, references stay as written.",
            "metavar": "SCRIPT",
        },
    )
    expected_script: Literal["auto", "traditional", "simplified", "none"] = field(
        default="auto",
        metadata={
            "help": "Report the share of output Han characters valid in this script. auto: "
            "the --output_script, else the script of the references (none for text without "
            "script-specific characters)."
        },
    )
    batch_size: int = field(default=8, metadata={"min": 1, "help": "Clips per generate call."})
    encoder_window: Literal["auto", "full", "short"] = field(
        default="auto",
        metadata={
            "help": "The encoder's input. full: clips padded to 30 s. short: to the batch's "
            "longest clip. auto: short for a model trained with --encoder_input trimmed or "
            "mixed (it records it), else full (30 s-trained models break on short input)."
        },
    )
    generation_max_length: int = field(
        default=225,
        metadata={
            "min": 1,
            "max": 448,
            "why": "Whisper's decoder holds 448 tokens",
            "help": "Longest transcript, in tokens.",
        },
    )
    beam_size: int = field(
        default=1,
        metadata={
            "aliases": ["--beam-size"],
            "min": 1,
            "help": "1: greedy, as training's scores and every export's re-scoring decode. 5: "
            "beam search, as faster-whisper and openai-whisper's command line decode by "
            "default; slower.",
        },
    )
    max_samples: int | None = field(
        default=None,
        metadata={"min": 1, "none": "all", "help": "Score only the first N usable rows."},
    )
