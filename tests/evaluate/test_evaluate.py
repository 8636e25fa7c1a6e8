"""Evaluation by generation: decoding of Trainer output, scoring, the files it writes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fitwhisper.cli import main
from fitwhisper.config import DataConfig
from fitwhisper.evaluate import (
    Comparison,
    EvalResult,
    decode,
    evaluate_manifest,
    make_scorer,
    metrics_fn,
    model_slug,
    scoring_language,
)
from fitwhisper.evaluate.generate import _language_groups
from fitwhisper.scoring import score


def test_decode_treats_trainer_padding_as_pad(tiny_en_processor) -> None:
    tok = tiny_en_processor.tokenizer
    ids = tok(" hello world").input_ids
    padded = np.array([ids + [-100, -100], ids[:2] + [-100] * (len(ids))])
    texts = decode(tok, padded)
    assert texts[0] == "hello world"
    assert len(texts) == 2 and "-100" not in texts[1]


def test_metrics_fn_scores_generated_ids_against_manifest_texts(tiny_en_processor) -> None:
    tok = tiny_en_processor.tokenizer
    refs = ["the cat sat", "on the mat"]
    hyps = [" the cat sat", " on a mat"]  # one substitution in six words
    width = max(len(tok(h).input_ids) for h in hyps)
    preds = np.full((2, width), -100)
    for i, h in enumerate(hyps):
        ids = tok(h).input_ids
        preds[i, : len(ids)] = ids
    metric, norm = make_scorer("en")
    out = metrics_fn(tok, refs, metric, norm)(SimpleNamespace(predictions=preds))
    assert out["wer"] == pytest.approx(1 / 6)


def test_evaluate_manifest_writes_per_utterance_errors_and_skips_bad_rows(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    with tone_manifest.open("a") as f:  # line 7: a row whose audio does not exist
        f.write(json.dumps({"audio_path": "clips/gone.wav", "text": "lost"}) + "\n")
    res = evaluate_manifest(
        str(tiny_whisper_dir),
        tone_manifest,
        batch_size=4,
        generation_max_length=8,
        data_cfg=DataConfig(bad_rows="skip"),
    )
    assert res.score.metric == "wer"
    assert res.score.n_utterances == 6
    assert len(res.skipped) == 1 and res.skipped[0].startswith(
        f"{tone_manifest.name}:7 missing_file"
    )
    # An untrained model cannot transcribe: errors must show up, not a perfect score.
    assert res.score.normalized > 0.5
    out = res.write(tmp_path / "eval")
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["reference"] for r in rows] == [f"tone number {i} is playing" for i in range(6)]
    for r in rows:
        assert r["reference_normalized"] == res.normalizer(r["reference"])
        assert r["hypothesis_normalized"] == res.normalizer(r["hypothesis"])
        assert r["errors"] == r["substitutions"] + r["deletions"] + r["insertions"]
        assert (r["ref_units"], r["units"]) == (5, "words")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["metric"] == "wer" and metrics["n_utterances"] == 6
    assert metrics["wer"] == res.score.normalized and metrics["wer_raw"] == res.score.raw
    assert metrics["errors"] == sum(r["errors"] for r in rows)
    assert metrics["skipped_rows"] == 1 and metrics["normalizer"].startswith("whisper_english")


@pytest.mark.slow  # end to end: trains, evaluates three times (about 30 s on 2 idle cores)
def test_checkpoint_wer_at_training_time_equals_evaluate(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    """Acceptance: the WER logged for checkpoint-N during training is the number
    `fitwhisper evaluate checkpoint-N MANIFEST` reports, with the same settings."""
    run = tmp_path / "run"
    settings = ["--generation_max_length", "12"]
    # 4 of the 6 clips in batches of 2: predictions of several batches are joined.
    code = main(
        ["train", "--model", str(tiny_whisper_dir), "--train_manifest", str(tone_manifest),
         "--eval_manifest", str(tone_manifest), "--output_dir", str(run), "--max_steps", "2",
         "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "steps",
         "--save_steps", "2", "--per_device_train_batch_size", "6",
         "--per_device_eval_batch_size", "2", "--max_eval_samples", "4",
         "--learning_rate", "3e-3", "--report_to", "none", "--seed", "0", *settings]
    )  # fmt: skip
    assert code == 0
    checkpoint = run / "checkpoint-2"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if h.get("step") == 2 and "eval_wer" in h]
    assert len(logged) == 1
    at_training = logged[0]
    # Random weights write garbage, but not nothing: a number that can disagree.
    assert at_training["eval_wer"] > 0.2

    out = tmp_path / "eval"
    code = main(
        ["evaluate", str(checkpoint), str(tone_manifest), "--batch_size", "2",
         "--max_samples", "4", "--output_dir", str(out), *settings]
    )  # fmt: skip
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_utterances"] == 4
    assert metrics["wer"] == at_training["eval_wer"]
    assert metrics["wer_raw"] == at_training["eval_wer_raw"]


def test_comparison_reports_both_models_and_the_difference(tmp_path: Path) -> None:
    metric, norm = make_scorer("en")
    refs = ("the cat sat", "on a mat", "today")

    def result(name: str, hyps: tuple[str, ...]) -> EvalResult:
        return EvalResult(
            score=score(list(refs), list(hyps), metric, norm),
            references=refs,
            hypotheses=hyps,
            ids=("a", "b", "c"),
            normalizer=norm,
            model=name,
        )

    tuned = result("runs/x/final", ("the cat sat", "on a mat", "monday"))
    zero = result("offline/tiny.en", ("The cat.", "on a mat", "today"))
    cmp = Comparison(model=tuned, baseline=zero)
    d = cmp.as_dict()
    assert d["model"]["wer"] == pytest.approx(1 / 7)
    assert d["baseline"]["wer"] == pytest.approx(1 / 7)  # "sat" deleted
    assert d["baseline"]["wer_raw"] == pytest.approx(3 / 7)  # and "The", "cat." as written
    assert d["difference"]["wer_raw"] == pytest.approx(-2 / 7)
    assert d["difference"]["wer"] == 0
    assert d["clips"] == {"better": 1, "worse": 1, "same": 1}
    summary = zero.format_summary()
    assert "WER raw          42.86%  (texts as written)" in summary
    assert "WER normalised   14.29%  (1 errors in 7 reference words)" in summary
    table = cmp.format_table()
    assert "WER over words on 3 clips" in table
    assert "normaliser: whisper_english (applied to reference and hypothesis alike)" in table
    assert "offline/tiny.en (--compare)" in table and "-28.57pt" in table
    written = cmp.write(tmp_path)
    assert written["model"] == tmp_path / "runs-x-final"
    assert written["baseline"] == tmp_path / "offline-tiny.en"
    for folder in (written["model"], written["baseline"]):
        assert (folder / "predictions.jsonl").is_file() and (folder / "metrics.json").is_file()
    assert json.loads((tmp_path / "comparison.json").read_text()) == json.loads(json.dumps(d))
    per_clip = [json.loads(x) for x in (tmp_path / "comparison.jsonl").read_text().splitlines()]
    assert [c["change"] for c in per_clip] == ["better", "same", "worse"]


def test_unknown_opencc_config_fails_before_loading_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["evaluate", "no/such-model", str(tmp_path / "none.jsonl"), "--opencc", "s2xx"])
    assert code == 1
    err = capsys.readouterr().err
    assert "error: unknown OpenCC conversion 's2xx'" in err and "s2twp" in err


def test_bad_rows_are_an_error_by_default_naming_the_row(
    tiny_whisper_dir: Path, tone_manifest: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with tone_manifest.open("a") as f:
        f.write(json.dumps({"audio_path": "clips/gone.wav", "text": "lost"}) + "\n")
    assert main(["evaluate", str(tiny_whisper_dir), str(tone_manifest)]) == 1
    err = capsys.readouterr().err
    assert f"{tone_manifest.name}:7: missing_file" in err and "--bad_rows skip" in err


def test_clips_group_by_generation_language_and_metric_follows_the_clips() -> None:
    assert _language_groups(None, 3) == [(None, [0, 1, 2])]
    assert _language_groups(["zh", "zh"], 2) == [(None, [0, 1])]
    assert _language_groups(["zh", "en", "zh"], 3) == [("zh", [0, 2]), ("en", [1])]
    rows = [SimpleNamespace(language="zh"), SimpleNamespace(language=None)]
    assert scoring_language(rows, "zh") == "zh"  # the rows without one take --language
    assert scoring_language(rows, None) is None  # mixed: --language decides
    assert make_scorer(scoring_language(rows[:1], None))[0] == "cer"


@pytest.mark.parametrize(
    ("spec", "slug"),
    [("offline/tiny.en", "offline-tiny.en"), ("openai/whisper-small", "openai-whisper-small")],
)
def test_model_slug_of_names(spec: str, slug: str) -> None:
    assert model_slug(spec) == slug


def test_model_slug_of_run_folders(tmp_path: Path) -> None:
    (tmp_path / "exp1" / "checkpoint-500").mkdir(parents=True)
    (tmp_path / "exp1" / "final").mkdir()
    assert model_slug(str(tmp_path / "exp1" / "checkpoint-500")) == "exp1-checkpoint-500"
    assert model_slug(str(tmp_path / "exp1" / "final") + "/") == "exp1-final"
    assert model_slug(str(tmp_path / "exp1")) == "exp1"


def test_scoring_never_wraps_the_model_for_several_gpus(
    tiny_whisper_dir: Path, tone_manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With several GPUs visible and no launcher, a Trainer's evaluation wrapped the model in
    DataParallel, whose replicas ran the first GPU's short-window encoder patch on the
    others (device mismatch). Scoring generates on one device, whatever the GPU count."""
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    def refuse(*args, **kwargs):
        raise AssertionError("scoring wrapped the model in DataParallel")

    monkeypatch.setattr(torch.nn.DataParallel, "__init__", refuse)
    res = evaluate_manifest(str(tiny_whisper_dir), tone_manifest, batch_size=3,
                            generation_max_length=8)  # fmt: skip
    assert res.score.n_utterances == 6


def test_a_fine_tune_that_records_its_language_is_scored_in_it_without_language(
    tiny_multilingual_dir: Path, tmp_path: Path, tone_manifest: Path
) -> None:
    """`evaluate` with no --language on untagged rows takes the model's default language
    (models/resolve.py `default_language`: its preset's, else the one its generation
    config records), as export's re-scoring does: a Mandarin fine-tune is scored by CER."""
    import shutil

    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_multilingual_dir, tuned)
    gen = json.loads((tuned / "generation_config.json").read_text())
    (tuned / "generation_config.json").write_text(json.dumps(gen | {"language": "zh"}))
    # What was decided, and why, is recorded beside the metrics (evaluate/plan.py).
    reasons = {
        "wer": "none: an English-only model, or detected per clip",
        "cer": "recorded in the model's generation config (its fine-tune's language)",
    }
    for model, metric in ((tiny_multilingual_dir, "wer"), (tuned, "cer")):
        out = tmp_path / f"ev-{metric}"
        argv = ["evaluate", str(model), str(tone_manifest), "--max_samples", "2"]
        assert main([*argv, "--generation_max_length", "4", "--output_dir", str(out), "-q"]) == 0
        assert json.loads((out / "metrics.json").read_text())["metric"] == metric
        plan = json.loads((out / "eval_plan.json").read_text())
        assert plan["metric"] == metric and plan["why"]["language"] == reasons[metric]
        assert plan["language"] == (None if metric == "wer" else "zh")
        assert plan["dtype"] == "float32"
        assert plan["generation"] == "greedy decoding, at most 4 tokens"
        assert plan["encoder_window"] == "full"
        assert plan["why"]["encoder_window"].startswith("auto: 30 s")
    # --compare: both models in the fine-tune's language (the base was once prompted by
    # detection and the pair scored by WER).
    out = tmp_path / "compared"
    argv = ["evaluate", str(tuned), str(tone_manifest), "--compare", str(tiny_multilingual_dir)]
    argv += ["--max_samples", "2", "--generation_max_length", "4", "--output_dir", str(out)]
    assert main([*argv, "-q"]) == 0
    assert json.loads((out / "comparison.json").read_text())["metric"] == "cer"
    plans = [json.loads(p.read_text()) for p in sorted(out.glob("*/eval_plan.json"))]
    assert len(plans) == 2
    for plan in plans:
        assert (plan["language"], plan["metric"]) == ("zh", "cer")
        assert plan["why"]["language"].endswith("for both models (--compare: the first model's)")


def test_rows_tagged_with_a_language_are_prompted_and_scored_in_it_and_the_plan_says_so(
    tiny_multilingual_dir: Path, tmp_path: Path, tone_manifest: Path
) -> None:
    rows = [json.loads(x) for x in tone_manifest.read_text().splitlines()][:2]
    tagged = tone_manifest.with_name("tagged.jsonl")
    tagged.write_text("".join(json.dumps(r | {"language": "zh"}) + "\n" for r in rows))
    out = tmp_path / "ev"
    argv = ["evaluate", str(tiny_multilingual_dir), str(tagged), "--output_dir", str(out)]
    assert main([*argv, "--generation_max_length", "4", "--encoder_window", "short", "-q"]) == 0
    plan = json.loads((out / "eval_plan.json").read_text())
    assert (plan["language"], plan["scoring_language"], plan["metric"]) == ("zh", "zh", "cer")
    assert plan["why"]["language"].startswith("the manifest's language column")
    assert plan["why"]["metric"] == "auto: for zh clips"
    assert (plan["encoder_window"], plan["why"]["encoder_window"]) == ("short", "--encoder_window")


def test_beam_search_is_asked_of_generate_and_named_in_the_plan(
    tiny_whisper_dir: Path, tone_manifest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import WhisperForConditionalGeneration

    beams: list[int] = []
    generate = WhisperForConditionalGeneration.generate

    def spy(self, *args, **kwargs):
        beams.append(kwargs["num_beams"])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(WhisperForConditionalGeneration, "generate", spy)
    res = evaluate_manifest(str(tiny_whisper_dir), tone_manifest, batch_size=3,
                            generation_max_length=8, beam_size=3)  # fmt: skip
    assert res.score.n_utterances == 6 and beams == [3, 3]  # two batches of three clips
    assert res.plan.generation == "beam search of 3, at most 8 tokens"
    assert "decoding        beam search of 3, at most 8 tokens" in res.format_summary()
