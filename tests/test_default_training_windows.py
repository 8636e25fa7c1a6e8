"""Acceptance: a model trained with the default encoder input (mixed: trimmed batches, a
few at 30 s, and 3% of the items 30 s windows of several clips with timestamps) on real
English speech transcribes held-out clips the same on its own short window and on the 30 s
window other engines feed it, and a long file with pauses, silence and noise without text in
the silence or the noise, repeats or a lost window, and within a point of the error of a
model trained the standard way (every clip padded to 30 s). It also holds the fine-tuning
acceptance: the whole model, trained under bf16 mixed precision (torch autocasts to
bfloat16 on CPU; the fp32 path is the demo's and the Mandarin fine-tune's), lowers WER on
held-out clips as `fitwhisper evaluate FINETUNED MANIFEST --compare offline/tiny.en`
reports it.

The work (two fine-tunes of real tiny.en on digit strings, each scored, transcribed and
run on a long file) is tests/default_windows_run.py's; in a run of the suite it is computed
on an idle core from the start (tests/background.py), and this test checks what it found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.default_windows_run import run

pytestmark = pytest.mark.slow

WINDOW_TOLERANCE = 0.05  # short vs 30 s window: at most 3 of the 62 held-out digits apart
# The long-file target: within 1 point of the standard model. Without the windows
# of several clips (`--packed_window_share 0`) this run lost whole digit strings after a
# pause: 29.0% against 3.2% on a 2-core VM with AMX bf16 kernels, 17.7% against 8.1% on
# another; with them, 0.0%, 0.0%, 1.6% at seeds 0-2 against 3.2% and 1.6% for the standard
# model at seeds 0 and 2 (bench/small_run_long_form.py; bench/RESULTS-train-speed.md).
LONG_TARGET = 0.01
# Whatever the machine: under the error of a lost window (trimmed input alone skipped a
# whole 30 s window of the long file: 50%).
LONG_GUARD = 0.45


def test_default_training_works_on_both_windows_and_on_a_long_file(
    background_result, shared_data: Path, tmp_path: Path
) -> None:
    found = json.loads(background_result()) if background_result else run(shared_data, tmp_path)
    recorded = found["default_config"]["fitwhisper_encoder_input"]
    assert (recorded["mode"], recorded["full_window_share"]) == ("mixed", 0.05)
    assert recorded["packed_window_share"] > 0  # it trained on a window of several clips
    assert recorded["inference_window"] == "short", recorded["why"]
    assert "fitwhisper_encoder_input" not in found["standard_config"]

    full, short = found["full_window"], found["short_window"]
    same = sum(a == b for a, b in zip(full["texts"], short["texts"], strict=True))
    print(f"\ndefault model: WER {full['wer']:.3f} at 30 s, {short['wer']:.3f} on the short "
          f"window; {same} of {len(full['texts'])} transcripts identical")  # fmt: skip
    assert full["wer"] <= 0.1 and short["wer"] <= 0.1  # it learned the task

    # `fitwhisper evaluate FINETUNED MANIFEST --compare offline/tiny.en`: the fine-tune
    # against the weights it started from, scored alike (the English normaliser, both).
    cmp = found["comparison"]
    assert cmp["metric"] == "wer" and cmp["n_utterances"] == found["n_eval"]
    assert cmp["normalizer"].startswith("whisper_english")
    assert cmp["model"]["wer"] < cmp["baseline"]["wer"], cmp["table"]
    print(f"evaluate --compare:\n{cmp['table']}")

    assert abs(short["wer"] - full["wer"]) <= WINDOW_TOLERANCE
    # The model trained on 30 s windows records nothing, so auto keeps 30 s for it; forced
    # onto the short window it falls off the cliff the default's model does not have.
    assert found["cliff_wer"] > short["wer"] + 0.5

    mine, theirs = found["long_file"]["default"], found["long_file"]["standard"]
    print(f"long file: default {mine}\n           standard {theirs}")
    for r in (mine, theirs):
        assert r["in_quiet"] == {"silence": [], "noise": []}
        assert r["repeats"] == 0 and r["in_order"]
        assert r["clips_lost"] == 0 and r["error"] < LONG_GUARD
    assert mine["error"] <= theirs["error"] + LONG_TARGET

    # `fitwhisper transcribe` (the ct2 engine on CPU) follows the record too, word
    # timestamps included (each file's words in its clip and in order: checked by the run).
    if found["transcribed_wer"] is None:
        pytest.skip("faster-whisper is not installed: the ct2 engine's part is not checked")
    chosen = "encoded on their own length and 1 s (the model's training chose it)"
    assert chosen in found["transcribe_log"]
    assert found["transcribed_wer"] <= 0.1, found["transcribed_wer"]
