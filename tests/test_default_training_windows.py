"""Acceptance: a model trained with the default encoder input (mixed: trimmed batches, a
quarter at 30 s, and 3% of the items 30 s windows of several clips with timestamps) on real
English speech transcribes held-out clips the same on its own short window and on the 30 s
window other engines feed it, and a long file with pauses, silence and noise without text in
the silence or the noise, repeats or a lost window, and within a point of the error of a
model trained the standard way (every clip padded to 30 s). It also holds the fine-tuning
acceptance: the whole model, trained under bf16 mixed precision (torch autocasts to
bfloat16 on CPU; the fp32 path is the demo's and the Mandarin fine-tune's), lowers WER on
held-out clips as `fitwhisper evaluate FINETUNED MANIFEST --compare offline/tiny.en`
reports it.

Real tiny.en, digit strings of the shared Free Spoken Digit Dataset (tests/
digit_strings.py), 16 steps of 8 clips under bf16 autocast (24 steps before 2026-11-28:
the same checks passed at 16 on seeds 0-2, about 25 s sooner; the long file below). The
long file is bench/long_form_check.py's: the 16 held-out clips with 1 s pauses, 8 s of
digital silence and 8 s of white noise, decoded by Whisper's sequential long-form algorithm
(timestamps).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from tests.digit_strings import make_digit_strings

from fitwhisper.cli import main
from fitwhisper.config import TrainConfig

pytestmark = pytest.mark.slow

_BENCH = Path(__file__).resolve().parents[1] / "bench" / "long_form_check.py"
# bf16 autocast on a CPU without bf16 kernels (AVX-512 BF16 or AMX) runs oneDNN's emulation:
# on a 2-core AMD EPYC with AVX2 only (2026-12-07) the first step of this run took 280 s and
# the next 28 s, for 16 steps in the whole test before. There the run trains in fp32, and the
# bf16 fine-tuning acceptance is checked where the CPU has the kernels.
PRECISION = ["--bf16"] if torch.ops.mkldnn._is_mkldnn_bf16_supported() else []
WINDOW_TOLERANCE = 0.05  # short vs 30 s window: at most 3 of the 62 held-out digits apart
# The long-file target: within 1 point of the standard model. Without the windows
# of several clips (`--packed_window_share 0`) this run lost whole digit strings after a
# pause: 29.0% against 3.2% on a 2-core VM with AMX bf16 kernels, 17.7% against 8.1% on
# another; with them, 0.0%, 0.0%, 1.6% at seeds 0-2 against 3.2% and 1.6% for the standard
# model at seeds 0 and 2 (bench/small_run_long_form.py; bench/RESULTS-train-speed.md). This
# test at 16 steps (2026-11-28): 1.6%, 0.0%, 0.0% at seeds 0-2 against 3.2% for the standard
# model at each (at 24 steps: 0.0%, 0.0%, 1.6% against 3.2%, 4.8%, 1.6%).
LONG_TARGET = 0.01
# Whatever the machine: under the error of a lost window (trimmed input alone skipped a
# whole 30 s window of the long file: 50%).
LONG_GUARD = 0.45


def _long_form_check():
    spec = importlib.util.spec_from_file_location("long_form_check", _BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["long_form_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _train(data, out: Path, *extra: str) -> Path:
    code = main(
        ["train", "--model", "offline/tiny.en", "--train_manifest", str(data.train_manifest),
         "--output_dir", str(out), "--max_steps", "16", "--per_device_train_batch_size", "8",
         "--learning_rate", "5e-5", "--warmup_steps", "1", "--logging_steps", "4",
         "--save_strategy", "no", "--report_to", "none", "--seed", "0", *PRECISION, "-q",
         *extra]
    )  # fmt: skip
    assert code == 0
    return out / "final"


def _held_out(model: Path, data, window: str, out: Path) -> tuple[float, list[str]]:
    # whisper_basic keeps spoken digits apart (the English normaliser joins them).
    code = main(["evaluate", str(model), str(data.eval_manifest), "--encoder_window", window,
                 "--normalizer", "whisper_basic", "--generation_max_length", "24",
                 "--output_dir", str(out), "-q"])  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return metrics["wer"], [r["hypothesis"] for r in rows]


def _run_scored(folder: Path) -> tuple[float, list[str]]:
    """The run's own scoring of its held-out clips (RUN/eval/ at 30 s, RUN/eval/short_window/),
    re-scored with whisper_basic, which keeps spoken digits apart (the English normaliser
    the run uses joins them)."""
    from fitwhisper.evaluate import make_scorer
    from fitwhisper.scoring import score

    rows = [json.loads(line) for line in (folder / "predictions.jsonl").read_text().splitlines()]
    hyps = [r["hypothesis"] for r in rows]
    metric, norm = make_scorer("en", normalizer="whisper_basic")
    return score([r["reference"] for r in rows], hyps, metric, norm).normalized, hyps


def _long_file(model: Path, data) -> dict:
    from fitwhisper.data.audio import load_audio
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import make_scorer
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    lfc = _long_form_check()
    rows = load_manifest(data.eval_manifest).rows
    long = lfc.build_long_file([load_audio(r.audio) for r in rows], [r.text for r in rows])
    metric, norm = make_scorer("en", normalizer="whisper_basic")
    # Greedy, as bench/long_form_check.py decodes it.
    opts = TranscribeOptions(language="en", beam_size=1, vad=False, batch_size=1, mode="sequential")
    (t,) = TransformersEngine(str(model), opts, "cpu").transcribe(["long"], [long.audio])
    return lfc.judge(long, t.segments, metric, norm)


def _transcribed(model: Path, data, out: Path, capsys) -> float:
    """`fitwhisper transcribe` on the held-out clips with word timestamps: their WER; the
    engine's line must say the short window was used, and every word lie in its clip."""
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import make_scorer
    from fitwhisper.scoring import score

    pytest.importorskip("faster_whisper")
    rows = load_manifest(data.eval_manifest).rows
    capsys.readouterr()
    # --no_vad: Silero hears no speech in one 1.5 s clip (004), at either window and in
    # either engine, so the file would get no text whatever the window.
    code = main(["transcribe", "--model", str(model), *(str(r.audio) for r in rows),
                 "--timestamps", "word", "--no_vad", "--output_dir", str(out),
                 "--output_format", "json", "-q"])  # fmt: skip
    assert code == 0
    assert "encoded on their own length and 1 s (the model's training chose it)" in (
        capsys.readouterr().err
    )
    texts = []
    for r in rows:
        got = json.loads((out / f"{Path(r.audio).stem}.json").read_text())
        words = [w for s in got["segments"] for w in s["words"]]
        assert words and all(0 <= w["start"] <= w["end"] <= got["duration"] for w in words)
        assert [w["start"] for w in words] == sorted(w["start"] for w in words)
        texts.append(got["text"])
    metric, norm = make_scorer("en", normalizer="whisper_basic")
    return score([r.text for r in rows], texts, metric, norm).normalized


def _compare_with_zero_shot(model: Path, data, out: Path, capsys) -> None:
    """`fitwhisper evaluate MODEL MANIFEST --compare offline/tiny.en`: the fine-tune against
    the weights it started from, scored alike (the English normaliser, both models)."""
    # 24 tokens hold five digits and the prompt; they also cut zero-shot runaways short.
    code = main(
        ["evaluate", str(model), str(data.eval_manifest), "--compare", "offline/tiny.en",
         "--generation_max_length", "24", "--output_dir", str(out)]
    )  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    cmp = json.loads((out / "comparison.json").read_text())
    assert cmp["metric"] == "wer" and cmp["n_utterances"] == data.n_eval
    assert cmp["normalizer"].startswith("whisper_english")
    assert cmp["model"]["wer"] < cmp["baseline"]["wer"], table
    print(f"\nevaluate --compare:\n{table}")


def test_default_training_works_on_both_windows_and_on_a_long_file(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_digit_strings(
        shared_data / "fsdd-train", tmp_path / "digits", n_train=48, n_eval=16
    )
    # With held-out clips the run scores both windows and records which auto uses.
    # (--no-score_before: the starting weights' figure is not this test's.)
    default = _train(data, tmp_path / "default", "--eval_manifest", str(data.eval_manifest),
                     "--generation_max_length", "24", "--no-score_before")  # fmt: skip
    standard = _train(data, tmp_path / "standard", "--encoder_input", "full")
    recorded = json.loads((default / "config.json").read_text())["fitwhisper_encoder_input"]
    assert recorded["mode"] == "mixed"
    assert recorded["full_window_share"] == TrainConfig.full_window_share
    assert recorded["packed_window_share"] > 0  # it trained on a window of several clips
    assert recorded["inference_window"] == "short", recorded["why"]
    assert "fitwhisper_encoder_input" not in json.loads((standard / "config.json").read_text())

    full_wer, full_text = _run_scored(default.parent / "eval")
    short_wer, short_text = _run_scored(default.parent / "eval" / "short_window")
    same = sum(a == b for a, b in zip(full_text, short_text, strict=True))
    print(f"\ndefault model: WER {full_wer:.3f} at 30 s, {short_wer:.3f} on the short window; "
          f"{same} of {len(full_text)} transcripts identical")  # fmt: skip
    assert full_wer <= 0.1 and short_wer <= 0.1  # it learned the task
    _compare_with_zero_shot(default, data, tmp_path / "compare", capsys)
    assert abs(short_wer - full_wer) <= WINDOW_TOLERANCE
    # The model trained on 30 s windows records nothing, so auto keeps 30 s for it; forced
    # onto the short window it falls off the cliff the default's model does not have.
    cliff_wer, _ = _held_out(standard, data, "short", tmp_path / "ev-cliff")
    assert cliff_wer > short_wer + 0.5

    # `fitwhisper transcribe` (the ct2 engine on CPU) follows the record too, word
    # timestamps included.
    ct2_wer = _transcribed(default, data, tmp_path / "transcribed", capsys)
    assert ct2_wer <= 0.1, ct2_wer

    mine, theirs = _long_file(default, data), _long_file(standard, data)
    print(f"long file: default {mine}\n           standard {theirs}")
    for r in (mine, theirs):
        assert r["in_quiet"] == {"silence": [], "noise": []}
        assert r["repeats"] == 0 and r["in_order"]
        assert r["clips_lost"] == 0 and r["error"] < LONG_GUARD
    assert mine["error"] <= theirs["error"] + LONG_TARGET
