"""A transcription stopped by SIGTERM keeps every transcript it finished, each whole."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO, write_tone

FILES = 40  # more than one ct2 group (batch 2 x 16 = 32 files)
FAST = ["--no_temperature_fallback", "--threads", "1", "--max_new_tokens", "24", "--no_vad"]


def test_sigterm_keeps_each_finished_transcript_whole(tiny_whisper_dir: Path, tmp_path: Path):
    clips = [write_tone(tmp_path / "in" / f"c{i:02d}.wav", 1.0, freq=200 + 17 * i)
             for i in range(FILES)]  # fmt: skip
    out = tmp_path / "out"
    # Converted here, where transformers is loaded already, not in the child.
    from fitwhisper.models.ct2_export import cached_ct2
    from fitwhisper.models.resolve import resolve_model

    ct2 = cached_ct2(resolve_model(str(tiny_whisper_dir)), "int8")
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "fitwhisper", "transcribe", "--model", str(ct2),
         "--engine", "ct2", "--batch_size", "2", "--output_format", "json", "--output_dir",
         str(out), *FAST, *map(str, clips)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(out.glob("*.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    before = {p.name for p in out.glob("*.json")}
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)

    assert before, f"no transcript appeared before the run ended:\n{err}"
    assert proc.returncode == 143, err
    written = sorted(out.iterdir())
    names = {p.name for p in written}
    assert before <= names and len(names) < FILES  # stopped part way, nothing lost
    assert all(p.suffix == ".json" for p in written)  # no temporary file left behind
    for p in written:
        assert json.loads(p.read_text())["duration"] == 1.0  # whole
    (line,) = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert re.fullmatch(
        rf"interrupted \(SIGTERM\): {len(names)} of {FILES} files transcribed, their "
        rf"transcripts whole in {re.escape(str(out))}; the rest not",
        line,
    )
