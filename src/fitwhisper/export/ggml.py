"""Export a transformers Whisper folder as a whisper.cpp ggml file.

The file (`ggml-model.bin`) has the layout of whisper.cpp's `models/convert-h5-to-ggml.py`,
all little-endian:

    int32 magic 0x67676d6c ("ggml")
    11 x int32 hparams: n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
        n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels, ftype
    mel filterbank: int32 n_mel, int32 n_fft (201), then n_mel x n_fft float32
    vocabulary: int32 count, then per token int32 length + its raw bytes (the byte-level
        BPE strings decoded back to bytes), ids 0..count-1
    tensors until EOF: int32 n_dims, int32 name length, int32 ggml type, n_dims x int32
        sizes (fastest-varying first, i.e. the numpy shape reversed), name, raw data

What travels: every weight under whisper.cpp's (openai's) tensor names, including the
model's own trained encoder and decoder position tables; the architecture; the mel
filterbank; the regular BPE tokens. whisper.cpp derives all special tokens (end of text,
start of transcript, languages, task, timestamps) from n_vocab, so the export checks that
the tokenizer's special ids are where whisper.cpp will look for them.

What does not travel, so the sidecar `fitwhisper_ggml.json` keeps it: the fine-tune's
language and task (whisper.cpp's own default language is "en" whatever the model, so a
Mandarin fine-tune run without it transcribes as English) and whether non-speech tokens
are suppressed. Lost altogether: the rest of generation_config (suppress lists, alignment
heads, max_length), an untied output projection (whisper.cpp reuses the token embedding;
such a model is refused), unmerged LoRA adapters (merge first), and any added tokens
beyond Whisper's own layout (refused).

dtype: "f32" (the converter's layout, for inspection: whisper.cpp 1.8's CPU convolution
aborts on f32 kernels, ggml-org/whisper.cpp#2557, so the CLI does not offer it); "f16"
(whisper.cpp's default: 2-D weights and conv kernels f16, biases, norms and position tables
f32); or whisper.cpp's integer quantisations "q8_0", "q5_0", "q5_1",
"q4_0", "q4_1" (its `quantize` tool's rules: every 2-D weight but the position tables).
Quantising calls `ggml_quantize_chunk` in the libggml-base that pywhispercpp's wheel ships,
so the blocks are byte-for-byte ggml's; there is no quantiser on PyPI otherwise.

`ggml_run.transcribe_ggml` runs the file with whisper.cpp through pywhispercpp (the export
extra); `ggml_quant` holds the quantiser.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fitwhisper.errors import ConfigError
from fitwhisper.export.ggml_quant import Quantiser
from fitwhisper.export.openai_format import known_openai_name
from fitwhisper.paths import as_storage_error
from fitwhisper.whisper_facts import language_code, token_text

log = logging.getLogger(__name__)

MODEL_FILE = "ggml-model.bin"
SIDECAR_FILE = "fitwhisper_ggml.json"

GGML_MAGIC = 0x67676D6C
_QNT_VERSION = 2  # ggml's GGML_QNT_VERSION; quantised files store it in ftype (x1000)
_QNT_FACTOR = 1000

# dtype -> (file ftype, ggml type of the 2-D weights). Values from ggml.h's enums.
DTYPES: dict[str, tuple[int, int]] = {
    "f32": (0, 0),
    "f16": (1, 1),
    "q4_0": (2, 2),
    "q4_1": (3, 3),
    "q8_0": (7, 8),
    "q5_0": (8, 6),
    "q5_1": (9, 7),
}
_F32, _F16 = 0, 1
_QUANT_BLOCK = 32  # values per block in all the q* types above

# Token ids whisper.cpp assumes for an English-only vocabulary (n_vocab 51864); for a
# multilingual one it shifts them (see `_special_ids`).
_EN_IDS = {
    "eot": 50256,
    "sot": 50257,
    "translate": 50357,
    "transcribe": 50358,
    "solm": 50359,
    "prev": 50360,
    "nosp": 50361,
    "not": 50362,
    "beg": 50363,
}
_SPECIAL_TEXT = {
    "eot": ("<|endoftext|>",),
    "sot": ("<|startoftranscript|>",),
    "translate": ("<|translate|>",),
    "transcribe": ("<|transcribe|>",),
    "solm": ("<|startoflm|>",),
    "prev": ("<|startofprev|>",),
    "nosp": ("<|nospeech|>", "<|nocaptions|>"),
    "not": ("<|notimestamps|>",),
    "beg": ("<|0.00|>",),
}

# Kept in f32 in every file, as whisper.cpp's loader allocates them.
_ALWAYS_F32 = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}


def ggml_name(hf_name: str) -> str | None:
    """whisper.cpp's tensor name for a transformers state-dict key, or None if it has none.
    whisper.cpp's converters keep openai-whisper's names, so this is `openai_format`'s map.

    >>> ggml_name("model.decoder.layers.3.encoder_attn.k_proj.weight")
    'decoder.blocks.3.cross_attn.key.weight'
    """
    return known_openai_name(hf_name.removeprefix("model."))


# --------------------------------------------------------------------------------- export


def check_ggml(model_dir: Path, *, dtype: str = "f16") -> None:
    """Every refusal of `write_ggml` that needs no weights (config, vocabulary layout,
    dtype), so an export of several formats can stop before it writes any.

    Raises:
        ConfigError: as `write_ggml`.
    """
    if dtype not in DTYPES:
        raise ConfigError(f"unknown ggml dtype {dtype!r}", hint="use " + ", ".join(DTYPES))
    model_dir = Path(model_dir)
    config = _whisper_config(model_dir)
    _vocabulary(model_dir, _hparams(config, model_dir)["n_vocab"])


def write_ggml(model_dir: Path, dest: Path, *, dtype: str = "f16") -> list[Path]:
    """Write `dest/ggml-model.bin` (whisper.cpp) and `dest/fitwhisper_ggml.json`.

    Args:
        model_dir: a saved transformers WhisperForConditionalGeneration folder (config.json,
            generation_config.json, tokenizer files, safetensors), LoRA already merged.
        dest: an existing, empty folder.
        dtype: one of `DTYPES` ("f16" as whisper.cpp's converter; "q8_0" etc. quantised).

    Returns:
        The paths written: the model file, then the sidecar.

    Raises:
        ConfigError: not a Whisper folder, a model whisper.cpp cannot represent (MLP width
            other than 4 x d_model, untied output projection, a non-Whisper vocabulary
            layout, unmerged adapters), an unknown dtype, or `dest` not an empty folder.
    """
    model_dir, dest = Path(model_dir), Path(dest)
    if dtype not in DTYPES:
        raise ConfigError(f"unknown ggml dtype {dtype!r}", hint="use " + ", ".join(DTYPES))
    if not dest.is_dir():
        raise ConfigError(f"{dest} is not a folder", hint="create an empty folder for the export")
    if any(dest.iterdir()):
        raise ConfigError(f"{dest} is not empty", hint="export into an empty folder")
    config = _whisper_config(model_dir)
    hp = _hparams(config, model_dir)
    tokens, multilingual = _vocabulary(model_dir, hp["n_vocab"])
    filters = mel_filters(hp["n_mels"])
    quantiser = Quantiser(DTYPES[dtype][1]) if dtype.startswith("q") else None

    out = dest / MODEL_FILE
    try:
        with open(out, "wb") as f:
            ftype = DTYPES[dtype][0]
            if quantiser is not None:
                ftype += _QNT_VERSION * _QNT_FACTOR  # as whisper.cpp's quantize tool writes
            f.write(struct.pack("<i", GGML_MAGIC))
            f.write(struct.pack("<11i", *[hp[k] for k in HPARAM_ORDER], ftype))
            f.write(struct.pack("<2i", *filters.shape))
            f.write(filters.astype("<f4").tobytes())
            f.write(struct.pack("<i", len(tokens)))
            for tok in tokens:
                f.write(struct.pack("<i", len(tok)))
                f.write(tok)
            for name, array in _ggml_tensors(model_dir, hp):
                _write_tensor(f, name, array, dtype, quantiser)
    except BaseException as e:
        out.unlink(missing_ok=True)  # never leave a truncated model behind
        storage = as_storage_error(e, out)  # a full disk is the user's to fix, not a bug
        if storage is None or storage is e:
            raise
        raise storage from e
    sidecar = dest / SIDECAR_FILE
    info = _sidecar(model_dir, config, hp, dtype, multilingual)
    sidecar.write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    log.info("wrote %s (%s, %.1f MB)", out, dtype, out.stat().st_size / 1e6)
    return [out, sidecar]


HPARAM_ORDER = (
    "n_vocab",
    "n_audio_ctx",
    "n_audio_state",
    "n_audio_head",
    "n_audio_layer",
    "n_text_ctx",
    "n_text_state",
    "n_text_head",
    "n_text_layer",
    "n_mels",
)


def _whisper_config(model_dir: Path) -> dict[str, Any]:
    hint = "pass a saved transformers Whisper folder (config.json with model_type whisper)"
    path = model_dir / "config.json"
    if not path.is_file():
        raise ConfigError(f"{model_dir} is not a transformers model folder (no config.json)", hint)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read: {e}", hint=hint) from e
    if not isinstance(config, dict) or config.get("model_type") != "whisper":
        kind = config.get("model_type") if isinstance(config, dict) else None
        raise ConfigError(f"{model_dir} is not a Whisper model (model_type {kind!r})", hint)
    if (model_dir / "adapter_config.json").is_file():
        raise ConfigError(
            f"{model_dir} holds a LoRA adapter, not a merged model",
            hint="merge the adapter into its base and save the result first",
        )
    return config


def _hparams(config: dict[str, Any], model_dir: Path) -> dict[str, int]:
    try:
        return _hparams_of(config, model_dir)
    except (KeyError, TypeError) as e:
        raise ConfigError(
            f"{model_dir}/config.json lacks Whisper's setting {e}",
            hint="save the model with transformers' save_pretrained",
        ) from e


def _hparams_of(config: dict[str, Any], model_dir: Path) -> dict[str, int]:
    d = config["d_model"]
    for side in ("encoder", "decoder"):
        # whisper.cpp allocates the MLP as 4 x d_model, like every released Whisper.
        if config[f"{side}_ffn_dim"] != 4 * d:
            raise ConfigError(
                f"{model_dir}: {side}_ffn_dim {config[f'{side}_ffn_dim']} is not 4 x d_model "
                f"({4 * d}); whisper.cpp cannot hold this architecture",
                hint="export a model with Whisper's standard layer sizes",
            )
    return {
        "n_vocab": config["vocab_size"],
        "n_audio_ctx": config["max_source_positions"],
        "n_audio_state": d,
        "n_audio_head": config["encoder_attention_heads"],
        "n_audio_layer": config["encoder_layers"],
        # the decoder position table's length (convert-h5-to-ggml writes max_length, which
        # is the same 448 for every released model but is a generation setting)
        "n_text_ctx": config["max_target_positions"],
        "n_text_state": d,
        "n_text_head": config["decoder_attention_heads"],
        "n_text_layer": config["decoder_layers"],
        "n_mels": config["num_mel_bins"],
    }


def mel_filters(n_mels: int) -> np.ndarray:
    """Whisper's slaney mel filterbank, (n_mels, 201) float32: what openai-whisper ships in
    `assets/mel_filters.npz` (equal within 1e-8), computed by transformers' feature extractor."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=n_mels).mel_filters.T.astype(np.float32)


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte-level BPE alphabet: printable bytes stand for themselves, the
    other 68 byte values are shifted to code points 256 and up."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    shifted = sorted(set(range(256)) - set(printable))
    table.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return table


def _special_ids(n_vocab: int) -> tuple[dict[str, int], int, bool]:
    """The special-token ids whisper.cpp derives from n_vocab (its whisper_model_load), the
    number of language tokens, and whether it treats the model as multilingual."""
    multilingual = n_vocab >= 51865
    n_langs = n_vocab - 51765 - (1 if multilingual else 0)
    ids = dict(_EN_IDS)
    if multilingual:
        shift = n_langs - 98
        ids = {k: v + (1 if k in ("eot", "sot") else shift) for k, v in ids.items()}
    return ids, n_langs, multilingual


def _vocabulary(model_dir: Path, n_vocab: int) -> tuple[list[bytes], bool]:
    """The regular BPE tokens as bytes (ids 0..eot-1), after checking that the tokenizer's
    special tokens sit where whisper.cpp expects them."""
    from transformers import AutoTokenizer
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as e:  # a folder without tokenizer files, or broken ones
        raise ConfigError(
            f"{model_dir}: the tokenizer cannot be loaded ({type(e).__name__}: {e})",
            hint="save the processor (tokenizer files) with the model",
        ) from e
    vocab: dict[str, int] = tokenizer.get_vocab()
    ids, n_langs, multilingual = _special_ids(n_vocab)
    wrong = []
    for key, texts in _SPECIAL_TEXT.items():
        found = [vocab[t] for t in texts if t in vocab]
        # the timestamp tokens are missing from some saved tokenizers; whisper.cpp needs none
        if (found or key != "beg") and ids[key] not in found:
            wrong.append(f"{texts[0]} is {found[0] if found else 'missing'}, not {ids[key]}")
    if multilingual:
        for i, code in enumerate(list(LANGUAGES)[:n_langs]):
            if vocab.get(f"<|{code}|>") != ids["sot"] + 1 + i:
                wrong.append(f"<|{code}|> is {vocab.get(f'<|{code}|>')}, not {ids['sot'] + 1 + i}")
    if wrong:
        raise ConfigError(
            f"{model_dir}: the vocabulary (vocab_size {n_vocab}) is not laid out as whisper.cpp "
            "assumes: " + "; ".join(wrong[:3]) + ("; ..." if len(wrong) > 3 else ""),
            hint="only Whisper's own vocabularies (51864, 51865, 51866 tokens) can be exported",
        )
    regular = sorted((i, t) for t, i in vocab.items() if i < ids["eot"])
    if [i for i, _ in regular] != list(range(ids["eot"])):
        raise ConfigError(
            f"{model_dir}: token ids below {ids['eot']} are not contiguous",
            hint="only Whisper's own vocabularies can be exported",
        )
    decode = _byte_decoder()
    try:
        tokens = [bytes(decode[c] for c in text) for _, text in regular]
    except KeyError as e:
        raise ConfigError(
            f"{model_dir}: token text {e} is not byte-level BPE",
            hint="only Whisper's own (byte-level BPE) tokenizers can be exported",
        ) from e
    return tokens, multilingual


def _state_dict(model_dir: Path) -> Iterator[tuple[str, Any]]:
    """(name, torch tensor) pairs, one at a time from safetensors (large-v3 never needs to
    be in memory whole); other formats through transformers."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        paths = [model_dir / f for f in files]
    elif (model_dir / "model.safetensors").is_file():
        paths = [model_dir / "model.safetensors"]
    else:
        paths = []
    if paths:
        from safetensors import safe_open

        for path in paths:
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():
                    yield key, f.get_tensor(key)
        return
    from transformers import WhisperForConditionalGeneration

    try:
        model = WhisperForConditionalGeneration.from_pretrained(str(model_dir))
    except Exception as e:
        raise ConfigError(
            f"{model_dir}: no loadable weights ({type(e).__name__}: {e})",
            hint="save the model with save_pretrained (safetensors)",
        ) from e
    yield from model.state_dict().items()


def _ggml_tensors(model_dir: Path, hp: dict[str, int]) -> Iterator[tuple[str, np.ndarray]]:
    """whisper.cpp's tensors as float32 arrays under its names, checked against the
    shapes its loader allocates."""
    want = _expected_shapes(hp)
    seen: set[str] = set()
    token_embedding = proj_out = None
    for key, tensor in _state_dict(model_dir):
        if key.endswith("proj_out.weight"):
            proj_out = tensor
            continue
        name = ggml_name(key)
        if name is None:
            hint = "merge LoRA adapters into the model first" if "lora" in key else None
            raise ConfigError(f"{model_dir}: weight {key} has no whisper.cpp counterpart", hint)
        array = tensor.detach().float().cpu().numpy()
        if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
            array = array.reshape(-1, 1)  # the loader's [1, n_state] (ne0 = 1)
        if array.shape != want[name]:
            raise ConfigError(
                f"{model_dir}: {key} has shape {array.shape}, whisper.cpp expects {want[name]}"
            )
        if name == "decoder.token_embedding.weight":
            token_embedding = tensor
        seen.add(name)
        yield name, array
    if missing := sorted(set(want) - seen):
        raise ConfigError(
            f"{model_dir}: {len(missing)} weights missing, e.g. {missing[0]}",
            hint="save the complete model with save_pretrained",
        )
    # whisper.cpp computes logits with the token embedding: an untied head would be lost.
    if proj_out is not None and token_embedding is not None:
        if not bool((proj_out.float() == token_embedding.float()).all()):
            raise ConfigError(
                f"{model_dir}: proj_out differs from the token embedding (untied output head)",
                hint="whisper.cpp ties the two; retrain with tied embeddings to export",
            )


def _expected_shapes(hp: dict[str, int]) -> dict[str, tuple[int, ...]]:
    d, mels, vocab = hp["n_audio_state"], hp["n_mels"], hp["n_vocab"]
    shapes: dict[str, tuple[int, ...]] = {
        "encoder.conv1.weight": (d, mels, 3),
        "encoder.conv1.bias": (d, 1),
        "encoder.conv2.weight": (d, d, 3),
        "encoder.conv2.bias": (d, 1),
        "encoder.positional_embedding": (hp["n_audio_ctx"], d),
        "encoder.ln_post.weight": (d,),
        "encoder.ln_post.bias": (d,),
        "decoder.token_embedding.weight": (vocab, d),
        "decoder.positional_embedding": (hp["n_text_ctx"], d),
        "decoder.ln.weight": (d,),
        "decoder.ln.bias": (d,),
    }
    attn = {"query.weight": (d, d), "query.bias": (d,), "key.weight": (d, d)}
    attn |= {"value.weight": (d, d), "value.bias": (d,), "out.weight": (d, d), "out.bias": (d,)}
    block = {f"attn.{k}": v for k, v in attn.items()}
    block |= {"attn_ln.weight": (d,), "attn_ln.bias": (d,), "mlp_ln.weight": (d,)}
    block |= {"mlp_ln.bias": (d,), "mlp.0.weight": (4 * d, d), "mlp.0.bias": (4 * d,)}
    block |= {"mlp.2.weight": (d, 4 * d), "mlp.2.bias": (d,)}
    cross = {f"cross_attn.{k}": v for k, v in attn.items()}
    cross |= {"cross_attn_ln.weight": (d,), "cross_attn_ln.bias": (d,)}
    for i in range(hp["n_audio_layer"]):
        shapes |= {f"encoder.blocks.{i}.{k}": v for k, v in block.items()}
    for i in range(hp["n_text_layer"]):
        shapes |= {f"decoder.blocks.{i}.{k}": v for k, v in (block | cross).items()}
    return shapes


def _tensor_type(name: str, ndim: int, dtype: str) -> int:
    """The ggml type whisper.cpp's loader allocates for this tensor in a `dtype` file."""
    if dtype == "f32" or ndim == 1 or name in _ALWAYS_F32:
        return _F32
    if ndim == 3:  # conv kernels: f16 in f16 and quantised files alike
        return _F16
    return DTYPES[dtype][1]


def _write_tensor(f, name: str, array: np.ndarray, dtype: str, quantiser) -> None:
    ttype = _tensor_type(name, array.ndim, dtype)
    if ttype == _F32:
        data = array.astype("<f4").tobytes()
    elif ttype == _F16:
        data = array.astype("<f2").tobytes()
    else:
        data = quantiser(name, array)
    encoded = name.encode()
    f.write(struct.pack("<3i", array.ndim, len(encoded), ttype))
    f.write(struct.pack(f"<{array.ndim}i", *reversed(array.shape)))
    f.write(encoded)
    f.write(data)


def _sidecar(
    model_dir: Path, config: dict, hp: dict[str, int], dtype: str, multilingual: bool
) -> dict[str, Any]:
    gen: dict[str, Any] = {}
    if (model_dir / "generation_config.json").is_file():
        gen = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
    language, task = gen.get("language"), gen.get("task")
    if not language and gen.get("forced_decoder_ids"):  # older fine-tunes: [[1, <|zh|>], ...]
        from transformers import AutoTokenizer
        from transformers.models.whisper.tokenization_whisper import LANGUAGES

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        for _, token_id in gen["forced_decoder_ids"]:
            text = tokenizer.convert_ids_to_tokens(token_id) if token_id is not None else ""
            if text in ("<|transcribe|>", "<|translate|>"):
                task = task or token_text(text)
            elif token_text(text) in LANGUAGES:
                language = text
    if not multilingual:
        language, task = "en", "transcribe"
    suppress = gen.get("suppress_tokens", config.get("suppress_tokens"))
    return {
        "format": "whisper.cpp ggml (convert-h5-to-ggml layout)",
        "model_file": MODEL_FILE,
        "dtype": dtype,
        # whisper.cpp's file has no language: without this it would default to English
        "language": language_code(language) if language else None,
        "task": task,
        "multilingual": multilingual,
        # transformers suppresses generation_config.suppress_tokens (the non-speech symbols);
        # whisper.cpp's suppress_nst is the same list
        "suppress_non_speech": bool(suppress),
        "n_vocab": hp["n_vocab"],
        "n_mels": hp["n_mels"],
        "encoder_layers": hp["n_audio_layer"],
        "decoder_layers": hp["n_text_layer"],
        "source": str(model_dir),
    }
