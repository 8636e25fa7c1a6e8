"""Mandarin, Taiwan and code-switching: Breeze-ASR-25 preset, output script in
training, language-token strategies, rehearsal mixing and the forgetting guard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fitwhisper.chinese_script import rows_in_script
from fitwhisper.codeswitch import configure_no_language_token, rows_for_strategy
from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.data.features import SpeechDataset, label_ids
from fitwhisper.data.manifest import Row
from fitwhisper.errors import ConfigError
from fitwhisper.models.presets import apply_model_preset, preset_for
from fitwhisper.train import train, validate
from fitwhisper.train.rows import mix_rehearsal

BREEZE = "MediaTek-Research/Breeze-ASR-25"


def _tone(path: Path, seconds: float, freq: float) -> Path:
    import numpy as np
    import soundfile

    t = np.arange(int(seconds * 16_000)) / 16_000
    soundfile.write(str(path), (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), 16_000)
    return path


def _rows(texts, language=None):
    return [Row(i, i + 1, Path(f"{i}.wav"), t, language, f"r{i}") for i, t in enumerate(texts)]


# --- Breeze-ASR-25 preset ---------------------------------------------------------------------


def test_breeze_preset_fills_language_and_traditional_output_but_never_overrides():
    cfg = apply_model_preset(ModelConfig(model=BREEZE))
    assert (cfg.language, cfg.task, cfg.output_script) == ("zh", "transcribe", "traditional")
    given = apply_model_preset(ModelConfig(model=BREEZE, language="en", output_script="none"))
    assert (given.language, given.output_script) == ("en", "none")
    # A local copy named like the model gets the preset; other models none.
    assert preset_for("/models/Breeze-ASR-25/").num_mel_bins == 80
    assert apply_model_preset(ModelConfig(model="openai/whisper-small")).output_script is None


def test_breeze_is_planned_as_large_v2_with_80_mels():
    from fitwhisper.memory.architectures import ARCHITECTURES

    assert ARCHITECTURES[BREEZE] == ARCHITECTURES[preset_for(BREEZE).base]
    assert ARCHITECTURES[BREEZE]["num_mel_bins"] == 80


# --- rows: output script, language tokens, rehearsal ------------------------------------------


def test_training_references_are_converted_into_the_output_script():
    rows = rows_in_script(_rows(["我们这里", "hello"]), "traditional")
    assert [r.text for r in rows] == ["我們這裡", "hello"]
    assert rows_in_script(_rows(["我们"]), None)[0].text == "我们"


def test_language_token_strategies_change_the_label_prefix(tiny_multilingual_dir: Path):
    from fitwhisper.models.resolve import load_processor

    processor = load_processor(tiny_multilingual_dir)
    tok = processor.tokenizer
    sot, zh, en, transcribe, no_ts = tok.convert_tokens_to_ids(
        ["<|startoftranscript|>", "<|zh|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
    )
    rows = _rows(["hello 你好"], language="en")

    def prefix(strategy, language):
        ds = SpeechDataset(rows_for_strategy(rows, strategy), processor, language=language)
        # Labels only: the prompt the dataset builds, without decoding audio.
        row = ds.rows[0]
        return label_ids(tok, row.text, row.language or ds.language, "transcribe")[:4]

    assert prefix("per_row", "zh") == [sot, en, transcribe, no_ts]  # the row's own tag
    assert prefix("fixed", "zh") == [sot, zh, transcribe, no_ts]  # --language for all
    assert prefix("none", None)[:3] == [sot, transcribe, no_ts]  # no language token


def test_no_language_token_generation_prompt(tiny_multilingual_dir: Path):
    """Generation starts <|startoftranscript|><|transcribe|><|notimestamps|>: transformers
    does not detect and insert a language."""
    import torch
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(tiny_multilingual_dir)
    configure_no_language_token(model, "transcribe")
    gen = model.generation_config
    prompts = []

    def keep_prompt(module, args, kwargs):
        if not prompts:  # the first decoder call sees the whole prompt
            prompts.append(kwargs["input_ids"][0].tolist())

    model.model.decoder.register_forward_pre_hook(keep_prompt, with_kwargs=True)
    model.generate(torch.zeros(1, 80, 3000), max_new_tokens=2)
    assert prompts[0] == [
        model.config.decoder_start_token_id,
        gen.task_to_id["transcribe"],
        gen.no_timestamps_token_id,
    ]


def test_rehearsal_share_is_counted_and_seeded():
    train_rows, extra = _rows(["a"] * 90), _rows(["x", "y", "z"], language="en")
    mixed, added = mix_rehearsal(train_rows, extra, 0.1, seed=0)
    assert added == 10 and len(mixed) == 100  # 10 of 100 rows are rehearsal rows
    assert sum(r.language == "en" for r in mixed) == 10
    again, _ = mix_rehearsal(train_rows, extra, 0.1, seed=0)
    assert [r.text for r in again] == [r.text for r in mixed]
    assert mix_rehearsal(train_rows, [], 0.1, seed=0) == (train_rows, 0)


def test_guard_options_are_checked_with_the_others(tmp_path: Path):
    with pytest.raises(ConfigError) as e:
        validate(
            ModelConfig(model="offline/base", output_script="klingon"),
            DataConfig(
                rehearsal_manifest=str(tmp_path / "nope.jsonl"),
                rehearsal_share=1.5,
                language_token="fixed",
            ),
            TrainConfig(
                train_manifest="t.jsonl",
                regression_manifest=str(tmp_path / "gone.jsonl"),
                output_dir=str(tmp_path / "run"),
            ),
        )
    msg = e.value.message
    assert "--rehearsal_share must be in (0, 1), got 1.5" in msg
    assert f"--rehearsal_manifest {tmp_path / 'nope.jsonl'}: no such file or folder" in msg
    assert f"--regression_manifest {tmp_path / 'gone.jsonl'}: no such file or folder" in msg
    assert "--language_token fixed needs --language" in msg
    assert "--output_script: unknown output script 'klingon'" in msg


# --- the training hook, end to end on a tiny random model --------------------------------------


def test_run_scores_the_regression_set_before_and_after_and_mixes_rehearsal(
    tiny_multilingual_dir: Path, tmp_path: Path, caplog
):
    def manifest(name, texts, language):
        rows = []
        for i, text in enumerate(texts):
            audio = _tone(tmp_path / f"{name}_{i}.wav", 1.0 + 0.1 * i, freq=300 + 40 * i)
            rows.append({"audio": str(audio), "text": text, "language": language})
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        return path

    train_m = manifest("train", ["我们去台北", "这是中文", "你好世界", "天气很好"], "zh")
    english = manifest("english", ["one two three", "four five"], "en")
    caplog.set_level("INFO", logger="fitwhisper")
    result = train(
        ModelConfig(model=str(tiny_multilingual_dir), language="zh", output_script="traditional"),
        # No language token for the Mandarin rows: the guard still prompts English as en.
        DataConfig(rehearsal_manifest=str(english), rehearsal_share=0.2, language_token="none"),
        TrainConfig(
            output_dir=str(tmp_path / "run"),
            train_manifest=str(train_m),
            eval_manifest=str(train_m),
            regression_manifest=str(english),
            per_device_train_batch_size=5,
            max_steps=1,
            generation_max_length=8,
            report_to="none",
        ),
    )
    assert "rehearsal: 1 rows drawn from 2 usable" in caplog.text  # 1 of 5 = 20%
    assert result.train_rows == 5  # 4 training rows + 1 rehearsal row
    report = json.loads((tmp_path / "run" / "eval" / "regression.json").read_text())
    assert report["metric"] == "wer" and report["n_utterances"] == 2
    assert report["normalizer"].startswith("whisper_english")  # English rows, English scorer
    assert {"before", "after", "difference"} <= set(report)
    assert report["difference"]["wer"] == pytest.approx(
        report["after"]["wer"] - report["before"]["wer"]
    )
    for side in ("before", "after"):
        assert (tmp_path / "run" / "eval" / "regression" / side / "predictions.jsonl").is_file()
    metrics = json.loads((tmp_path / "run" / "eval" / "metrics.json").read_text())
    assert metrics["script"]["expected_script"] == "traditional"  # from --output_script
    assert result.eval_metrics["regression_before"] == report["before"]["wer"]
    # The saved model prompts without a language token, as it was trained.
    saved = json.loads((result.final_dir / "generation_config.json").read_text())
    assert saved.get("language") is None and len(saved["forced_decoder_ids"]) == 2
    # The run record keeps the rehearsal and regression manifests' hashes (resume checks them).
    record = (tmp_path / "run" / "fitwhisper.yaml").read_text()
    assert "rehearsal:" in record and "regression:" in record


@pytest.mark.parametrize("strategy", ["fixed", "none"])
def test_evaluate_honours_the_language_token_strategy(
    tiny_multilingual_dir: Path, tmp_path: Path, strategy: str
):
    from fitwhisper.evaluate import evaluate_manifest

    rows = [
        {"audio": str(_tone(tmp_path / f"{i}.wav", 1.0, 300 + 50 * i)), "text": t, "language": g}
        for i, (t, g) in enumerate([("我们", "zh"), ("hello", "en")])
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    res = evaluate_manifest(
        str(tiny_multilingual_dir),
        path,
        language="zh",
        generation_max_length=6,
        data_cfg=DataConfig(language_token=strategy),
    )
    # Tags (the per-language breakdown) stay the rows' own, whatever prompted them.
    assert res.languages == ("zh", "en")
    assert set(res.metrics()["by_language"]) == {"zh", "en"}
