"""`fitwhisper export --format`: one folder per format, the model card with its Exports
section, and bad requests refused before any conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from fitwhisper.cli import main


def test_several_formats_go_to_a_folder_each_with_the_model_card(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from huggingface_hub import ModelCard

    out = tmp_path / "exports"
    argv = ["export", str(tiny_whisper_dir), str(out), "--format", "ct2,openai",
            "--quantization", "float32"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (out / "ct2" / "model.bin").is_file() and (out / "openai" / "model.pt").is_file()
    assert "load it: whisper.load_model(" in printed
    for folder in (out, out / "ct2", out / "openai"):
        card = ModelCard.load(folder / "README.md")  # front matter the Hub parses
        assert card.data.pipeline_tag == "automatic-speech-recognition"
        exports = card.text.split("## Exports", 1)[1]
        assert "| ct2 | faster-whisper (CTranslate2) |" in exports
        assert "| openai | openai-whisper |" in exports
    # Again without --force: refused, nothing replaced.
    assert main(argv) == 1
    assert "exists and is not empty" in capsys.readouterr().err


def test_an_unknown_format_is_refused_before_anything_is_written(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x"
    assert main(["export", str(tiny_whisper_dir), str(out), "--format", "ct2,tflite"]) == 1
    err = capsys.readouterr().err
    assert "unknown --format tflite" in err and "ct2, ggml, onnx, openai" in err
    assert not out.exists()


def test_the_exports_section_is_replaced_not_repeated() -> None:
    from fitwhisper.models.card import with_exports

    card = "---\nlicense: mit\n---\n\n# m\n\n## Results\n\nx\n\n## Reproduce\n\ncmd\n"
    once = with_exports(card, "| a |")
    assert once.index("## Exports") < once.index("## Reproduce")
    twice = with_exports(once, "| b |")
    assert twice.count("## Exports") == 1 and "| b |" in twice and "| a |" not in twice
    assert twice.index("## Exports") < twice.index("## Reproduce") and twice.endswith("cmd\n")
