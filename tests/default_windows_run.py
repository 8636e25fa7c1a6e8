"""The work behind tests/test_default_training_windows.py, apart from its checks: two
fine-tunes of real tiny.en on digit strings (the default encoder input and the standard 30 s
padding), then each scored, transcribed and run on a long file. `run` returns what the test
checks; in a run of the suite it is computed on an idle core from the start
(tests/background.py), else in the test's own process.

Real tiny.en, digit strings of the shared Free Spoken Digit Dataset (tests/
digit_strings.py), 24 steps of 8 clips under bf16 autocast. The long file is
bench/long_form_check.py's: the 16 held-out clips with 1 s pauses, 8 s of digital silence
and 8 s of white noise, decoded by Whisper's sequential long-form algorithm (timestamps).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

from tests.digit_strings import make_digit_strings

from fitwhisper.cli import main

_BENCH = Path(__file__).resolve().parents[1] / "bench" / "long_form_check.py"


def run(shared_data: Path, work: Path) -> dict:
    """Both fine-tunes and everything the test checks of them, as JSON-ready values."""
    data = make_digit_strings(shared_data / "fsdd-train", work / "digits", n_train=48, n_eval=16)
    # With held-out clips the run scores both windows and records which auto uses.
    # (--no-score_before: the starting weights' figure is not this test's.)
    default = _train(data, work / "default", "--eval_manifest", str(data.eval_manifest),
                     "--generation_max_length", "24", "--no-score_before")  # fmt: skip
    standard = _train(data, work / "standard", "--encoder_input", "full")
    full_wer, full_text = _run_scored(default.parent / "eval")
    short_wer, short_text = _run_scored(default.parent / "eval" / "short_window")
    transcribed_wer, transcribe_log = _transcribed(default, data, work / "transcribed")
    return {
        "n_eval": data.n_eval,
        "default_config": _config(default),
        "standard_config": _config(standard),
        "full_window": {"wer": full_wer, "texts": full_text},
        "short_window": {"wer": short_wer, "texts": short_text},
        "comparison": _compare_with_zero_shot(default, data, work / "compare"),
        # The model trained on 30 s windows, forced onto the short window.
        "cliff_wer": _held_out(standard, data, "short", work / "ev-cliff"),
        "transcribed_wer": transcribed_wer,
        "transcribe_log": transcribe_log,
        "long_file": {"default": _long_file(default, data), "standard": _long_file(standard, data)},
    }


def _config(model: Path) -> dict:
    return json.loads((model / "config.json").read_text())


def _train(data, out: Path, *extra: str) -> Path:
    code = main(
        ["train", "--model", "offline/tiny.en", "--train_manifest", str(data.train_manifest),
         "--output_dir", str(out), "--max_steps", "24", "--per_device_train_batch_size", "8",
         "--learning_rate", "5e-5", "--warmup_steps", "1", "--logging_steps", "4",
         "--save_strategy", "no", "--report_to", "none", "--seed", "0", "--bf16", "-q",
         *extra]
    )  # fmt: skip
    assert code == 0, f"train {extra} exited {code}"
    return out / "final"


def _held_out(model: Path, data, window: str, out: Path) -> float:
    # whisper_basic keeps spoken digits apart (the English normaliser joins them).
    code = main(["evaluate", str(model), str(data.eval_manifest), "--encoder_window", window,
                 "--normalizer", "whisper_basic", "--generation_max_length", "24",
                 "--output_dir", str(out), "-q"])  # fmt: skip
    assert code == 0, f"evaluate --encoder_window {window} exited {code}"
    return json.loads((out / "metrics.json").read_text())["wer"]


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


def _long_form_check():
    spec = importlib.util.spec_from_file_location("long_form_check", _BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["long_form_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


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
    opts = TranscribeOptions(language="en", vad=False, batch_size=1, mode="sequential")
    (t,) = TransformersEngine(str(model), opts, "cpu").transcribe(["long"], [long.audio])
    return lfc.judge(long, t.segments, metric, norm)


def _transcribed(model: Path, data, out: Path) -> tuple[float | None, str]:
    """`fitwhisper transcribe` on the held-out clips with word timestamps: their WER (None
    without faster-whisper) and what it logged. Each file's words must lie in its clip, in
    order."""
    from fitwhisper.data.manifest import load_manifest
    from fitwhisper.evaluate import make_scorer
    from fitwhisper.scoring import score

    if importlib.util.find_spec("faster_whisper") is None:
        return None, ""
    rows = load_manifest(data.eval_manifest).rows
    logged = io.StringIO()
    # --no_vad: Silero hears no speech in one 1.5 s clip (004), at either window and in
    # either engine, so the file would get no text whatever the window.
    with contextlib.redirect_stderr(logged):
        code = main(["transcribe", "--model", str(model), *(str(r.audio) for r in rows),
                     "--timestamps", "word", "--no_vad", "--output_dir", str(out),
                     "--output_format", "json", "-q"])  # fmt: skip
    assert code == 0, f"transcribe exited {code}: {logged.getvalue()}"
    texts = []
    for r in rows:
        got = json.loads((out / f"{Path(r.audio).stem}.json").read_text())
        words = [w for s in got["segments"] for w in s["words"]]
        assert words and all(0 <= w["start"] <= w["end"] <= got["duration"] for w in words), r
        assert [w["start"] for w in words] == sorted(w["start"] for w in words), r
        texts.append(got["text"])
    metric, norm = make_scorer("en", normalizer="whisper_basic")
    return score([r.text for r in rows], texts, metric, norm).normalized, logged.getvalue()


def _compare_with_zero_shot(model: Path, data, out: Path) -> dict:
    """`fitwhisper evaluate MODEL MANIFEST --compare offline/tiny.en`: the fine-tune against
    the weights it started from, scored alike (the English normaliser, both models); its
    comparison.json with the table it printed."""
    printed = io.StringIO()
    # 24 tokens hold five digits and the prompt; they also cut zero-shot runaways short.
    with contextlib.redirect_stdout(printed):
        code = main(
            ["evaluate", str(model), str(data.eval_manifest), "--compare", "offline/tiny.en",
             "--generation_max_length", "24", "--output_dir", str(out)]
        )  # fmt: skip
    assert code == 0, f"evaluate --compare exited {code}"
    return {**json.loads((out / "comparison.json").read_text()), "table": printed.getvalue()}
