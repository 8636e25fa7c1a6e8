"""Whisper's fixed facts live in `fitwhisper.whisper_facts` only, and its language cleaning
reads every form the code meets."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fitwhisper import whisper_facts
from fitwhisper.whisper_facts import language_code, token_text

SRC = Path(__file__).resolve().parents[1] / "src" / "fitwhisper"
HOME = SRC / "whisper_facts.py"

# What a second copy looks like, in any module but the home (the AST is read, so comments,
# docstrings and help text that say "30 s" or "16 kHz" are not flagged):
# 1. a constant named like one of the facts, at any level: SAMPLE_RATE_HZ, HOP_LENGTH,
#    FRAMES_PER_S, MEL_FRAMES_PER_S, WINDOW_S, STANDARD_WINDOW_S, WINDOW_SAMPLES, FULL_FRAMES,
#    TIMESTAMP_S, N_TIMESTAMP_TOKENS, MAX_SOURCE_POSITIONS, ... (names in capitals only:
#    a parameter `window_s` is a value passed in, not a fact);
FACT_NAME = re.compile(
    r"^_?(\w+_)?(SAMPLE_RATE|SAMPLING_RATE|HOP_LENGTH|FRAMES_PER_SECOND|FRAMES_PER_S"
    r"|WINDOW_S|WINDOW_SECONDS|WINDOW_SAMPLES|WINDOW_FRAMES|FULL_FRAMES|N_FRAMES|N_SAMPLES"
    r"|TIMESTAMP_S|TIMESTAMP_SECONDS|TIMESTAMP_STEP|TIMESTAMP_TOKENS|SOURCE_POSITIONS"
    r"|ENCODER_POSITIONS)(_HZ|_S)?$"
)
# 2. the numbers that mean nothing else here: 16 kHz and the window's 480,000 samples
#    anywhere in code; 3000 (the window's frames) and 1500 (its encoder positions) where
#    they cut, compare or define (a slice, a comparison, the value of an assignment, a
#    dict entry or a keyword argument); elsewhere (a positional argument, a sum) they may
#    count other things. A copy of 30 s or of 100 frames/s under a new name is not told
#    apart from other durations and counts: review catches those;
ANYWHERE = {16_000, 480_000}
WHERE_THEY_CUT = {3000, 1500}
# 3. the language-token cleaning written out again: `.strip("<|>")`, `.removeprefix("<|")`,
#    `.removesuffix("|>")`, or a function of its own named language_code or token_text.
CLEANING_CALLS = {("strip", "<|>"), ("removeprefix", "<|"), ("removesuffix", "|>")}
CLEANERS = {"language_code", "token_text"}


def _number(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    return None


def second_copies(path: Path) -> list[str]:
    """Each place in `path` that defines one of Whisper's facts again, as `file:line: what`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(SRC.parent)
    found = []
    cutting = set()
    for node in ast.walk(tree):
        defining = (ast.Slice, ast.Compare, ast.Assign, ast.AnnAssign, ast.Dict, ast.keyword)
        if isinstance(node, defining):
            cutting |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name) and name.id.isupper() and FACT_NAME.match(name.id):
                    found.append(f"{where}:{node.lineno}: defines {name.id}")
        value = _number(node)
        if value in ANYWHERE or (value in WHERE_THEY_CUT and id(node) in cutting):
            found.append(f"{where}:{node.lineno}: the number {value}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and (node.func.attr, node.args[0].value) in CLEANING_CALLS
        ):
            found.append(f"{where}:{node.lineno}: .{node.func.attr}({node.args[0].value!r})")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in CLEANERS:
            found.append(f"{where}:{node.lineno}: its own {node.name}")
    return found


def test_no_module_but_the_home_defines_a_fact_again() -> None:
    copies = [c for p in sorted(SRC.rglob("*.py")) if p != HOME for c in second_copies(p)]
    assert copies == [], "import these from fitwhisper.whisper_facts instead:\n" + "\n".join(copies)


def test_the_check_finds_each_kind_of_copy(tmp_path: Path) -> None:
    """The check above fails on what it is meant to catch, and only on that."""
    module = SRC / "_copies_for_the_test.py"
    text = (
        "SAMPLE_RATE_HZ = 16_000\n"
        "class Runner:\n    WINDOW_S = 30\n"
        "def f(audio, feats, lang):\n"
        "    n = audio.size / 16000\n"
        "    x = feats[..., :3000]\n"
        "    rows = [0] * 3000\n"  # an assignment's value: flagged, as `N = 3000` would be
        "    print(3000, 1500, 30, 100)\n"  # counts outside a cut: not flagged
        "    cfg = {'max_source_positions': 1500}\n"
        '    return lang.strip("<|>"), lang.strip(), "30 s and 16 kHz"\n'
        "def language_code(token):\n    return token\n"
    )
    try:
        module.write_text(text, encoding="utf-8")
        found = [line.split(": ", 1)[1] for line in second_copies(module)]
    finally:
        module.unlink()
    assert sorted(found) == sorted(
        [
            "defines SAMPLE_RATE_HZ",
            "the number 16000",
            "defines WINDOW_S",
            "the number 16000",
            "the number 3000",
            "the number 3000",
            "the number 1500",
            ".strip('<|>')",
            "its own language_code",
        ]
    )


def test_the_facts_agree_with_each_other() -> None:
    f = whisper_facts
    assert f.SAMPLE_RATE == 16_000 and f.HOP_LENGTH == 160 and f.FRAMES_PER_SECOND == 100
    assert (f.WINDOW_SECONDS, f.WINDOW_SAMPLES, f.WINDOW_FRAMES) == (30.0, 480_000, 3000)
    assert f.ENCODER_POSITIONS == 1500 and f.TIMESTAMP_TOKENS == 1501


def test_the_facts_match_transformers_whisper_defaults() -> None:
    """What transformers' own Whisper classes assume, where they state it."""
    from transformers import WhisperConfig, WhisperFeatureExtractor

    fe = WhisperFeatureExtractor()
    assert (fe.sampling_rate, fe.hop_length) == (
        whisper_facts.SAMPLE_RATE,
        whisper_facts.HOP_LENGTH,
    )
    assert (fe.n_samples, fe.nb_max_frames) == (
        whisper_facts.WINDOW_SAMPLES,
        whisper_facts.WINDOW_FRAMES,
    )
    assert WhisperConfig().max_source_positions == whisper_facts.ENCODER_POSITIONS


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ("<|zh|>", "zh"),
        ("zh", "zh"),
        (" <|EN|> ", "en"),
        ("chinese", "zh"),
        ("Mandarin", "zh"),  # an alias transformers knows
        ("<|yue|>", "yue"),
        ("xx", "xx"),  # unknown: bare, for the caller to refuse
        ("", ""),
    ],
)
def test_language_code_reads_every_form(given: str, code: str) -> None:
    assert language_code(given) == code


def test_token_text_bares_any_special_token() -> None:
    assert token_text("<|transcribe|>") == "transcribe"
    assert token_text("<|0.02|>") == "0.02"
    assert token_text("en") == "en"
