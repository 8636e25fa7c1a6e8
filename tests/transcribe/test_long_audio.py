"""Real speech, real weights: a 5-minute file with silence and noise inside it (timestamps
and the hallucination guard), and an export re-scored."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import soundfile

from fitwhisper.cli import main

pytestmark = pytest.mark.slow

SR = 16_000
GAP_S = 0.4
SILENCE_S = (30.0, 30.0)  # (silence, noise) seconds, laid in the middle of the file


def _sentences(shared_data: Path, start: int, n: int) -> list[dict]:
    folder = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    picked = [r for r in rows if r["kind"] == "sentence"][start : start + n]
    return [dict(r, audio=str(folder / r["audio"])) for r in picked]


@pytest.fixture(scope="module")
def long_file(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """~5 min: 46 read sentences with short gaps, 30 s of silence and 30 s of noise after
    the first half. Returns (path, rows, (start_s, end_s) of the non-speech stretch)."""
    from fitwhisper.data.audio import load_audio

    rows = _sentences(shared_data, 100, 46)
    gap = np.zeros(int(GAP_S * SR), np.float32)
    rng = np.random.default_rng(0)
    parts, t, quiet = [], 0.0, None
    for i, r in enumerate(rows):
        if i == len(rows) // 2:
            silence = np.zeros(int(SILENCE_S[0] * SR), np.float32)
            noise = (0.05 * rng.standard_normal(int(SILENCE_S[1] * SR))).astype(np.float32)
            quiet = (t, t + sum(SILENCE_S))
            parts += [silence, noise]
            t += sum(SILENCE_S)
        audio = load_audio(r["audio"])
        parts += [audio, gap]
        t += (len(audio) + len(gap)) / SR
    path = tmp_path_factory.mktemp("long") / "meeting.flac"
    soundfile.write(str(path), np.concatenate(parts), SR)
    return path, rows, quiet


def _cues(srt: str) -> list[tuple[float, float, str]]:
    def secs(ts: str) -> float:
        h, m, s = ts.replace(",", ".").split(":")
        return 3600 * int(h) + 60 * int(m) + float(s)

    cues = []
    for block in srt.strip().split("\n\n"):
        lines = block.splitlines()
        start, end = lines[1].split(" --> ")
        cues.append((secs(start), secs(end), " ".join(lines[2:])))
    return cues


@pytest.fixture(scope="module")
def short_clip_cer(long_file, tmp_path_factory: pytest.TempPathFactory) -> float:
    """CER of the long file's sentences transcribed one clip each (the same engine)."""
    _, rows, _ = long_file
    out = tmp_path_factory.mktemp("short")
    assert main(["transcribe", "--model", "offline/base", "--language", "zh",
                 *[r["audio"] for r in rows], "--output_dir", str(out)]) == 0  # fmt: skip
    texts = [(out / f"{Path(r['audio']).stem}.txt").read_text() for r in rows]
    return _cer(rows, "".join(texts))


def _cer(rows: list[dict], text: str) -> float:
    from fitwhisper.evaluate import make_scorer
    from fitwhisper.scoring import score

    metric, norm = make_scorer("zh", opencc="t2s")  # base writes either script
    return score(["".join(r["text"] for r in rows)], [text], metric, norm).normalized


@pytest.mark.parametrize("mode", ["auto", "sequential"])
def test_five_minute_file_gives_ordered_subtitles_scoring_like_short_clips(
    mode: str, long_file, short_clip_cer: float, tmp_path: Path
) -> None:
    path, rows, (quiet_start, quiet_end) = long_file
    duration = soundfile.info(str(path)).duration
    assert duration >= 300
    out = tmp_path / "out"
    code = main(["transcribe", "--model", "offline/base", "--language", "zh", str(path),
                 "--mode", mode, "--output_dir", str(out), "--output_format", "srt,json"]
    )  # fmt: skip
    assert code == 0
    cues = _cues((out / "meeting.srt").read_text())

    # Timestamps increase, stay within the audio, and cover it from start to end.
    assert all(s < e for s, e, _ in cues)
    assert all(a[0] <= b[0] and a[1] <= b[1] + 1e-3 for a, b in zip(cues, cues[1:], strict=False))
    assert cues[0][0] < 5.0 and duration - 15.0 < cues[-1][1] <= duration + 1e-3

    # No runaway repetition: nothing (or next to nothing) written over silence and noise,
    # no cue repeated three times in a row, no cue that compresses like a loop. (In batched
    # mode a cue may span the pause, from the speech before it to the speech after it.)
    quiet_text = "".join(t for s, e, t in cues if quiet_start + 1 < s and e < quiet_end - 1)
    assert len(quiet_text) <= 10, quiet_text
    texts = [t for _, _, t in cues]
    assert not any(a == b == c for a, b, c in zip(texts, texts[1:], texts[2:], strict=False))
    for t in texts:
        data = t.encode()
        assert len(data) < 40 or len(data) / len(zlib.compress(data)) < 2.4, t

    # The text scores close to the same sentences transcribed one clip at a time.
    long_cer = _cer(rows, json.loads((out / "meeting.json").read_text())["text"])
    print(f"--mode {mode}: CER long file {100 * long_cer:.2f}%, "
          f"same sentences as clips {100 * short_clip_cer:.2f}%")  # fmt: skip
    assert long_cer <= short_clip_cer + 0.03
