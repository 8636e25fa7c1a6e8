"""Acceptance (issue 15): LoRA on an 8-bit and on a 4-bit base of the real tiny.en, trained
on this CPU (bitsandbytes' CPU backend), lowers WER on held-out digit strings of real
English speech, as `evaluate --compare` reports it; the adapter then merges into a full
model and transcribes. The task and data are test_finetune_digits.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.test_finetune_digits import make_digit_strings

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("flag", ["--use_8bit", "--use_4bit"])
def test_quantised_lora_lowers_wer_then_merges_and_transcribes(
    flag: str, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fitwhisper.cli import main

    data = make_digit_strings(
        shared_data / "fsdd-train", tmp_path / "digits", n_train=32, n_eval=12
    )
    run = tmp_path / "run"
    code = main(
        ["train", "--model", "offline/tiny.en", flag, "--train_manifest",
         str(data.train_manifest), "--output_dir", str(run), "--max_steps", "4",
         "--per_device_train_batch_size", "8", "--learning_rate", "2e-3", "--warmup_steps", "1",
         "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none", "--seed", "0"]
    )  # fmt: skip
    assert code == 0
    assert (run / "final" / "adapter_config.json").is_file()
    out = tmp_path / "compare"
    code = main(
        ["evaluate", str(run), str(data.eval_manifest), "--compare", "offline/tiny.en",
         "--generation_max_length", "24", "--output_dir", str(out)]
    )  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    cmp = json.loads((out / "comparison.json").read_text())
    assert cmp["n_utterances"] == 12
    assert cmp["model"]["wer"] < cmp["baseline"]["wer"], table

    merged = tmp_path / "merged"
    assert main(["merge", str(run), str(merged)]) == 0
    clip = json.loads(data.eval_manifest.read_text().splitlines()[0])
    audio = data.eval_manifest.parent / clip["audio"]
    text_file = tmp_path / "clip.txt"
    code = main(
        ["transcribe", "--model", str(merged), "--engine", "transformers", str(audio),
         "--output_file", str(text_file), "--timestamps", "none"]
    )  # fmt: skip
    assert code == 0
    assert any(ch.isdigit() for ch in text_file.read_text())  # it writes digits now
    with capsys.disabled():
        print(f"\n{flag}: WER {cmp['baseline']['wer']:.3f} -> {cmp['model']['wer']:.3f}")
