"""`train --check sample:N`: which rows the data check decodes (N drawn at random, the same
in every run on the same data) and what it reads of the others: their headers only. What a
header cannot show is checked when training loads the clip (data/late_check.py).
"""

from __future__ import annotations

import random
from pathlib import Path

from fitwhisper.data.audio import AudioDecodeError, probe_audio
from fitwhisper.data.clip_facts import AudioFacts, Problem, span_past_end
from fitwhisper.data.manifest import Row
from fitwhisper.errors import ConfigError, DataError

SAMPLE_SEED = 0  # the rows decoded are drawn from it alone


def sampled_rows(rows: int, size: int) -> frozenset[int]:
    """The rows (positions) `--check sample:N` decodes: `size` of `rows` drawn at random,
    the same ones in every run on the same data."""
    if size >= rows:
        return frozenset(range(rows))
    return frozenset(random.Random(SAMPLE_SEED).sample(range(rows), size))


def sample_size(check: str) -> int | None:
    """`--check`'s N for `sample:N`, None for `full`.

    Raises:
        ConfigError: anything else.
    """
    if check == "full":
        return None
    kind, _, count = check.partition(":")
    if kind == "sample" and count.isdigit() and int(count) > 0:
        return int(count)
    raise ConfigError(
        f"--check {check!r} is neither full nor sample:N",
        hint="pass --check full (decode every clip) or --check sample:N with N a positive "
        "number of rows to decode, such as sample:1000",
    )


def probe_facts(row: Row) -> AudioFacts:
    """One clip's header (sample rate, channels, duration), for a row `--check sample:N`
    does not decode. What only its samples show (silence, NaN, damage past the header) is
    checked when training loads it (data/late_check.py)."""
    if row.audio is None:
        return AudioFacts(decoded=False)
    if isinstance(row.audio, Path) and not row.audio.is_file():
        return AudioFacts(Problem("missing_file", f"{row.audio} not found"), decoded=False)
    try:
        info = probe_audio(row.audio)
    except AudioDecodeError as e:
        return AudioFacts(Problem("undecodable_audio", e.message), decoded=False)
    except DataError as e:
        return AudioFacts(Problem("missing_file", e.message), decoded=False)
    duration, past_end = info.duration_s, None
    if row.offset_s is not None:
        past_end = span_past_end(row, info.duration_s)
        rest = max(info.duration_s - row.offset_s, 0.0)
        duration = rest if row.duration_s is None else min(row.duration_s, rest)
    return AudioFacts(
        sample_rate_hz=info.sample_rate_hz,
        channels=info.channels,
        duration_s=duration,
        span_past_end=past_end,
        decoded=False,
    )
