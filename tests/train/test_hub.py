"""--push_to_hub: refused in one paragraph before training when the Hub cannot be reached;
after training, final/ is what gets uploaded, and a failed upload loses nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fitwhisper.cli import main


def test_an_unreachable_hub_is_said_before_training(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    base = ["train", "--model", str(tiny_whisper_dir), "--train_manifest", str(tone_manifest),
            "--output_dir", str(out), "--max_steps", "1"]  # fmt: skip
    assert main([*base, "--push_to_hub", "--hub_model_id", "me/digits"]) == 1  # tests: offline
    err = capsys.readouterr().err
    assert "Hugging Face Hub is switched off here (HF_HUB_OFFLINE)" in err
    assert "hf upload me/digits RUN/final" in err and "Traceback" not in err
    assert not out.exists()
    assert main([*base, "--push_to_hub"]) == 1
    assert "--push_to_hub needs --hub_model_id OWNER/NAME" in capsys.readouterr().err


def test_push_uploads_final_and_a_failed_upload_says_how_to_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import huggingface_hub

    from fitwhisper.train.hub import push_final

    calls = []

    class FakeApi:
        def create_repo(self, repo_id, exist_ok):
            calls.append(("create", repo_id, exist_ok))

        def upload_folder(self, repo_id, folder_path, commit_message):
            calls.append(("upload", repo_id, folder_path))
            if repo_id == "me/broken":
                raise ConnectionError("network down")
            return type("Info", (), {"repo_url": f"https://huggingface.co/{repo_id}"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    final = tmp_path / "run" / "final"
    final.mkdir(parents=True)
    assert push_final(final, "me/digits") == "https://huggingface.co/me/digits"
    assert calls == [("create", "me/digits", True), ("upload", "me/digits", str(final))]
    with caplog.at_level(logging.ERROR):
        assert push_final(final, "me/broken") is None
    assert f"hf upload me/broken {final}" in caplog.text and final.is_dir()
