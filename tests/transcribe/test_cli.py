"""`fitwhisper transcribe` and `fitwhisper export` end to end on a tiny random Whisper:
bad inputs one by one, outputs per format, both engines."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from fitwhisper.cli import main

# A random model writes until the token limit: keep that short. The tones here are not
# speech: voice activity detection would leave nothing to decode.
FAST = ["--no_temperature_fallback", "--threads", "2", "--max_new_tokens", "24", "--no_vad"]


def test_bad_inputs_are_reported_one_by_one_and_the_rest_transcribed(
    tiny_whisper_dir: Path, tmp_path: Path, make_tone, capsys: pytest.CaptureFixture[str]
) -> None:
    good = make_tone(tmp_path / "good.wav", 2.0)
    empty = tmp_path / "empty.wav"
    soundfile.write(str(empty), np.zeros(0, np.float32), 16000)
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"this is not audio at all" * 10)
    (tmp_path / "no-audio").mkdir()
    out = tmp_path / "out"
    args = [str(tmp_path / "missing.wav"), str(empty), str(garbage), str(tmp_path / "no-audio")]
    # The ct2 engine (the tiny model exported into the cache) decodes the random model fastest.
    code = main(
        ["transcribe", "--model", str(tiny_whisper_dir), "--engine", "ct2", str(good),
         *args, "--output_dir", str(out), "--output_format", "txt,srt", *FAST]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert sorted(p.name for p in out.iterdir()) == ["good.srt", "good.txt"]
    assert f"error: {tmp_path / 'missing.wav'}: no such file" in err
    assert f"error: {empty}: the file holds no audio (0 samples)" in err
    assert f"error: {garbage}: cannot read audio file" in err
    assert "hint: convert it to WAV or FLAC" in err
    assert f"error: {tmp_path / 'no-audio'}: the folder holds no audio files" in err
    assert "transcribed 1 files; 4 failed (see above)" in err


def test_all_inputs_bad_exits_1_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["transcribe", "--model", str(tmp_path / "no-model"), str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert code == 1
    assert "no such file" in err and "no audio to transcribe (1 inputs failed)" in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--output_format", "txt,docx"], "unknown --output_format docx"),
        (["--output_file", "a.srt", "--output_format", "srt,vtt"], "--output_file takes one"),
        (["--output_script", "klingon"], "unknown output script 'klingon'"),
    ],
)
def test_bad_output_flags_are_user_errors(
    flags: list[str], message: str, tmp_path: Path, make_tone, capsys: pytest.CaptureFixture[str]
) -> None:
    good = make_tone(tmp_path / "good.wav", 1.0)
    assert main(["transcribe", "--model", "x", str(good), *flags]) == 1
    assert message in capsys.readouterr().err


def test_output_file_takes_its_format_from_the_suffix(
    tiny_whisper_dir: Path, tmp_path: Path, make_tone
) -> None:
    good = make_tone(tmp_path / "good.wav", 1.5)
    out = tmp_path / "sub.vtt"
    # --timestamps none: one generate call per clip (a random model's timestamps can make
    # the seek loop crawl).
    code = main(
        ["transcribe", "--model", str(tiny_whisper_dir), "--engine", "transformers", str(good),
         "--output_file", str(out), "--timestamps", "none", *FAST]
    )  # fmt: skip
    assert code == 0
    assert out.read_text().startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n")


def test_threads_hold_while_transcribing_and_are_given_back(
    tiny_whisper_dir: Path, tmp_path: Path, make_tone, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--threads is the engine's: a caller in the same process keeps its own thread count
    (a test beside it, a training run after it), and generation ran with the one asked for."""
    import torch

    from fitwhisper.models import short_window

    seen, generate = [], short_window.generate_short

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return generate(*args, **kwargs)

    monkeypatch.setattr(short_window, "generate_short", spy)
    before = torch.get_num_threads()
    asked = 1 if before != 1 else 2
    argv = [a if a != "2" else str(asked) for a in FAST]
    code = main(
        ["transcribe", "--model", str(tiny_whisper_dir), "--engine", "transformers",
         str(make_tone(tmp_path / "a.wav", 1.0)), "--output_dir", str(tmp_path / "out"),
         "--timestamps", "none", *argv]
    )  # fmt: skip
    assert code == 0
    assert seen == [asked] and torch.get_num_threads() == before


def test_ct2_engine_runs_an_exported_model_and_writes_scores(
    tiny_whisper_dir: Path, tmp_path: Path, make_tone, capsys: pytest.CaptureFixture[str]
) -> None:
    ct2 = tmp_path / "ct2"
    assert main(["export", str(tiny_whisper_dir), str(ct2), "--quantization", "float32"]) == 0
    assert {"model.bin", "tokenizer.json", "preprocessor_config.json"} <= {
        p.name for p in ct2.iterdir()
    }
    clips = [make_tone(tmp_path / f"c{i}.wav", 1.0 + i, freq=300 + 90 * i) for i in range(3)]
    out = tmp_path / "out"
    code = main(
        ["transcribe", "--model", str(ct2), *map(str, clips), "--output_dir", str(out),
         "--output_format", "json", *FAST]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    for i in range(len(clips)):
        data = json.loads((out / f"c{i}.json").read_text())
        assert data["duration"] == pytest.approx(1.0 + i)
        for seg in data["segments"]:
            assert 0.0 <= seg["start"] <= seg["end"] <= data["duration"]
            assert seg["avg_logprob"] <= 0.0 and 0.0 <= seg["no_speech_prob"] <= 1.0
    # json shows times: --timestamps auto decodes segments; the line says how it decoded.
    assert "engine ct2 on cpu" in (err := capsys.readouterr().err)
    assert "beam search of 5, timestamps segment;" in err


def test_output_script_converts_every_segment_into_traditional() -> None:
    from fitwhisper.transcribe.formats import Segment, Transcript
    from fitwhisper.transcribe.run import convert_script

    t = Transcript(
        "a.wav", (Segment(0, 0.0, 1.0, "们发现"), Segment(1, 1.0, 2.0, "OK 后台")), "zh", 2.0
    )
    assert [s.text for s in convert_script(t, "traditional").segments] == ["們發現", "OK 後臺"]
    assert convert_script(t, None) is t


def test_one_transcribe_call_resolves_the_model_spec_once(
    tiny_whisper_dir: Path, tmp_path: Path, make_tone, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import fitwhisper.models.resolve as resolve

    calls: list[str] = []
    original = resolve.resolve_model

    def counting(spec, **kwargs):
        calls.append(str(spec))
        return original(spec, **kwargs)

    # Every module that holds the function, whether it looks it up at call time or not.
    for name, module in list(sys.modules.items()):
        if name.startswith("fitwhisper") and getattr(module, "resolve_model", None) is original:
            monkeypatch.setattr(module, "resolve_model", counting)
    good = make_tone(tmp_path / "good.wav", 1.0)
    code = main(
        ["transcribe", "--model", str(tiny_whisper_dir), "--engine", "ct2", str(good),
         "--output_dir", str(tmp_path / "out"), *FAST]
    )  # fmt: skip
    assert code == 0
    assert calls == [str(tiny_whisper_dir)]


def test_transformers_engine_loads_a_multilingual_model_without_a_language(
    tiny_multilingual_dir: Path,
) -> None:
    # The offline base's generation config (which the tiny model copies) has no `language`:
    # reading it once crashed `--engine transformers` without `--language`.
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    engine = TransformersEngine(str(tiny_multilingual_dir), TranscribeOptions(), "cpu")
    assert engine.multilingual and engine.language is None


@pytest.mark.parametrize("engine", ["transformers", "ct2"])
def test_both_engines_take_the_models_default_language_without_one(
    tiny_multilingual_dir: Path, monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """No --language: each engine prompts in `default_language`, the rule evaluate and export
    re-scoring follow (here a preset that says zh, as Breeze-ASR-25's does); a given one wins."""
    if engine == "ct2":
        pytest.importorskip("faster_whisper")
    import fitwhisper.models.presets as presets
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.options import TranscribeOptions
    from fitwhisper.transcribe.run import EngineChoice, make_engine

    spec = str(tiny_multilingual_dir)
    monkeypatch.setattr(presets, "preset_language", lambda m: "zh" if m == spec else None)
    choice = EngineChoice(engine, "cpu", "test")
    options = {"vad": False, "compute_type": "float32"}
    engine = make_engine(resolve_model(spec), TranscribeOptions(**options), choice)
    assert (engine.language, engine.language_why) == ("zh", f"the preset of {spec}")
    given = TranscribeOptions(language="ja", **options)
    engine = make_engine(resolve_model(spec), given, choice)
    assert (engine.language, engine.language_why) == ("ja", "--language")


def _refuse_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any model resolution or audio decoding fails the test."""
    import fitwhisper.models.resolve as resolve
    import fitwhisper.transcribe.run as run

    def refuse(*_args, **_kwargs):
        raise AssertionError("reached model loading or audio decoding")

    monkeypatch.setattr(resolve, "resolve_model", refuse)
    monkeypatch.setattr(run, "load_audio", refuse)
    monkeypatch.setattr(run, "probe_audio", refuse)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("missing/out.srt", "missing does not exist, so nothing could be written"),
        ("a-file/out.srt", "a-file is not a folder"),
        ("a-folder", "is a folder"),
    ],
)
def test_an_output_file_that_cannot_be_written_fails_before_any_work(
    where: str,
    message: str,
    tmp_path: Path,
    make_tone,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = make_tone(tmp_path / "good.wav", 1.0)
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "a-folder").mkdir()
    before = sorted(tmp_path.rglob("*"))
    _refuse_work(monkeypatch)
    out = tmp_path / where
    assert (
        main(["transcribe", "--model", "offline/tiny.en", str(good), "--output_file", str(out)])
        == 1
    )
    err = capsys.readouterr().err
    assert f"error: --output_file {out}" in err and message in err and "hint: " in err
    assert "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before  # nothing left behind


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("a-file", "a-file is a file, not a folder"),
        ("a-file/sub/dir", "cannot be made: {tmp}/a-file is a file, not a folder"),
    ],
)
def test_an_output_dir_that_is_a_file_fails_before_any_work(
    where: str,
    message: str,
    tmp_path: Path,
    make_tone,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = make_tone(tmp_path / "good.wav", 1.0)
    (tmp_path / "a-file").write_text("not a folder")
    before = sorted(tmp_path.rglob("*"))
    _refuse_work(monkeypatch)
    out = tmp_path / where
    assert (
        main(["transcribe", "--model", "offline/tiny.en", str(good), "--output_dir", str(out)]) == 1
    )
    err = capsys.readouterr().err
    assert f"error: --output_dir {out}" in err and message.format(tmp=tmp_path) in err
    assert "hint: " in err and "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before


def test_an_output_dir_without_write_permission_fails_before_any_work(
    tmp_path: Path, make_tone, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Root writes anywhere, so the write probe is what answers: make it fail in `locked`.
    import tempfile

    good = make_tone(tmp_path / "good.wav", 1.0)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    _refuse_work(monkeypatch)
    code = main(["transcribe", "--model", "offline/tiny.en", str(good),
                 "--output_dir", str(locked / "subs")])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert f"cannot be written: {locked}: Permission denied" in err
    assert not (locked / "subs").exists()


def test_batched_mode_without_vad_is_refused_before_any_work(
    tmp_path: Path, make_tone, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    good = make_tone(tmp_path / "good.wav", 1.0)
    _refuse_work(monkeypatch)
    code = main(["transcribe", "--model", "offline/tiny.en", str(good), "--mode", "batched",
                 "--no_vad"])  # fmt: skip
    assert code == 1
    assert "--mode batched cuts files at the pauses" in capsys.readouterr().err


def test_device_names_are_checked_against_the_gpus_there(monkeypatch) -> None:
    """--device cuda:N names a GPU that exists; a malformed name is refused with the forms."""
    import torch

    from fitwhisper.errors import ConfigError
    from fitwhisper.transcribe.run import resolve_device

    for bad in ("gpu", "cuda:x", "cpu:1", "cuda:-1"):
        with pytest.raises(ConfigError, match="unknown --device"):
            resolve_device(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        resolve_device("cuda:0")
    assert resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == "cuda:1" and resolve_device("cuda") == "cuda"
    with pytest.raises(ConfigError, match=r"shows 2 GPU\(s\), numbered 0 to 1") as e:
        resolve_device("cuda:2")
    assert "CUDA_VISIBLE_DEVICES" in e.value.hint


def test_timestamps_auto_decodes_text_only_outputs_without_timestamp_tokens() -> None:
    """Timestamp tokens cost about a point of WER on clips up to 30 s (RESULTS-quality):
    auto leaves them out when no output shows times, and a given choice always holds."""
    from fitwhisper.transcribe.options import TranscribeOptions, with_timestamps_for

    auto = TranscribeOptions()
    assert auto.timestamps == "auto"
    assert with_timestamps_for(auto, ["txt"]).timestamps == "none"
    assert with_timestamps_for(auto, ["txt", "srt"]).timestamps == "segment"
    assert with_timestamps_for(auto, ["json"]).timestamps == "segment"
    given = TranscribeOptions(timestamps="segment")
    assert with_timestamps_for(given, ["txt"]).timestamps == "segment"
