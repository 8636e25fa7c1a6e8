"""`fitwhisper export --format`: one folder per format, the model card with its Exports
section, and bad requests refused before any conversion."""

from __future__ import annotations

import os
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


def test_a_format_that_cannot_take_the_model_refuses_it_before_any_is_written(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tiny model's MLP is 2 x d_model: ct2, onnx and openai take it, whisper.cpp cannot.
    out = tmp_path / "exports"
    argv = ["export", str(tiny_whisper_dir), str(out), "--format", "ct2,onnx,openai,ggml"]
    assert main(argv) == 1
    assert "whisper.cpp cannot hold this architecture" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_a_manifest_without_a_usable_row_is_refused_before_anything_is_written(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "score.jsonl"
    manifest.write_text('{"audio": "missing.wav", "text": "a"}\n' * 2, encoding="utf-8")
    out = tmp_path / "exports"
    argv = ["export", str(tiny_whisper_dir), str(out), "--format", "openai", "--manifest",
            str(manifest)]  # fmt: skip
    assert main(argv) == 1
    assert "missing.wav" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


def test_an_export_removes_the_temporary_folders_a_killed_one_left(
    tiny_whisper_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(gone.stdout)  # a process that has ended
    out = tmp_path / "exports"
    out.mkdir()
    # Left by a killed export: its own, the converter's, one named before pids were.
    stale = [out / f".openai-{dead}-abcd1234", out / f".export-{dead}-k2j3h4g5",
             out / ".openai-x7y8z9w0"]  # fmt: skip
    kept = [out / f".openai-{os.getppid()}-live1234", out / ".openai-backup", out / "openai2"]
    for folder in stale + kept:
        (folder / "sub").mkdir(parents=True)
    assert main(["export", str(tiny_whisper_dir), str(out), "--format", "openai,ggml"]) == 1
    assert not any(f.exists() for f in stale) and all(f.exists() for f in kept)
    assert "removed 3 temporary folder(s) an earlier export left" in caplog.text


def test_an_exported_folder_has_the_permissions_a_plain_mkdir_gives(
    tiny_whisper_dir: Path, tmp_path: Path
) -> None:
    """Each format is written into a private temporary folder and renamed into place: the
    folder must not stay readable by its owner only (it was 0700)."""
    umask = os.umask(0o022)
    try:
        out = tmp_path / "openai"
        assert main(["export", str(tiny_whisper_dir), str(out), "--format", "openai"]) == 0
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o755


def test_a_full_disk_during_an_export_gets_an_exports_hint(
    tiny_whisper_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import errno

    import fitwhisper.export.openai_format as openai_format

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(openai_format, "write_openai", full)
    out = tmp_path / "openai"
    assert main(["export", str(tiny_whisper_dir), str(out), "--format", "openai"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device (is the disk full?)" in err and "Traceback" not in err
    assert "--resume" not in err and "checkpoints" not in err
    assert "choose an output folder on another disk" in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
