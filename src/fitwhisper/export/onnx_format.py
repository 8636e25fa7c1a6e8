"""Whisper as ONNX graphs for onnxruntime (the runner on them is `onnx_run`).

    write_onnx(model_dir, dest)                  # a transformers Whisper folder -> dest/
    onnx_run.transcribe_onnx(dest, audios, language=None)  # onnxruntime, greedy

The folder follows optimum's (non-merged) seq2seq layout and names, so onnxruntime and
optimum users recognise it; every graph is fp32, K/V tensors are (batch, heads, length,
head_dim):

    encoder_model.onnx            input_features (batch_size, n_mels, frames)
                                  -> last_hidden_state (batch_size, frames/2, d_model)
    decoder_model.onnx            input_ids (batch_size, decoder_sequence_length),
                                  encoder_hidden_states
                                  -> logits, present.{i}.decoder.key/value,
                                     present.{i}.encoder.key/value (cross K/V, computed once)
    decoder_with_past_model.onnx  input_ids, past_key_values.{i}.decoder.key/value,
                                  past_key_values.{i}.encoder.key/value
                                  -> logits, present.{i}.decoder.key/value
    <graph>.onnx.data             the weights of a graph over 1.5 GiB (protobuf stops at 2 GiB)
    config.json, generation_config.json, tokenizer and feature-extractor files (copied)

Batch, frame count and sequence lengths are dynamic. The encoder takes any even frame count
up to 3000 (adding the first frames/2 position rows, as `models.short_window` does); 3000
frames is exactly transformers' encoder. The decoder's token embedding and layers are in
both decoder graphs (optimum's non-merged layout duplicates them too).

Why not optimum's exporter: the newest optimum-onnx on PyPI (0.1.0) requires
transformers<4.58 and optimum~=2.1, so it cannot be installed beside transformers 5.
Graphs come from torch's dynamo exporter (`torch.onnx.export(dynamo=True)`, onnxscript),
run on small wrappers around transformers' modules: the encoder's own layers, and the
decoder's projections, norms and MLPs with the cache handled as plain tensors, so no
transformers Cache object (whose API changes between releases) is traced.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch

from fitwhisper.errors import ConfigError
from fitwhisper.paths import as_storage_error

log = logging.getLogger(__name__)

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model.onnx"
DECODER_WITH_PAST_FILE = "decoder_with_past_model.onnx"
GRAPH_FILES = (ENCODER_FILE, DECODER_FILE, DECODER_WITH_PAST_FILE)

# What travels with the graphs: the configs and whatever processor files the folder has
# (transformers 5 keeps the feature extractor in processor_config.json, 4.x in
# preprocessor_config.json).
CONFIG_FILES = ("config.json", "generation_config.json")
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "normalizer.json",
    "added_tokens.json",
    "special_tokens_map.json",
)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")

# A graph whose weights exceed this is saved with them in `<graph>.onnx.data`: a single
# protobuf cannot exceed 2 GiB, and the graph itself needs room too (torch's own threshold).
EXTERNAL_DATA_BYTES = 1536 * 2**20

# The exporter's loggers: per-pass and per-initializer INFO lines, and a warning per
# torchvision op it cannot register; quieted to errors while exporting.
_CHATTY = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "onnx_ir")
BATCH_SIZE = 8  # clips per encoder/decoder run in transcribe_onnx


def check_onnx(model_dir: Path) -> None:
    """Every refusal of `write_onnx` about its source, before any weights load.

    Raises:
        ConfigError: as `write_onnx`.
    """
    _check_source(Path(model_dir))


def write_onnx(model_dir: Path, dest: Path) -> list[Path]:
    """Export a saved Whisper model as encoder + decoder ONNX graphs that onnxruntime runs.

    Args:
        model_dir: a saved transformers `WhisperForConditionalGeneration` folder (config,
            generation config, tokenizer and feature-extractor files, weights); a LoRA
            adapter must be merged first.
        dest: an existing, empty folder.

    Returns:
        The files written: the three graphs (plus `.data` files for graphs over 1.5 GiB),
        then the copied config, tokenizer and feature-extractor files.

    Raises:
        ConfigError: `model_dir` is not a transformers Whisper model with its processor
            files, or `dest` is not an empty folder.
        StorageError: the disk filled up or `dest` cannot be written.
    """
    # 1. check both folders before loading any weights
    model_dir, dest = Path(model_dir), Path(dest)
    config = _check_source(model_dir)
    _check_dest(dest)

    # 2. the model in fp32 with plain attention (`eager`: matmul + softmax in the graph)
    from transformers import WhisperForConditionalGeneration

    t0 = time.perf_counter()
    model = WhisperForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    log.info(
        "exporting %s (%d+%d layers, d_model %d, %d mels) to ONNX in %s",
        model_dir,
        config["encoder_layers"],
        config["decoder_layers"],
        config["d_model"],
        config["num_mel_bins"],
        dest,
    )

    # 3. the three graphs
    written: list[Path] = []
    with torch.no_grad():
        for name, graph in (
            (ENCODER_FILE, _encoder_graph),
            (DECODER_FILE, _decoder_graph),
            (DECODER_WITH_PAST_FILE, _decoder_with_past_graph),
        ):
            t = time.perf_counter()
            written += _export(*graph(model), dest / name)
            log.info("%s: %.1f s, %.1f MB", name, time.perf_counter() - t, _mb(dest / name))

    # 4. what makes the folder self-contained
    for name in CONFIG_FILES + PROCESSOR_FILES:
        if (model_dir / name).is_file():
            _write(lambda n=name: shutil.copy2(model_dir / n, dest / n), dest / name)
            written.append(dest / name)
    log.info(
        "wrote %d files to %s in %.0f s, %.0f MB",
        len(written),
        dest,
        time.perf_counter() - t0,
        sum(_mb(p) for p in written),
    )
    return written


# --- export -------------------------------------------------------------------------------


def _encoder_graph(model):
    cfg = model.config
    frames = 2 * cfg.max_source_positions  # 3000: conv2 has stride 2
    example = (torch.zeros(2, cfg.num_mel_bins, frames),)
    batch = torch.export.Dim("batch_size", min=1)
    dims = {"input_features": {0: batch, 2: torch.export.Dim("frames", min=2, max=frames)}}
    return (
        _EncoderGraph(model.model.encoder).eval(),
        example,
        ["input_features"],
        ["last_hidden_state"],
        dims,
    )


def _decoder_graph(model):
    cfg = model.config
    batch, seq, enc_seq = _dims(cfg)
    example = (torch.full((2, 3), cfg.decoder_start_token_id), torch.zeros(2, 16, cfg.d_model))
    outputs = ["logits"] + [
        f"present.{i}.{kind}.{kv}"
        for i in range(cfg.decoder_layers)
        for kind in ("decoder", "encoder")
        for kv in ("key", "value")
    ]
    dims = ({0: batch, 1: seq}, {0: batch, 1: enc_seq})
    graph = _DecoderGraph(model.model.decoder, model.proj_out).eval()
    return graph, example, ["input_ids", "encoder_hidden_states"], outputs, dims


def _decoder_with_past_graph(model):
    cfg = model.config
    batch, seq, enc_seq = _dims(cfg)
    past_seq = torch.export.Dim("past_decoder_sequence_length", min=1)
    heads = cfg.decoder_attention_heads
    head_dim = cfg.d_model // heads
    past, inputs, outputs, dims = [], ["input_ids"], ["logits"], []
    for i in range(cfg.decoder_layers):
        for kind, length, dim in (("decoder", 4, past_seq), ("encoder", 16, enc_seq)):
            for kv in ("key", "value"):
                past.append(torch.zeros(2, heads, length, head_dim))
                inputs.append(f"past_key_values.{i}.{kind}.{kv}")
                dims.append({0: batch, 2: dim})
                if kind == "decoder":
                    outputs.append(f"present.{i}.decoder.{kv}")
    example = (torch.full((2, 2), cfg.decoder_start_token_id), tuple(past))
    graph = _DecoderWithPastGraph(model.model.decoder, model.proj_out).eval()
    return graph, example, inputs, outputs, ({0: batch, 1: seq}, tuple(dims))


def _dims(cfg):
    # No max on the sequence dims: a bound would only add guards to the graph; the position
    # table (448 rows, 1500 for the encoder) is the real limit and fails loudly past it.
    return (
        torch.export.Dim("batch_size", min=1),
        torch.export.Dim("decoder_sequence_length", min=1),
        torch.export.Dim("encoder_sequence_length_out", min=1),
    )


def _export(module, example, input_names, output_names, dynamic_shapes, path: Path) -> list[Path]:
    """One graph through the dynamo exporter; its weights go to `<path>.data` when large."""
    with warnings.catch_warnings(), _quiet(*_CHATTY):
        # Benign: a Dim shared by several inputs is named once; pytree internals.
        warnings.filterwarnings("ignore", "# The axis name", UserWarning)
        warnings.filterwarnings("ignore", ".*LeafSpec", FutureWarning)
        program = torch.onnx.export(
            module,
            example,
            dynamo=True,
            verbose=False,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
        )
    weight_bytes = sum(p.numel() * p.element_size() for p in module.parameters())
    external = weight_bytes > EXTERNAL_DATA_BYTES
    _write(lambda: program.save(path, external_data=external), path)
    data = path.with_name(path.name + ".data")  # onnx_ir's name for the weights file
    return [path, data] if data.is_file() else [path]


def _write(save, path: Path) -> None:
    try:
        save()
    except OSError as e:
        raise (as_storage_error(e, path) or e) from e


class _quiet:
    """Raise these loggers to ERROR for a while (the exporter's per-op chatter)."""

    def __init__(self, *names: str) -> None:
        self.loggers = [logging.getLogger(n) for n in names]

    def __enter__(self):
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.setLevel(logging.ERROR)

    def __exit__(self, *exc) -> None:
        for lg, level in zip(self.loggers, self.levels, strict=True):
            lg.setLevel(level)


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6 if path.is_file() else 0.0


def _check_source(model_dir: Path) -> dict:
    """The folder's config, after checking that it holds what write_onnx needs."""
    hint = (
        "pass a saved transformers WhisperForConditionalGeneration folder (config.json with "
        "model_type whisper, model.safetensors, tokenizer and feature-extractor files)"
    )
    if not model_dir.is_dir():
        raise ConfigError(f"model folder {model_dir} does not exist", hint=hint)
    if (model_dir / "adapter_config.json").is_file() and not (model_dir / "config.json").is_file():
        raise ConfigError(
            f"{model_dir} holds a LoRA adapter, not a whole model",
            hint="merge it into its base first (peft's merge_and_unload, then save_pretrained)",
        )
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{model_dir} has no config.json: not a transformers model", hint=hint
        ) from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{model_dir / 'config.json'} is not valid JSON: {e}", hint=hint) from e
    if config.get("model_type") != "whisper":
        seen = config.get("model_type") or "none (a CTranslate2 folder has no model_type)"
        raise ConfigError(f"{model_dir} is not a Whisper model: model_type is {seen}", hint=hint)
    missing = []
    if not any((model_dir / n).is_file() for n in WEIGHT_FILES):
        missing.append("weights (" + " or ".join(WEIGHT_FILES) + ")")
    if not (model_dir / "generation_config.json").is_file():
        missing.append("generation_config.json")
    if not any(
        (model_dir / n).is_file() for n in ("preprocessor_config.json", "processor_config.json")
    ):
        missing.append("feature extractor (preprocessor_config.json or processor_config.json)")
    if not any((model_dir / n).is_file() for n in ("tokenizer.json", "vocab.json")):
        missing.append("tokenizer (tokenizer.json or vocab.json)")
    if missing:
        raise ConfigError(
            f"{model_dir} lacks " + ", ".join(missing),
            hint="save the model with save_pretrained and its WhisperProcessor with "
            "processor.save_pretrained into the same folder",
        )
    return config


def _check_dest(dest: Path) -> None:
    if not dest.is_dir():
        raise ConfigError(f"ONNX folder {dest} does not exist", hint="create an empty folder first")
    if any(dest.iterdir()):
        raise ConfigError(
            f"ONNX folder {dest} is not empty", hint="pass an empty folder (nothing is overwritten)"
        )


# --- graphs: wrappers around transformers' modules with plain tensor inputs/outputs -------


class _EncoderGraph(torch.nn.Module):
    """WhisperEncoder on (batch, n_mels, frames) for any frames <= 3000.

    transformers' forward refuses anything but 3000 frames; this adds the first frames/2
    position rows instead, and runs the encoder's own layers (identical at 3000 frames).
    """

    def __init__(self, encoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features: torch.Tensor) -> torch.Tensor:
        F = torch.nn.functional
        enc = self.encoder
        x = F.gelu(enc.conv1(input_features))
        x = F.gelu(enc.conv2(x)).permute(0, 2, 1)
        x = x + enc.embed_positions.weight[: x.shape[1]]
        for layer in enc.layers:
            x = layer(x, None)
        return enc.layer_norm(x)


class _DecoderCore(torch.nn.Module):
    """WhisperDecoder's math (transformers' eager path) with the K/V cache as tensors."""

    def __init__(self, decoder, proj_out) -> None:
        super().__init__()
        self.decoder = decoder
        self.proj_out = proj_out
        attn = decoder.layers[0].self_attn
        self.heads, self.head_dim = attn.num_heads, attn.head_dim

    def run(self, input_ids, past: int, self_kv: Sequence | None, cross_kv: Sequence):
        """Logits and the new self K/V (past + these tokens) per layer."""
        dec = self.decoder
        batch, seq = input_ids.shape
        x = dec.embed_tokens(input_ids) + dec.embed_positions.weight[past : past + seq]
        # Causal mask over past + new keys; finfo.min as transformers' eager mask uses.
        q_pos = torch.arange(seq, device=x.device) + past
        k_pos = torch.arange(past + seq, device=x.device)
        mask = torch.where(k_pos[None, :] > q_pos[:, None], torch.finfo(x.dtype).min, 0.0)
        present = []
        for i, layer in enumerate(dec.layers):
            a = layer.self_attn
            h = layer.self_attn_layer_norm(x)
            # q is scaled before the product, in transformers' order (it matters in fp32).
            q = self._heads(a.q_proj(h) * a.scaling, batch)
            k, v = self._heads(a.k_proj(h), batch), self._heads(a.v_proj(h), batch)
            if self_kv is not None:
                k = torch.cat([self_kv[2 * i], k], dim=2)
                v = torch.cat([self_kv[2 * i + 1], v], dim=2)
            x = x + a.out_proj(self._attend(q, k, v, mask, batch, seq))
            present += [k, v]

            c = layer.encoder_attn
            h = layer.encoder_attn_layer_norm(x)
            q = self._heads(c.q_proj(h) * c.scaling, batch)
            x = x + c.out_proj(
                self._attend(q, cross_kv[2 * i], cross_kv[2 * i + 1], None, batch, seq)
            )

            h = layer.final_layer_norm(x)
            x = x + layer.fc2(layer.activation_fn(layer.fc1(h)))
        return self.proj_out(dec.layer_norm(x)), present

    def cross_kv(self, encoder_hidden_states) -> list:
        """Cross-attention K/V per layer: computed once per clip, then passed back in."""
        batch = encoder_hidden_states.shape[0]
        out = []
        for layer in self.decoder.layers:
            c = layer.encoder_attn
            out += [
                self._heads(c.k_proj(encoder_hidden_states), batch),
                self._heads(c.v_proj(encoder_hidden_states), batch),
            ]
        return out

    def _heads(self, t, batch):  # (batch, length, d_model) -> (batch, heads, length, head_dim)
        return t.view(batch, -1, self.heads, self.head_dim).transpose(1, 2)

    def _attend(self, q, k, v, mask, batch, seq):
        w = torch.matmul(q, k.transpose(2, 3))
        if mask is not None:
            w = w + mask
        out = torch.matmul(torch.softmax(w, dim=-1), v)
        return out.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim)


class _DecoderGraph(_DecoderCore):
    """First decoder step: the prompt and the encoder output -> logits, self and cross K/V."""

    def forward(self, input_ids, encoder_hidden_states):
        cross = self.cross_kv(encoder_hidden_states)
        logits, present = self.run(input_ids, 0, None, cross)
        out = [logits]
        for i in range(len(self.decoder.layers)):
            out += [present[2 * i], present[2 * i + 1], cross[2 * i], cross[2 * i + 1]]
        return tuple(out)


class _DecoderWithPastGraph(_DecoderCore):
    """Later steps: new tokens and the cache (4 tensors per layer) -> logits, self K/V."""

    def forward(self, input_ids, past_key_values):
        self_kv = [t for i, t in enumerate(past_key_values) if i % 4 < 2]
        cross = [t for i, t in enumerate(past_key_values) if i % 4 >= 2]
        logits, present = self.run(input_ids, past_key_values[0].shape[2], self_kv, cross)
        return (logits, *present)
