"""Export a transformers Whisper folder as an openai-whisper checkpoint, and transcribe with it.

`write_openai(model_dir, dest)` writes `dest/model.pt`, the file `whisper.load_model(path)`
reads: a torch pickle of

    {"dims": {n_mels, n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer,
              n_text_ctx, n_text_state, n_text_head, n_text_layer},
     "model_state_dict": {openai parameter name: tensor, in the source's stored dtype},
     "alignment_heads": bytes,   # gzip+base85 bool mask, `Whisper.set_alignment_heads`'s input
     "fitwhisper": {"language": "zh" | None, "task": "transcribe" | None,
                    "alignment_heads": [[layer, head], ...] | None}}

The weights are the model's own, renamed (the trained encoder positions replace openai's
sinusoid buffer; the output projection is the tied token embedding, as in openai; an MLP
narrower than openai's fixed 4 x d_model is padded with zero units, which changes nothing). The
tokenizer does not travel: openai-whisper picks its bundled tiktoken vocabulary from n_vocab
(51864: gpt2, English-only; 51865: multilingual, 99 languages; 51866: large-v3 and turbo,
100 languages and 128 mels), and the export checks that the source's special-token ids
are the ones that vocabulary assigns.

`load_model` reads only "dims" and "model_state_dict" (strictly), so the two extra keys are
ignored by a plain `whisper.load_model(path)` user, who gets the fine-tuned weights with
openai's default alignment heads (all heads of the last half of the decoder layers; word
timestamps still work, less sharply) and language detection on every file. To get what
`transcribe_openai` applies:

    ckpt = torch.load(path, weights_only=True)
    if "alignment_heads" in ckpt: model.set_alignment_heads(ckpt["alignment_heads"])
    model.transcribe(audio, language=ckpt["fitwhisper"]["language"])
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import re
from pathlib import Path

import numpy as np

from fitwhisper.data.audio import padded_like_training
from fitwhisper.errors import ConfigError
from fitwhisper.whisper_facts import ENCODER_POSITIONS, SAMPLE_RATE, WINDOW_SAMPLES, token_text

log = logging.getLogger(__name__)

CHECKPOINT = "model.pt"

# transformers name -> openai-whisper name, for the parts of a layer (see whisper/model.py)
_LAYER_PARTS = {
    "self_attn": "attn",
    "encoder_attn": "cross_attn",
    "self_attn_layer_norm": "attn_ln",
    "encoder_attn_layer_norm": "cross_attn_ln",
    "final_layer_norm": "mlp_ln",
    "fc1": "mlp.0",
    "fc2": "mlp.2",
    "q_proj": "query",
    "k_proj": "key",
    "v_proj": "value",
    "out_proj": "out",
}
_TOP_LEVEL = {
    "encoder.embed_positions.weight": "encoder.positional_embedding",
    "encoder.layer_norm.weight": "encoder.ln_post.weight",
    "encoder.layer_norm.bias": "encoder.ln_post.bias",
    "decoder.embed_tokens.weight": "decoder.token_embedding.weight",
    "decoder.embed_positions.weight": "decoder.positional_embedding",
    "decoder.layer_norm.weight": "decoder.ln.weight",
    "decoder.layer_norm.bias": "decoder.ln.bias",
}
_LAYER_KEY = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def openai_name(hf_name: str) -> str:
    """openai-whisper's name for a `WhisperModel` (no "model." prefix) parameter."""
    if hf_name in _TOP_LEVEL:
        return _TOP_LEVEL[hf_name]
    m = _LAYER_KEY.match(hf_name)
    if m is None:  # conv1, conv2: same names in both
        return hf_name
    side, i, part, kind = m.groups()
    part = ".".join(_LAYER_PARTS.get(p, p) for p in part.split("."))
    return f"{side}.blocks.{i}.{part}.{kind}"


def known_openai_name(hf_name: str) -> str | None:
    """`openai_name`, or None for a parameter openai-whisper's model does not have (a LoRA
    matrix, an added head): every part of it must be one openai-whisper names."""
    if hf_name in _TOP_LEVEL or re.fullmatch(r"encoder\.conv[12]\.(weight|bias)", hf_name):
        return openai_name(hf_name)
    m = _LAYER_KEY.match(hf_name)
    if m is None or not all(p in _LAYER_PARTS for p in m.group(3).split(".")):
        return None
    return openai_name(hf_name)


def check_openai(model_dir: Path) -> None:
    """Every refusal of `write_openai` that needs no weights (configs, architecture,
    vocabulary, task), so an export of several formats can stop before it writes any.

    Raises:
        ConfigError: as `write_openai`.
    """
    model_dir = Path(model_dir)
    cfg, gen = _read_configs(model_dir)
    _check_representable(cfg, model_dir)
    _check_vocabulary(cfg["vocab_size"], gen, model_dir)
    task = None if cfg["vocab_size"] == 51864 else _clean(gen.get("task"))
    if task not in (None, "transcribe", "translate"):
        raise ConfigError(f"{model_dir}/generation_config.json has an unknown task {task!r}")


def write_openai(model_dir: Path, dest: Path) -> list[Path]:
    """Write `dest/model.pt`, which `whisper.load_model(path)` loads; returns [that path].

    Raises:
        ConfigError: `model_dir` is not a transformers Whisper folder, or holds a Whisper
            that openai-whisper cannot represent (untied output projection, other
            activation, vocabulary that is not openai's); `dest` is not a folder.
        StorageError: the file could not be written (disk full, no permission).
    """
    from whisper.model import ModelDimensions

    model_dir, dest = Path(model_dir), Path(dest)
    if not dest.is_dir():
        raise ConfigError(f"{dest} is not a folder", hint="create the export folder first")
    cfg, gen = _read_configs(model_dir)
    _check_representable(cfg, model_dir)
    dims = {
        "n_mels": cfg["num_mel_bins"],
        "n_vocab": cfg["vocab_size"],
        "n_audio_ctx": cfg["max_source_positions"],
        "n_audio_state": cfg["d_model"],
        "n_audio_head": cfg["encoder_attention_heads"],
        "n_audio_layer": cfg["encoder_layers"],
        "n_text_ctx": cfg["max_target_positions"],
        "n_text_state": cfg["d_model"],
        "n_text_head": cfg["decoder_attention_heads"],
        "n_text_layer": cfg["decoder_layers"],
    }
    _check_vocabulary(dims["n_vocab"], gen, model_dir)
    state = _openai_state_dict(model_dir, dims["n_audio_state"])
    want = _openai_shapes(ModelDimensions(**dims))
    got = {k: v.shape for k, v in state.items()}
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))[:6]
        raise ConfigError(
            f"{model_dir}'s weights do not fit openai-whisper's model ({diff} ...)",
            hint="export a standard Whisper architecture",
        )

    heads = _alignment_heads(gen, dims["n_text_layer"], dims["n_text_head"])
    english_only = dims["n_vocab"] == 51864
    language = "en" if english_only else _recorded_language(cfg, gen, model_dir)
    task = None if english_only else _clean(gen.get("task"))
    if task not in (None, "transcribe", "translate"):
        raise ConfigError(f"{model_dir}/generation_config.json has an unknown task {task!r}")
    checkpoint = {
        "dims": dims,
        "model_state_dict": state,
        "fitwhisper": {"language": language, "task": task, "alignment_heads": heads},
    }
    if heads is not None:
        checkpoint["alignment_heads"] = heads_dump(heads, dims["n_text_layer"], dims["n_text_head"])
    return [_save(checkpoint, dest / CHECKPOINT)]


def heads_dump(heads: list[list[int]], n_layer: int, n_head: int) -> bytes:
    """[[layer, head], ...] as `Whisper.set_alignment_heads` takes it: a (layer, head) bool
    mask, gzipped and base85-encoded (the format of openai-whisper's `_ALIGNMENT_HEADS`)."""
    mask = np.zeros((n_layer, n_head), dtype=bool)
    for layer, head in heads:
        mask[layer, head] = True
    return base64.b85encode(gzip.compress(mask.tobytes(), mtime=0))  # mtime 0: same bytes


def transcribe_openai(
    dest: Path,
    audios: list[np.ndarray],
    *,
    language: str | None,
    task: str = "transcribe",
    timestamps: bool = False,
) -> list[dict]:
    """Transcribe 16 kHz float32 mono arrays with openai-whisper itself, greedy, in fp32 on
    the CPU; one {"text", "language", "segments": [{"start", "end", "text"}]} per array.

    `language` None: the fine-tune's recorded language, else openai's detection (per file).
    `timestamps` False decodes a clip of up to 30 s without timestamp tokens (one segment);
    longer files are decoded with them anyway, since openai's window seeking needs them.
    A clip under 30 s is given padded with silence to 30 s, as the model saw clips in
    training (`data.audio.padded_like_training`); segment times stay inside the clip.
    """
    import torch
    import whisper

    path = Path(dest) / CHECKPOINT
    if not path.is_file():
        raise ConfigError(f"{path} does not exist", hint="write it with write_openai first")
    # mmap: read the small extra keys without holding a second copy of the weights
    extra = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    record, heads = extra.get("fitwhisper", {}), extra.get("alignment_heads")
    del extra
    model = whisper.load_model(str(path), device="cpu")
    if heads is not None:
        model.set_alignment_heads(heads)
    language = _language_code(language, "language")
    if not model.is_multilingual:
        if language not in (None, "en"):
            raise ConfigError(
                f"{path} is an English-only model; it cannot transcribe {language!r}",
                hint="leave language unset or pass en",
            )
        language = "en"
    elif language is None:
        language = record.get("language")  # None: openai detects it

    out = []
    for audio in audios:
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        duration = audio.size / SAMPLE_RATE
        result = model.transcribe(
            padded_like_training(audio),
            language=language,
            task=task,
            temperature=0.0,  # one temperature: no fallback
            # Off as in transformers: greedy without fallback loops more easily, and a loop
            # conditioned on would carry into the next window.
            condition_on_previous_text=False,
            without_timestamps=not timestamps and audio.size <= WINDOW_SAMPLES,
            fp16=False,
            verbose=None,
        )
        out.append(
            {
                "text": result["text"].strip(),
                "language": result["language"],
                "segments": [
                    {
                        "start": min(float(s["start"]), duration),
                        "end": min(float(s["end"]), duration),
                        "text": s["text"].strip(),
                    }
                    for s in result["segments"]
                ],
            }
        )
    return out


# --- helpers ------------------------------------------------------------------------------


def _read_configs(model_dir: Path) -> tuple[dict, dict]:
    hint = "pass a saved transformers WhisperForConditionalGeneration folder (LoRA merged)"
    config = model_dir / "config.json"
    if not config.is_file():
        if (model_dir / "adapter_config.json").is_file():
            hint = "this is a LoRA adapter: merge it into its base model first"
        raise ConfigError(f"{model_dir} is not a transformers model folder (no config.json)", hint)
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
        gen_file = model_dir / "generation_config.json"
        gen = json.loads(gen_file.read_text(encoding="utf-8")) if gen_file.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{model_dir} holds an unreadable config ({e})", hint=hint) from e
    if not isinstance(raw, dict) or raw.get("model_type") != "whisper":
        kind = raw.get("model_type") if isinstance(raw, dict) else None
        raise ConfigError(
            f"{model_dir} holds a {kind or 'non-Whisper'} model, not Whisper", hint=hint
        )
    from transformers import WhisperConfig

    cfg = {**WhisperConfig().to_dict(), **raw}  # transformers' defaults for keys left out
    archs = cfg.get("architectures") or ["WhisperForConditionalGeneration"]
    if not any(a in ("WhisperForConditionalGeneration", "WhisperModel") for a in archs):
        raise ConfigError(f"{model_dir} holds a {archs[0]}, not a speech recogniser", hint=hint)
    return cfg, gen


def _check_representable(cfg: dict, model_dir: Path) -> None:
    """What openai-whisper's fixed architecture cannot express (it has no options)."""
    problems = []
    if cfg.get("activation_function", "gelu") != "gelu":
        problems.append(f"activation {cfg['activation_function']} (openai: gelu)")
    if cfg.get("scale_embedding"):
        problems.append("scale_embedding (openai scales no embedding)")
    for side in ("encoder", "decoder"):
        if cfg[f"{side}_ffn_dim"] > 4 * cfg["d_model"]:
            problems.append(f"{side}_ffn_dim over 4 x d_model (openai's MLP width)")
    if cfg["max_source_positions"] != ENCODER_POSITIONS:
        problems.append(
            f"max_source_positions not {ENCODER_POSITIONS} (openai decodes 30 s windows)"
        )
    if problems:
        raise ConfigError(
            f"openai-whisper cannot represent {model_dir}: " + "; ".join(problems),
            hint="export it with the ct2 format instead",
        )


def _check_vocabulary(n_vocab: int, gen: dict, model_dir: Path) -> None:
    """openai-whisper derives its tokenizer from n_vocab alone; the source's special ids must
    be that tokenizer's, else every prompt it builds is wrong."""
    from whisper.tokenizer import get_tokenizer

    if n_vocab not in (51864, 51865, 51866):
        raise ConfigError(
            f"{model_dir} has vocab_size {n_vocab}; openai-whisper knows 51864 (English-only), "
            "51865 (multilingual) and 51866 (large-v3, turbo)",
            hint="openai-whisper only has its own bundled vocabularies",
        )
    multilingual = n_vocab >= 51865
    tok = get_tokenizer(multilingual, num_languages=n_vocab - 51765 - int(multilingual))
    expected = {
        "decoder_start_token_id": tok.sot,
        "eos_token_id": tok.eot,
        "no_timestamps_token_id": tok.no_timestamps,
    }
    wrong = {k: gen[k] for k, v in expected.items() if gen.get(k) not in (None, v)}
    if wrong:
        raise ConfigError(
            f"{model_dir}'s special tokens {wrong} are not openai-whisper's {expected} for "
            f"vocab_size {n_vocab} (tokens added to the vocabulary?)",
            hint="openai-whisper only has its own bundled vocabularies",
        )


def _openai_state_dict(model_dir: Path, d_model: int) -> dict:
    import torch
    from transformers import WhisperForConditionalGeneration

    model, info = WhisperForConditionalGeneration.from_pretrained(
        model_dir, dtype="auto", output_loading_info=True
    )
    missing = [k for k in info["missing_keys"] if k != "proj_out.weight"]
    if missing:
        raise ConfigError(f"{model_dir}'s weights lack {missing[:4]} ...", hint="re-save the model")
    if not torch.equal(model.proj_out.weight, model.model.decoder.embed_tokens.weight):
        raise ConfigError(
            f"{model_dir}'s proj_out differs from its token embedding; openai ties them",
            hint="export it with the ct2 format instead",
        )
    state = {openai_name(k): v.detach() for k, v in model.model.state_dict().items()}
    # openai's MLP is 4 x d_model wide; a narrower one is padded with zero units, which
    # add nothing (gelu(0) = 0 and their fc2 columns are zero): the output is unchanged.
    for key in [k for k in state if k.endswith("mlp.0.weight")]:
        pad = 4 * d_model - state[key].shape[0]
        if pad:
            stem = key[: -len("0.weight")]
            w1, b1, w2 = state[key], state[stem + "0.bias"], state[stem + "2.weight"]
            state[key] = torch.cat([w1, w1.new_zeros(pad, w1.shape[1])])
            state[stem + "0.bias"] = torch.cat([b1, b1.new_zeros(pad)])
            state[stem + "2.weight"] = torch.cat([w2, w2.new_zeros(w2.shape[0], pad)], dim=1)
    return {k: v.contiguous() for k, v in state.items()}


def _openai_shapes(d) -> dict:
    """Names and shapes of `Whisper(d).state_dict()`, built on the meta device (no memory);
    from its two halves, since Whisper's own __init__ makes a sparse tensor meta lacks."""
    import torch
    from whisper.model import AudioEncoder, TextDecoder

    with torch.device("meta"):
        enc = AudioEncoder(
            d.n_mels, d.n_audio_ctx, d.n_audio_state, d.n_audio_head, d.n_audio_layer
        )
        dec = TextDecoder(d.n_vocab, d.n_text_ctx, d.n_text_state, d.n_text_head, d.n_text_layer)
    return {
        f"{side}.{k}": v.shape
        for side, part in (("encoder", enc), ("decoder", dec))
        for k, v in part.state_dict().items()
    }


def _alignment_heads(gen: dict, n_layer: int, n_head: int) -> list[list[int]] | None:
    heads = gen.get("alignment_heads")
    if not heads:
        return None
    heads = [[int(layer), int(head)] for layer, head in heads]
    if any(not (0 <= layer < n_layer and 0 <= head < n_head) for layer, head in heads):
        # A generation config copied from another model size: none of it applies.
        log.warning(
            "alignment_heads %s do not fit %d x %d heads: not exported", heads, n_layer, n_head
        )
        return None
    return heads


def _recorded_language(cfg: dict, gen: dict, model_dir: Path) -> str | None:
    """The fine-tune's language: generation_config's (what transformers decodes with), else
    config.json's fitwhisper_language; None when neither is set."""
    from_gen = _language_code(gen.get("language"), f"{model_dir}/generation_config.json")
    from_cfg = _language_code(cfg.get("fitwhisper_language"), f"{model_dir}/config.json")
    if from_gen and from_cfg and from_gen != from_cfg:
        log.warning(
            "generation_config.json says language %s, config.json's fitwhisper_language %s; "
            "exporting %s",
            from_gen,
            from_cfg,
            from_gen,
        )
    return from_gen or from_cfg


def _clean(value) -> str | None:
    """A language or task as transformers may write it, bare: "<|zh|>" -> "zh"; "" -> None."""
    if not value:
        return None
    return token_text(str(value)).lower() or None


def _language_code(value, source: str) -> str | None:
    from whisper.tokenizer import LANGUAGES, TO_LANGUAGE_CODE

    key = _clean(value)
    if key is None or key in LANGUAGES:
        return key
    if key in TO_LANGUAGE_CODE:  # names and aliases: "chinese", "mandarin"
        return TO_LANGUAGE_CODE[key]
    raise ConfigError(
        f"{source}: unknown language {value!r}", hint="use a Whisper language code such as zh"
    )


def _save(checkpoint: dict, path: Path) -> Path:
    import torch

    from fitwhisper.paths import as_storage_error

    partial = path.with_name(path.name + ".partial")  # never a half-written model.pt
    try:
        torch.save(checkpoint, partial)
        os.replace(partial, path)
    except (OSError, RuntimeError) as e:
        partial.unlink(missing_ok=True)
        if (err := as_storage_error(e, path)) is not None:
            raise err from e
        raise
    log.info("wrote %s (%.0f MB)", path, path.stat().st_size / 1e6)
    return path
