"""whisper.cpp ggml export: the file read back tensor by tensor, and whisper.cpp running it.

Fast tests use tiny random models (a small reader below parses the file independently of
the exporter); slow ones compare whisper.cpp with transformers on real speech.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import time
from pathlib import Path

import numpy as np
import pytest

from fitwhisper.errors import ConfigError, ModelLoadError
from fitwhisper.export.ggml import MODEL_FILE, SIDECAR_FILE, ggml_name, write_ggml
from fitwhisper.export.ggml_run import transcribe_ggml

F32, F16, Q8_0 = 0, 1, 8
# 2-D tensors that whisper.cpp keeps in f32 in every file
KEPT_F32 = {
    "encoder.positional_embedding",
    "decoder.positional_embedding",
    "encoder.conv1.bias",
    "encoder.conv2.bias",
}


# ------------------------------------------------------------------------------ reader


def read_ggml(path: Path) -> dict:
    """Parse a whisper.cpp ggml file: header, filters, tokens, {name: (type, array)}."""
    buf = path.read_bytes()
    pos = 0

    def ints(n: int) -> tuple[int, ...]:
        nonlocal pos
        values = struct.unpack_from(f"<{n}i", buf, pos)
        pos += 4 * n
        return values

    def floats(dtype: str, count: int) -> np.ndarray:
        nonlocal pos
        array = np.frombuffer(buf, dtype, count, pos)
        pos += array.nbytes
        return array

    (magic,) = ints(1)
    hparams = ints(11)
    n_mel, n_fft = ints(2)
    filters = floats("<f4", n_mel * n_fft).reshape(n_mel, n_fft)
    (n_tokens,) = ints(1)
    tokens = []
    for _ in range(n_tokens):
        (length,) = ints(1)
        tokens.append(buf[pos : pos + length])
        pos += length
    tensors = {}
    while pos < len(buf):
        n_dims, length, ttype = ints(3)
        shape = tuple(reversed(ints(n_dims)))
        name = buf[pos : pos + length].decode()
        pos += length
        count = int(np.prod(shape))
        if ttype == F32:
            data = floats("<f4", count).reshape(shape)
        elif ttype == F16:
            data = floats("<f2", count).reshape(shape)
        elif ttype == Q8_0:  # blocks of 32: an f16 scale, then 32 int8
            block = np.dtype([("d", "<f2"), ("qs", "i1", 32)])
            blocks = np.frombuffer(buf, block, count // 32, pos)
            pos += blocks.nbytes
            data = (blocks["d"].astype(np.float32)[:, None] * blocks["qs"]).reshape(shape)
        else:
            raise AssertionError(f"unexpected ggml type {ttype} for {name}")
        assert name not in tensors
        tensors[name] = (ttype, data)
    return {"magic": magic, "hparams": hparams, "filters": filters, "tokens": tokens,
            "tensors": tensors}  # fmt: skip


def expected_tensors(model) -> dict[str, np.ndarray]:
    """whisper.cpp's tensors, taken from the transformers modules (not from the exporter's
    name table), as float32 arrays."""
    m = model.model
    out = {
        "encoder.conv1.weight": m.encoder.conv1.weight,
        "encoder.conv1.bias": m.encoder.conv1.bias[:, None],
        "encoder.conv2.weight": m.encoder.conv2.weight,
        "encoder.conv2.bias": m.encoder.conv2.bias[:, None],
        "encoder.positional_embedding": m.encoder.embed_positions.weight,
        "encoder.ln_post.weight": m.encoder.layer_norm.weight,
        "encoder.ln_post.bias": m.encoder.layer_norm.bias,
        "decoder.token_embedding.weight": m.decoder.embed_tokens.weight,
        "decoder.positional_embedding": m.decoder.embed_positions.weight,
        "decoder.ln.weight": m.decoder.layer_norm.weight,
        "decoder.ln.bias": m.decoder.layer_norm.bias,
    }

    def attention(prefix: str, attn) -> dict:
        return {
            f"{prefix}.query.weight": attn.q_proj.weight,
            f"{prefix}.query.bias": attn.q_proj.bias,
            f"{prefix}.key.weight": attn.k_proj.weight,  # Whisper's key has no bias
            f"{prefix}.value.weight": attn.v_proj.weight,
            f"{prefix}.value.bias": attn.v_proj.bias,
            f"{prefix}.out.weight": attn.out_proj.weight,
            f"{prefix}.out.bias": attn.out_proj.bias,
        }

    def block(prefix: str, layer) -> dict:
        return {
            **attention(f"{prefix}.attn", layer.self_attn),
            f"{prefix}.attn_ln.weight": layer.self_attn_layer_norm.weight,
            f"{prefix}.attn_ln.bias": layer.self_attn_layer_norm.bias,
            f"{prefix}.mlp.0.weight": layer.fc1.weight,
            f"{prefix}.mlp.0.bias": layer.fc1.bias,
            f"{prefix}.mlp.2.weight": layer.fc2.weight,
            f"{prefix}.mlp.2.bias": layer.fc2.bias,
            f"{prefix}.mlp_ln.weight": layer.final_layer_norm.weight,
            f"{prefix}.mlp_ln.bias": layer.final_layer_norm.bias,
        }

    for i, layer in enumerate(m.encoder.layers):
        out |= block(f"encoder.blocks.{i}", layer)
    for i, layer in enumerate(m.decoder.layers):
        out |= block(f"decoder.blocks.{i}", layer)
        out |= attention(f"decoder.blocks.{i}.cross_attn", layer.encoder_attn)
        out[f"decoder.blocks.{i}.cross_attn_ln.weight"] = layer.encoder_attn_layer_norm.weight
        out[f"decoder.blocks.{i}.cross_attn_ln.bias"] = layer.encoder_attn_layer_norm.bias
    return {k: v.detach().float().numpy() for k, v in out.items()}


# ---------------------------------------------------------------------------- fixtures


def _standard_copy(src: Path, out: Path, *, language: str | None = None) -> Path:
    """`src` (a tiny random Whisper) rebuilt with whisper.cpp's layer sizes (MLP 4 x
    d_model, 3 decoder layers: 2 would trip whisper.cpp's distil-model heuristic)."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperProcessor

    config = WhisperConfig.from_pretrained(src)
    config.encoder_ffn_dim = config.decoder_ffn_dim = 4 * config.d_model
    config.decoder_layers = 3
    torch.manual_seed(1)
    model = WhisperForConditionalGeneration(config)
    # Random weights would ramble for 224 tokens a window; make the decoder's output a
    # constant that end-of-text matches best, so whisper.cpp decodes in milliseconds.
    with torch.no_grad():
        decoder, direction = model.model.decoder, torch.randn(config.d_model)
        decoder.layer_norm.weight.zero_()
        decoder.layer_norm.bias.copy_(direction)
        decoder.embed_tokens.weight[config.eos_token_id] = 10 * direction
    model.generation_config = WhisperForConditionalGeneration.from_pretrained(src).generation_config
    if language:
        model.generation_config.language, model.generation_config.task = language, "transcribe"
    model.save_pretrained(out)
    WhisperProcessor.from_pretrained(src).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def cpp_en(tmp_path_factory, tiny_whisper_dir: Path) -> Path:
    return _standard_copy(tiny_whisper_dir, tmp_path_factory.mktemp("cpp-en"))


@pytest.fixture(scope="module")
def cpp_zh(tmp_path_factory, tiny_multilingual_dir: Path) -> Path:
    """A tiny random multilingual 'fine-tune' whose generation config says Mandarin."""
    return _standard_copy(tiny_multilingual_dir, tmp_path_factory.mktemp("cpp-zh"), language="zh")


def _tone(seconds: float = 2.0) -> np.ndarray:
    t = np.arange(int(seconds * 16_000)) / 16_000
    return (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


# -------------------------------------------------------------------------- fast tests


def test_names_follow_whisper_cpp():
    assert ggml_name("model.encoder.conv1.weight") == "encoder.conv1.weight"
    assert ggml_name("model.encoder.embed_positions.weight") == "encoder.positional_embedding"
    assert ggml_name("model.encoder.layer_norm.bias") == "encoder.ln_post.bias"
    assert ggml_name("model.decoder.layer_norm.weight") == "decoder.ln.weight"
    assert ggml_name("model.encoder.layers.0.self_attn.k_proj.weight") == (
        "encoder.blocks.0.attn.key.weight"
    )
    assert ggml_name("model.decoder.layers.11.encoder_attn.k_proj.weight") == (
        "decoder.blocks.11.cross_attn.key.weight"
    )
    assert ggml_name("model.decoder.layers.2.fc2.bias") == "decoder.blocks.2.mlp.2.bias"
    assert ggml_name("model.decoder.layers.0.self_attn.q_proj.lora_A.weight") is None


@pytest.mark.parametrize(
    "n_vocab, eot, transcribe, no_timestamps, languages",
    [(51864, 50256, 50358, 50362, 0), (51865, 50257, 50359, 50363, 99),
     (51866, 50257, 50360, 50364, 100)],  # tiny.en ... large-v2, large-v3 and turbo
)  # fmt: skip
def test_special_ids_as_whisper_cpp_derives_them(
    n_vocab, eot, transcribe, no_timestamps, languages
):
    from fitwhisper.export.ggml import _special_ids

    ids, n_langs, multilingual = _special_ids(n_vocab)
    assert (ids["eot"], ids["transcribe"], ids["not"]) == (eot, transcribe, no_timestamps)
    assert ids["beg"] == no_timestamps + 1 and ids["sot"] == eot + 1
    assert multilingual == (languages > 0) and (n_langs == languages or not multilingual)


def test_f16_file_reads_back_as_the_model(cpp_en: Path, tmp_path: Path):
    from transformers import WhisperConfig, WhisperForConditionalGeneration, WhisperTokenizer

    paths = write_ggml(cpp_en, tmp_path)
    assert paths == [tmp_path / MODEL_FILE, tmp_path / SIDECAR_FILE]
    f = read_ggml(paths[0])
    cfg = WhisperConfig.from_pretrained(cpp_en)
    assert f["magic"] == 0x67676D6C
    assert f["hparams"] == (
        cfg.vocab_size, cfg.max_source_positions, cfg.d_model, cfg.encoder_attention_heads,
        cfg.encoder_layers, cfg.max_target_positions, cfg.d_model, cfg.decoder_attention_heads,
        cfg.decoder_layers, cfg.num_mel_bins, 1,
    )  # fmt: skip
    # the filterbank: what openai-whisper ships (and whisper.cpp's converter copies)
    assert f["filters"].shape == (80, 201)
    whisper_assets = pytest.importorskip("whisper").__file__
    npz = np.load(Path(whisper_assets).parent / "assets" / "mel_filters.npz")
    np.testing.assert_allclose(f["filters"], npz["mel_80"], atol=1e-7)

    # English-only: the regular tokens 0..50255, as raw bytes; whisper.cpp adds the rest
    tok = WhisperTokenizer.from_pretrained(cpp_en)
    assert len(f["tokens"]) == 50256 == tok.convert_tokens_to_ids("<|endoftext|>")
    for word in (" hello", " world", "Hello", " 1", "é"):
        for i in tok.encode(word, add_special_tokens=False):
            assert (
                f["tokens"][i]
                == tok.convert_tokens_to_string([tok.convert_ids_to_tokens(i)]).encode()
            )

    model = WhisperForConditionalGeneration.from_pretrained(cpp_en)
    want = expected_tensors(model)
    assert set(f["tensors"]) == set(want)
    for name, expected in want.items():
        ttype, data = f["tensors"][name]
        assert data.shape == expected.shape, name
        if name in KEPT_F32 or expected.ndim == 1:
            assert ttype == F32, name
            np.testing.assert_array_equal(data, expected, err_msg=name)
        else:  # 2-D weights and conv kernels
            assert ttype == F16, name
            np.testing.assert_array_equal(data, expected.astype(np.float16), err_msg=name)
    sidecar = json.loads(paths[1].read_text())
    assert sidecar["language"] == "en" and sidecar["multilingual"] is False
    assert sidecar["dtype"] == "f16" and sidecar["suppress_non_speech"] is True


def test_trained_position_table_travels(cpp_en: Path, tmp_path: Path):
    """A fine-tune's encoder position table is written as stored, not recomputed."""
    from safetensors.torch import load_file, save_file

    model_dir = tmp_path / "model"
    shutil.copytree(cpp_en, model_dir)
    weights = load_file(model_dir / "model.safetensors")
    key = "model.encoder.embed_positions.weight"
    weights[key] = weights[key] + 0.125
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    out.mkdir()
    f = read_ggml(write_ggml(model_dir, out)[0])
    np.testing.assert_array_equal(
        f["tensors"]["encoder.positional_embedding"][1], weights[key].numpy()
    )


def test_f32_and_q8_0(cpp_en: Path, tmp_path: Path):
    from transformers import WhisperForConditionalGeneration

    want = expected_tensors(WhisperForConditionalGeneration.from_pretrained(cpp_en))
    (tmp_path / "f32").mkdir()
    f32 = read_ggml(write_ggml(cpp_en, tmp_path / "f32", dtype="f32")[0])
    assert f32["hparams"][-1] == 0
    for name, (ttype, data) in f32["tensors"].items():
        assert ttype == F32
        np.testing.assert_array_equal(data, want[name], err_msg=name)

    pytest.importorskip("pywhispercpp")
    (tmp_path / "q8").mkdir()
    q8 = read_ggml(write_ggml(cpp_en, tmp_path / "q8", dtype="q8_0")[0])
    assert q8["hparams"][-1] == 2007  # GGML_QNT_VERSION 2 x 1000 + GGML_FTYPE_MOSTLY_Q8_0
    for name, (ttype, data) in q8["tensors"].items():
        expected = want[name]
        if expected.ndim == 2 and name not in KEPT_F32:
            assert ttype == Q8_0, name
            # within half a quantisation step of its 32-value block, plus the rounding of
            # the block's scale to f16 (up to 127 steps x 2^-11)
            blocks = expected.reshape(-1, 32)
            step = np.abs(blocks).max(axis=1, keepdims=True) / 127
            err = np.abs(data.reshape(-1, 32) - blocks)
            assert (err <= (0.5 + 127 / 2048) * step + 1e-7).all(), name
        else:
            assert ttype == (F16 if expected.ndim == 3 else F32), name


def test_multilingual_vocabulary_and_recorded_language(cpp_zh: Path, tmp_path: Path):
    paths = write_ggml(cpp_zh, tmp_path)
    f = read_ggml(paths[0])
    assert f["hparams"][0] == 51865
    # ids 0..50256 (50256 is the empty token of the multilingual vocabulary)
    assert len(f["tokens"]) == 50257 and f["tokens"][50256] == b""
    sidecar = json.loads(paths[1].read_text())
    assert sidecar["language"] == "zh" and sidecar["task"] == "transcribe"
    assert sidecar["multilingual"] is True


def test_older_fine_tunes_record_language_in_forced_ids(cpp_zh: Path, tmp_path: Path):
    model_dir = tmp_path / "model"
    shutil.copytree(cpp_zh, model_dir)
    gen_path = model_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text())
    gen.pop("language", None), gen.pop("task", None)
    gen["forced_decoder_ids"] = [[1, 50266], [2, 50358], [3, 50363]]  # <|ja|> translate notimes
    gen_path.write_text(json.dumps(gen))
    out = tmp_path / "out"
    out.mkdir()
    sidecar = json.loads(write_ggml(model_dir, out)[1].read_text())
    assert (sidecar["language"], sidecar["task"]) == ("ja", "translate")


def test_not_a_whisper_folder(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match="no config.json") as e:
        write_ggml(tmp_path / "nothing", out)
    assert e.value.hint
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(ConfigError, match="not a Whisper model"):
        write_ggml(bert, out)
    assert not any(out.iterdir())


def test_refuses_what_whisper_cpp_cannot_hold(tiny_whisper_dir: Path, cpp_en: Path, tmp_path):
    # the conftest model's MLP is 2 x d_model; whisper.cpp only allocates 4 x d_model
    with pytest.raises(ConfigError, match="4 x d_model"):
        write_ggml(tiny_whisper_dir, tmp_path)
    with pytest.raises(ConfigError, match="unknown ggml dtype"):
        write_ggml(cpp_en, tmp_path, dtype="int8")
    (tmp_path / "junk").write_text("x")
    with pytest.raises(ConfigError, match="not empty"):
        write_ggml(cpp_en, tmp_path)


def test_refuses_an_untied_output_head(cpp_en: Path, tmp_path: Path):
    from safetensors.torch import load_file, save_file

    model_dir = tmp_path / "model"
    shutil.copytree(cpp_en, model_dir)
    weights = load_file(model_dir / "model.safetensors")
    weights["proj_out.weight"] = weights["model.decoder.embed_tokens.weight"] * 2
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match="untied"):
        write_ggml(model_dir, out)
    assert not (out / MODEL_FILE).exists()


def test_whisper_cpp_defaults_to_english():
    """Why the sidecar exists: whisper.cpp's default language is "en", not auto."""
    pw = pytest.importorskip("_pywhispercpp")
    params = pw.whisper_full_default_params(pw.whisper_sampling_strategy.WHISPER_SAMPLING_GREEDY)
    assert params.language == "en"


def test_whisper_cpp_runs_the_export(cpp_en: Path, cpp_zh: Path, tmp_path: Path, caplog):
    pytest.importorskip("pywhispercpp")
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    en, zh, q8 = tmp_path / "en", tmp_path / "zh", tmp_path / "q8"
    for d in (en, zh, q8):
        d.mkdir()
    write_ggml(cpp_en, en)
    write_ggml(cpp_zh, zh)
    write_ggml(cpp_zh, q8, dtype="q8_0")

    # random weights transcribe garbage; what matters is that whisper.cpp loads and runs them
    (r,) = transcribe_ggml(en, [_tone()], language=None, timestamps=True)
    assert r["language"] == "en" and isinstance(r["text"], str)
    for seg in r["segments"]:
        assert 0 <= seg["start"] <= seg["end"]
    with pytest.raises(ConfigError, match="English-only"):
        transcribe_ggml(en, [_tone()], language="zh")

    # the fine-tune's language from the sidecar, for short and empty clips too
    results = transcribe_ggml(q8, [_tone(0.3), _tone(), np.zeros(0, np.float32)], language=None)
    assert [r["language"] for r in results] == ["zh", "zh", "zh"]
    for r, seconds in zip(results, (0.3, 2.0, 0.0), strict=True):
        for seg in r["segments"]:  # no timestamps: the window, cut to the clip
            assert 0.0 == seg["start"] <= seg["end"] <= seconds
    assert results[2] == {"text": "", "language": "zh", "segments": []}
    # without a sidecar: whisper.cpp's auto-detection, never its default English
    (zh / SIDECAR_FILE).unlink()
    with caplog.at_level("DEBUG", logger="fitwhisper.export.ggml_run"):
        (r,) = transcribe_ggml(zh, [_tone()], language=None)
    assert "auto-detected language" in caplog.text  # whisper.cpp's log, routed to ours
    assert r["language"] in LANGUAGES
    (r,) = transcribe_ggml(zh, [_tone()], language="German", task="translate")
    assert r["language"] == "de"


def test_a_damaged_file_is_a_load_error(cpp_en: Path, tmp_path: Path):
    pytest.importorskip("pywhispercpp")
    good = write_ggml(cpp_en, tmp_path)[0]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / MODEL_FILE).write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(ModelLoadError, match="cannot load"):
        transcribe_ggml(bad, [_tone()], language=None)
    (bad / MODEL_FILE).write_bytes(b"not a model at all, not at all")
    with pytest.raises(ConfigError, match="not a whisper.cpp ggml model"):
        transcribe_ggml(bad, [_tone()], language=None)


# -------------------------------------------------------------------------- slow tests


_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()


def _normalise(text: str) -> str:
    """Lower case, digits for digit words, nothing but letters and digits."""
    text = re.sub(r"[^0-9a-z ]", " ", text.lower())
    return "".join(str(_DIGIT_WORDS.index(w)) if w in _DIGIT_WORDS else w for w in text.split())


def _digit_strings(data: Path, n: int = 10) -> tuple[list[np.ndarray], list[str]]:
    """`n` clips of 3-4 digits by one speaker, 0.25 s apart, and their digits."""
    from fitwhisper.data.audio import load_audio

    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text().splitlines()]
    speakers = sorted({r["speaker"] for r in rows})
    rng = np.random.default_rng(7)
    gap = np.zeros(4000, np.float32)
    clips, digits = [], []
    for i in range(n):
        speaker = speakers[i % len(speakers)]
        mine = [r for r in rows if r["speaker"] == speaker]
        picked = [mine[j] for j in rng.choice(len(mine), size=3 + i % 2, replace=False)]
        parts = [gap]
        for r in picked:
            parts += [load_audio(data / r["audio"]), gap]
        clips.append(np.concatenate(parts))
        digits.append("".join(str(r["digit"]) for r in picked))
    return clips, digits


def _transformers_greedy(model_dir, clips: list[np.ndarray], max_new_tokens=64) -> list[str]:
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    processor = WhisperProcessor.from_pretrained(model_dir)
    model = WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    features = processor(clips, sampling_rate=16_000, return_tensors="pt").input_features
    with torch.inference_mode():
        # greedy (the generation config's default); a cap, as tiny.en loops on some clips
        ids = model.generate(features, max_new_tokens=max_new_tokens)
    return processor.batch_decode(ids, skip_special_tokens=True)


@pytest.mark.slow
def test_tiny_en_agrees_with_transformers(shared_data: Path, tmp_path: Path):
    pytest.importorskip("pywhispercpp")
    from fitwhisper.models.resolve import resolve_model

    model_dir = Path(resolve_model("offline/tiny.en").path_or_id)
    clips, digits = _digit_strings(shared_data / "fsdd-train")
    t = time.perf_counter()
    reference = [_normalise(h) for h in _transformers_greedy(model_dir, clips)]
    report = [
        f"transformers greedy, batch of {len(clips)}: {time.perf_counter() - t:.1f} s, "
        f"digits right {sum(map(str.__eq__, reference, digits))}/10"
    ]
    for dtype in ("f16", "q8_0"):
        out = tmp_path / dtype
        out.mkdir()
        write_ggml(model_dir, out, dtype=dtype)
        t = time.perf_counter()
        results = transcribe_ggml(out, clips, language=None)
        seconds = time.perf_counter() - t
        texts = [_normalise(r["text"]) for r in results]
        same = sum(map(str.__eq__, texts, reference))
        report.append(
            f"whisper.cpp {dtype}: {seconds:.1f} s, agrees with transformers on {same}/10, "
            f"digits right {sum(map(str.__eq__, texts, digits))}/10"
        )
        report += [
            f"  differs: {a!r} vs {b!r}" for a, b in zip(texts, reference, strict=True) if a != b
        ]
        assert all(r["language"] == "en" for r in results)
        assert same >= 8, "\n".join(report)
    print("\n".join(report))
