"""ONNX export: the graphs' numbers against transformers' on tiny random models (fast), and
(slow) greedy transcripts identical to transformers' generate on real speech with the real
tiny.en weights and a Mandarin fine-tune of base."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fitwhisper.errors import ConfigError, DataError
from fitwhisper.export import onnx_format
from fitwhisper.export.onnx_format import write_onnx
from fitwhisper.export.onnx_run import transcribe_onnx

TOLERANCE = 1e-4  # fp32 graphs against fp32 eager torch; seen: about 4e-5 on tiny.en


# --- fast: tiny random models -------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_whisper_dir, tiny_multilingual_dir):
    """name -> (source folder, ONNX folder, paths written) for both tiny random models.

    The English one takes the large-model path (weights in `<graph>.onnx.data`, threshold 0
    here), so every test on it also runs through external data; the multilingual one keeps
    its weights inside the graphs."""
    out = {}
    for name, src in (("english", tiny_whisper_dir), ("multilingual", tiny_multilingual_dir)):
        dest = tmp_path_factory.mktemp(f"onnx-{name}")
        with pytest.MonkeyPatch.context() as patch:
            if name == "english":
                patch.setattr(onnx_format, "EXTERNAL_DATA_BYTES", 0)
            out[name] = (src, dest, write_onnx(src, dest))
    return out


@pytest.fixture(scope="module")
def sessions(exported):
    import onnxruntime as ort

    def load(dest: Path):
        return {
            f: ort.InferenceSession(str(dest / f), providers=["CPUExecutionProvider"])
            for f in onnx_format.GRAPH_FILES
        }

    return {name: load(dest) for name, (_, dest, _) in exported.items()}


def _model(src: Path):
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(src, dtype=torch.float32).eval()


def _max_diff(a: np.ndarray, b: torch.Tensor) -> float:
    assert a.shape == tuple(b.shape)
    return float(np.abs(a - b.numpy()).max())


def test_folder_is_self_contained(exported):
    _, dest, written = exported["multilingual"]
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in dest.iterdir())
    for name in (*onnx_format.GRAPH_FILES, "config.json", "generation_config.json"):
        assert name in names
    assert "tokenizer.json" in names or "vocab.json" in names
    assert not [n for n in names if n.endswith((".safetensors", ".data"))]  # small: no .data


@pytest.mark.parametrize("name", ["english", "multilingual"])
def test_graphs_equal_transformers(name, exported, sessions):
    src, _, _ = exported[name]
    model = _model(src)
    enc, dec, dec_past = (sessions[name][f] for f in onnx_format.GRAPH_FILES)
    cfg = model.config
    gen = torch.Generator().manual_seed(1)
    feats = torch.randn(2, cfg.num_mel_bins, 3000, generator=gen)
    ids = torch.randint(0, cfg.vocab_size, (2, 7), generator=gen)
    ids[:, 0] = cfg.decoder_start_token_id

    # encoder, at batch 2 and 3 (dynamic batch)
    with torch.no_grad():
        ref = model.model.encoder(feats).last_hidden_state
        full = model(encoder_outputs=(ref,), decoder_input_ids=ids, use_cache=False).logits
    hidden = enc.run(None, {"input_features": feats.numpy()})[0]
    assert _max_diff(hidden, ref) < TOLERANCE
    three = enc.run(None, {"input_features": feats[[0, 1, 0]].numpy()})[0]
    assert np.abs(three[2] - hidden[0]).max() < TOLERANCE

    # decoder without past: a 4-token prompt
    out = dec.run(None, {"input_ids": ids[:, :4].numpy(), "encoder_hidden_states": hidden})
    assert _max_diff(out[0], full[:, :4]) < TOLERANCE
    names = [o.name for o in dec.get_outputs()]
    assert names[:5] == [
        "logits",
        "present.0.decoder.key",
        "present.0.decoder.value",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]
    heads, head_dim = cfg.decoder_attention_heads, cfg.d_model // cfg.decoder_attention_heads
    assert out[1].shape == (2, heads, 4, head_dim) and out[3].shape == (2, heads, 1500, head_dim)

    # with past: two tokens at once, then one
    cache = {
        n.replace("present", "past_key_values"): t for n, t in zip(names[1:], out[1:], strict=True)
    }
    for lo, hi in ((4, 6), (6, 7)):
        step = dec_past.run(None, {"input_ids": ids[:, lo:hi].numpy(), **cache})
        assert _max_diff(step[0], full[:, lo:hi]) < TOLERANCE
        for n, t in zip([o.name for o in dec_past.get_outputs()][1:], step[1:], strict=True):
            cache[n.replace("present", "past_key_values")] = t
            assert t.shape[2] == hi


def test_encoder_takes_trimmed_input(exported, sessions):
    """Fewer than 3000 frames: the first frames/2 position rows, as `allow_short_input`."""
    from fitwhisper.models.short_window import allow_short_input

    src, _, _ = exported["english"]
    model = _model(src)
    allow_short_input(model)
    feats = torch.randn(1, model.config.num_mel_bins, 400)
    with torch.no_grad():
        ref = model.model.encoder(feats).last_hidden_state
    hidden = sessions["english"][onnx_format.ENCODER_FILE].run(
        None, {"input_features": feats.numpy()}
    )[0]
    assert hidden.shape == (1, 200, model.config.d_model)
    assert _max_diff(hidden, ref) < TOLERANCE


def _noise_clips() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(32_000) / 16_000
    return [
        (0.3 * np.sin(2 * np.pi * f * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
        for f in (220.0, 440.0, 660.0)
    ]


def _generate(src: Path, clips, **kwargs) -> list[str]:
    """transformers' greedy transcripts. Multilingual models get task="transcribe" as
    transcribe_onnx's default: without language or task, generate leaves the task token out."""
    from transformers import WhisperProcessor

    model, proc = _model(src), WhisperProcessor.from_pretrained(src)
    if model.generation_config.is_multilingual:
        kwargs.setdefault("task", "transcribe")
    feats = proc.feature_extractor(clips, sampling_rate=16_000, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(feats.input_features, num_beams=1, do_sample=False, **kwargs)
    return [t.strip() for t in proc.batch_decode(out, skip_special_tokens=True)]


@pytest.mark.parametrize("name", ["english", "multilingual"])
def test_greedy_equals_generate(name, exported):
    """Prompt, language detection, suppress lists, cache handling: the same tokens as
    transformers' greedy generate, even from a random model."""
    src, dest, _ = exported[name]
    clips = _noise_clips()
    got = transcribe_onnx(dest, clips, language=None, max_new_tokens=20)
    assert [g["text"] for g in got] == _generate(src, clips, max_new_tokens=20)
    if name == "english":
        assert {g["language"] for g in got} == {"en"}
    else:  # detected, as transformers' detect_language does
        model = _model(src)
        from transformers import WhisperProcessor

        feats = WhisperProcessor.from_pretrained(src).feature_extractor(
            clips, sampling_rate=16_000, return_tensors="pt"
        )
        ids = model.detect_language(feats.input_features).tolist()
        lang_of = {v: k.strip("<|>") for k, v in model.generation_config.lang_to_id.items()}
        assert [g["language"] for g in got] == [lang_of[i] for i in ids]
    for g, clip in zip(got, clips, strict=True):
        assert g["segments"] == [{"start": 0.0, "end": len(clip) / 16_000, "text": g["text"]}]


def test_language_and_task_options(exported):
    _, dest, _ = exported["multilingual"]
    clip = _noise_clips()[:1]
    assert transcribe_onnx(dest, clip, language="German", max_new_tokens=3)[0]["language"] == "de"
    with pytest.raises(ConfigError, match="unknown language 'klingon'"):
        transcribe_onnx(dest, clip, language="klingon")
    with pytest.raises(ConfigError, match="unknown task 'summarise'"):
        transcribe_onnx(dest, clip, language="en", task="summarise")
    _, en_dest, _ = exported["english"]
    with pytest.raises(ConfigError, match="language 'zh' was asked for, but this model is English"):
        transcribe_onnx(en_dest, clip, language="zh")
    with pytest.raises(DataError, match=r"audio 0 has shape \(2, 16000\)"):
        transcribe_onnx(dest, [np.zeros((2, 16_000), np.float32)], language="en")


def test_not_a_whisper_model_is_a_config_error(tmp_path, tiny_whisper_dir):
    dest = tmp_path / "onnx"
    dest.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="has no config.json: not a transformers model") as e:
        write_onnx(empty, dest)
    assert "WhisperForConditionalGeneration folder" in e.value.hint

    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ConfigError, match="is not a Whisper model: model_type is bert"):
        write_onnx(bert, dest)

    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds a LoRA adapter, not a whole model"):
        write_onnx(adapter, dest)

    no_tokenizer = tmp_path / "weights-only"
    shutil.copytree(tiny_whisper_dir, no_tokenizer)
    for f in ("tokenizer.json", "vocab.json"):
        (no_tokenizer / f).unlink(missing_ok=True)
    with pytest.raises(ConfigError, match=r"lacks tokenizer \(tokenizer.json or vocab.json\)"):
        write_onnx(no_tokenizer, dest)

    (dest / "old.onnx").write_text("")
    with pytest.raises(ConfigError, match="is not empty"):
        write_onnx(tiny_whisper_dir, dest)


def test_large_models_keep_weights_in_external_data(exported):
    """Past the threshold (1.5 GiB; 0 for the English export) each graph's weights go to
    `<graph>.onnx.data`, which onnxruntime finds next to the graph: large-v3's 6 GB take
    this path."""
    src, dest, written = exported["english"]
    names = {p.name for p in written}
    assert names == {p.name for p in dest.iterdir()}
    for graph in onnx_format.GRAPH_FILES:
        assert graph + ".data" in names
        assert (dest / graph).stat().st_size < 1_000_000  # the weights are not inside
    clips = _noise_clips()[:2]
    got = transcribe_onnx(dest, clips, language=None, max_new_tokens=10)
    assert [g["text"] for g in got] == _generate(src, clips, max_new_tokens=10)


# --- slow: real weights on real speech ------------------------------------------------------


def _digit_strings(fsdd: Path, n: int = 10) -> list[np.ndarray]:
    """`n` strings of 3-4 digits, each from one speaker, 0.25 s apart."""
    from fitwhisper.data.audio import load_audio

    rows = [json.loads(line) for line in (fsdd / "manifest.jsonl").read_text().splitlines()]
    by_speaker: dict[str, list[dict]] = {}
    for r in rows:
        by_speaker.setdefault(r["speaker"], []).append(r)
    speakers = sorted(by_speaker)
    rng = np.random.default_rng(0)
    gap = np.zeros(4_000, np.float32)
    clips = []
    for i in range(n):
        pool = by_speaker[speakers[i % len(speakers)]]
        parts = []
        for j in rng.choice(len(pool), 3 + i % 2, replace=False):
            parts += [load_audio(fsdd / pool[j]["audio"]), gap]
        clips.append(np.concatenate(parts[:-1]))
    return clips


@pytest.mark.slow
def test_tiny_en_digits_equal_transformers(tmp_path, shared_data):
    from fitwhisper.models.resolve import resolve_model

    src = Path(resolve_model("offline/tiny.en").path_or_id)
    write_onnx(src, tmp_path)
    clips = _digit_strings(shared_data / "fsdd-train")
    got = transcribe_onnx(tmp_path, clips, language=None, max_new_tokens=48)
    want = _generate(src, clips, max_new_tokens=48)
    same = sum(g["text"] == w for g, w in zip(got, want, strict=True))
    assert same >= 9, list(zip([g["text"] for g in got], want, strict=True))
    assert {g["language"] for g in got} == {"en"}


@pytest.fixture(scope="module")
def base_zh(mandarin_lora_exports) -> tuple[Path, Path]:
    """A Mandarin fine-tune of offline/base (the session's LoRA run, merged: its record says
    zh) and its ONNX export by `fitwhisper export` (tests/shared_runs.py)."""
    return mandarin_lora_exports.merged, mandarin_lora_exports.folder / "onnx"


def _aishell(shared_data: Path, n: int) -> list[np.ndarray]:
    from fitwhisper.data.audio import load_audio

    folder = shared_data / "aishell-s0150"
    rows = [json.loads(line) for line in (folder / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"][:n]
    return [load_audio(folder / r["audio"]) for r in sentences]


@pytest.mark.slow
def test_base_timestamps_equal_transformers(base_zh, shared_data):
    """A ~20 s concatenation: increasing segments, the same as transformers' timestamps."""
    from transformers import WhisperProcessor

    src, dest = base_zh
    pause = np.zeros(8_000, np.float32)
    audio = np.concatenate([x for c in _aishell(shared_data, 4) for x in (c, pause)])
    assert 15 < len(audio) / 16_000 < 30
    got = transcribe_onnx(dest, [audio], language=None, timestamps=True)[0]
    segments = got["segments"]
    assert len(segments) >= 3
    for a, b in zip(segments, segments[1:], strict=False):
        assert a["start"] < a["end"] <= b["start"] < b["end"]
    assert segments[-1]["end"] <= len(audio) / 16_000 + 0.5

    model, proc = _model(src), WhisperProcessor.from_pretrained(src)
    feats = proc.feature_extractor([audio], sampling_rate=16_000, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(feats.input_features, return_timestamps=True, max_new_tokens=224)
    marked = proc.batch_decode(out, skip_special_tokens=True, decode_with_timestamps=True)[0]
    want = [
        {"start": float(a), "end": float(b), "text": t.strip()}
        for a, t, b in re.findall(r"<\|([\d.]+)\|>([^<]*)<\|([\d.]+)\|>", marked)
    ]
    assert segments == want
    assert got["text"] == "".join(s["text"] for s in segments)


@pytest.mark.slow
def test_base_long_file_seeks_like_transformers(base_zh, shared_data):
    """A ~60 s file (two windows and a seam): segments in order inside the file, the
    language recorded, and text as close to transformers' sequential long-form as clips are
    (the windows start where each one's last whole segment ended)."""
    import jiwer
    from transformers import WhisperProcessor

    src, dest = base_zh
    pause = np.zeros(16_000, np.float32)
    clips = _aishell(shared_data, 12)
    audio = np.concatenate([x for c in clips for x in (c, pause)])
    assert 45 < len(audio) / 16_000 < 90
    got = transcribe_onnx(dest, [audio], language=None, timestamps=True)[0]
    segments = got["segments"]
    assert got["language"] == "zh" and len(segments) >= 6
    for a, b in zip(segments, segments[1:], strict=False):
        assert a["start"] <= a["end"] <= b["start"] + 0.02, (a, b)
    assert segments[-1]["end"] <= len(audio) / 16_000 + 0.5
    assert segments[-1]["start"] > 30  # past the first window: it sought on

    model, proc = _model(src), WhisperProcessor.from_pretrained(src)
    feats = proc.feature_extractor([audio], sampling_rate=16_000, return_tensors="pt",
                                   truncation=False, padding="longest",
                                   return_attention_mask=True)  # fmt: skip
    with torch.no_grad():
        out = model.generate(feats.input_features, attention_mask=feats.attention_mask,
                             return_timestamps=True, condition_on_prev_tokens=False)  # fmt: skip
    want = proc.batch_decode(out, skip_special_tokens=True)[0].replace(" ", "")
    assert jiwer.cer(want, got["text"].replace(" ", "")) < 0.05, (want, got["text"])
    # Without timestamps: the same text, one segment spanning the file.
    plain = transcribe_onnx(dest, [audio], language=None)[0]
    assert plain["text"] == got["text"]
    end = round(len(audio) / 16_000, 3)
    assert plain["segments"] == [{"start": 0.0, "end": end, "text": got["text"]}]
