"""How each training method loads and is made ready to train: full fine-tuning, LoRA, and
LoRA on an 8-bit or a 4-bit (QLoRA) base.

`fitwhisper train` picks the method (`fitwhisper.method`, which says what each one is) from
its flags; the run's precision, resolved once by `train`, decides the 4-bit layers' compute
dtype:

    (none)               full fine-tuning; --freeze_encoder trains the decoder only
    --method lora        LoRA adapters (PEFT) on a frozen base; the run saves the adapter
    --method dora        DoRA adapters (PEFT's use_dora), saved and merged as LoRA's are
    --method 8bit-lora   the base loaded in 8 bits (bitsandbytes LLM.int8()), LoRA on top
    --method 4bit-lora   the base loaded in 4-bit NF4 (QLoRA), LoRA on top

bitsandbytes (a dependency) has a CPU backend: 8-bit and 4-bit bases, and --optim
adamw_8bit, train on CPU as on CUDA; the quantised base goes to the CPU there and to this
process's GPU (LOCAL_RANK) on CUDA. What stays CUDA-only is fp16 mixed precision
(precision.py). fitwhisper never imports bitsandbytes itself (it takes seconds); peft
and transformers do when a model loads, so `--help` and validation stay fast.

Quantisation happens inside `from_pretrained`, so it comes in two parts: `load_kwargs`
before loading (the BitsAndBytesConfig), `prepare_for_training` after it (freezing, kbit
preparation, adapters). `problems` lists what cannot work, for `train.validation`, before
anything loads.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from fitwhisper.config import WHISPER_LINEAR_MODULES, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.method import bitsandbytes_runs_here, method_of, method_problems
from fitwhisper.precision import Precision

log = logging.getLogger(__name__)

BNB_HINT = "pip install 'bitsandbytes>=0.50' (a dependency of fitwhisper; 0.50+ runs on CPU too)"
LORA_LOW_LR = 5e-5  # below this a LoRA run barely moves in a typical number of steps


def problems(model_cfg: ModelConfig, train_cfg: TrainConfig, precision: Precision) -> list[str]:
    """Every conflict among the method options, as flag-named sentences (empty: all fine).

    Checks only what is known without loading anything: option values and whether
    bitsandbytes is installed (its CPU backend serves machines without CUDA).
    """
    found: list[str] = method_problems(model_cfg)
    method = method_of(model_cfg)
    spec = Path(model_cfg.model).expanduser()
    if is_adapter_dir(spec) or (is_adapter_dir(spec / "final") and not is_model_dir(spec)):
        found.append(
            f"--model {model_cfg.model} is a LoRA adapter; to train on from it, merge it first "
            "(fitwhisper merge ADAPTER OUT) and pass --model OUT"
        )
    if method.adapters:
        # --lora_r, --lora_alpha and --lora_dropout: their ranges are their fields' own.
        unknown = [m for m in model_cfg.lora_target_modules if m not in WHISPER_LINEAR_MODULES]
        if unknown:
            found.append(
                f"--lora_target_modules has unknown layers {', '.join(unknown)}; "
                f"Whisper's are {','.join(WHISPER_LINEAR_MODULES)}"
            )
        elif not model_cfg.lora_target_modules:
            found.append("--lora_target_modules is empty; name at least one layer")
    if method.quantised:
        found += _bitsandbytes_problems(method.flag)
    if train_cfg.optim == "adamw_8bit":
        found += _bitsandbytes_problems("--optim adamw_8bit")
    if method.base_bits == 4:
        dtype = model_cfg.bnb_4bit_compute_dtype
        if precision == "fp16" and dtype in ("bfloat16", "float32"):
            found.append(
                f"--fp16 with --bnb_4bit_compute_dtype {dtype}: mixed precision and the 4-bit "
                "layers would compute in different dtypes; use float16 or auto"
            )
        if precision == "bf16" and dtype in ("float16", "float32"):
            found.append(
                f"--bf16 with --bnb_4bit_compute_dtype {dtype}: mixed precision and the 4-bit "
                "layers would compute in different dtypes; use bfloat16 or auto"
            )
    return found


def quantization_config(model_cfg: ModelConfig, precision: Precision):
    """The BitsAndBytesConfig for `from_pretrained`, or None for an unquantised base.

    8-bit is LLM.int8() with its default outlier threshold. 4-bit is the QLoRA recipe:
    NF4 weights with double quantisation, computing in `compute_dtype_name(...)`.
    """
    from transformers import BitsAndBytesConfig

    bits = method_of(model_cfg).base_bits
    if bits == 4:
        import torch

        return BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=getattr(torch, compute_dtype_name(model_cfg, precision)),
        )
    if bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True)
    return None


def base_dtype(model_cfg: ModelConfig, precision: Precision) -> str | None:
    """The dtype a plain LoRA run loads its frozen base in under mixed precision, or None
    (fp32: full fine-tuning, fp32 runs, quantised bases).

    The base never trains, so it needs no fp32 master copy: in the run's half precision it
    takes half the memory (large-v3 + LoRA then fits an 8 GB card) and autocast would cast
    its weights to that dtype in every matmul anyway. The adapters stay fp32 (PEFT upcasts
    them), so the optimizer and gradient scaler see fp32 parameters only.
    """
    if not method_of(model_cfg).half_base:
        return None
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision)


def compute_dtype_name(model_cfg: ModelConfig, precision: Precision) -> str:
    """The 4-bit compute dtype: as asked, or following the run's mixed precision."""
    if model_cfg.bnb_4bit_compute_dtype != "auto":
        return model_cfg.bnb_4bit_compute_dtype
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")


def load_kwargs(model_cfg: ModelConfig, precision: Precision) -> dict[str, Any]:
    """Extra `from_pretrained` arguments for the method: none, a half-precision frozen base
    (`base_dtype`), or quantisation + placement.

    Raises:
        ConfigError: 8-bit/4-bit without bitsandbytes (validate() says so earlier; this
            guards callers that skip it).
    """
    bnb = quantization_config(model_cfg, precision)
    if bnb is None:
        half = base_dtype(model_cfg, precision)
        if half is None:
            return {}
        import torch

        return {"dtype": getattr(torch, half)}
    if not _bitsandbytes_installed():
        raise ConfigError(
            "8-bit and 4-bit loading need bitsandbytes, which is not installed",
            hint=f"{BNB_HINT}; or train with --use_lora",
        )
    # Quantised weights are made where they will run, while loading: one GPU per process
    # (torchrun) on CUDA, else bitsandbytes' CPU backend.
    place: int | str = int(os.environ.get("LOCAL_RANK", 0)) if _cuda_available() else "cpu"
    return {"quantization_config": bnb, "device_map": {"": place}}


def prepare_for_training(model, model_cfg: ModelConfig, train_cfg: TrainConfig):
    """The loaded model made ready for Trainer: frozen parts, kbit preparation, adapters.

    Args:
        model: WhisperForConditionalGeneration, quantised if `load_kwargs` asked for it.

    Returns:
        The model itself (full fine-tuning) or a PeftModel wrapping it.
    """
    method = method_of(model_cfg)
    if train_cfg.optim == "adamw_8bit" and not _cuda_available():
        # Measured on 2 cores: 8.8 s per step for 1.4M parameters, against 0.1 s for
        # adamw_torch. It works, so it is not refused; the user should know the price.
        log.warning(
            "--optim adamw_8bit on CPU: bitsandbytes' CPU optimizer is correct but about "
            "80x slower per step than adamw_torch; it saves memory, not time"
        )
    if not method.adapters:
        _freeze_for_full(model, model_cfg)
        return model

    from peft import get_peft_model, prepare_model_for_kbit_training

    if method.quantised:
        _quiet_int8_cast_notice()
        # Freezes the base and upcasts its non-quantised parts (norms, conv) to fp32.
        # Checkpointing stays with Trainer (--gradient_checkpointing): transformers 5
        # checkpoints without reentrancy, so no input-grad hook on the encoder's conv is
        # needed for gradients to reach adapters inside checkpointed layers.
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    with warnings.catch_warnings():
        # peft reads `is_gradient_checkpointing`, deprecated in transformers 5: not ours to fix.
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        peft_model = get_peft_model(model, lora_config(model_cfg))
    if method.half_base:  # a base that may load in half precision
        _features_in_weight_dtype(model)
    trainable, total = _count_parameters(peft_model)
    log.info(
        "method %s: training %s LoRA parameters (%.2f%% of %s), rank %d, alpha %d, on %s%s",
        method.name,
        f"{trainable:,}",
        100 * trainable / max(total, 1),
        f"{total:,}",
        model_cfg.lora_r,
        model_cfg.lora_alpha,
        ",".join(model_cfg.lora_target_modules),
        " of the decoder" if model_cfg.freeze_encoder else "",
    )
    if train_cfg.learning_rate < LORA_LOW_LR:
        log.warning(
            "--learning_rate %g is low for LoRA; LoRA runs usually use 1e-4 to 1e-3",
            train_cfg.learning_rate,
        )
    return peft_model


def _features_in_weight_dtype(model) -> None:
    """A half-precision base (`base_dtype`) gets fp32 log-mel features from the collator:
    autocast casts them in training, but generation (evaluation, the regression guard) runs
    the encoder outside autocast, where fp32 input meets bf16/fp16 convolution weights. The
    encoder casts its input to its weights' dtype first; an fp32 base is left alone."""
    encoder = model.get_encoder()
    dtype = encoder.conv1.weight.dtype
    if not dtype.is_floating_point or dtype.itemsize >= 4:
        return

    def cast(module, args, kwargs):
        if args:
            args = (args[0].to(dtype), *args[1:])
        elif kwargs.get("input_features") is not None:
            kwargs = {**kwargs, "input_features": kwargs["input_features"].to(dtype)}
        return args, kwargs

    encoder.register_forward_pre_hook(cast, with_kwargs=True)


def lora_config(model_cfg: ModelConfig):
    """PEFT LoraConfig from the options and the method's own (DoRA's use_dora); with
    --freeze_encoder, decoder layers only."""
    from peft import LoraConfig

    targets: list[str] | str = list(model_cfg.lora_target_modules)
    if model_cfg.freeze_encoder:
        # A regex string is matched against full module names (PEFT's rule).
        targets = rf"model\.decoder\.layers\.\d+\..*({'|'.join(targets)})"
    return LoraConfig(
        r=model_cfg.lora_r,
        lora_alpha=model_cfg.lora_alpha,
        lora_dropout=model_cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        **dict(method_of(model_cfg).peft_options),
    )


def finish_final_dir(final_dir: str | Path, model, processor, *, model_spec: str) -> None:
    """Make the saved model folder usable on its own.

    Adds the processor and the generation config that carries language and task (a
    PeftModel saves neither). An adapter's base is renamed as the user named it (offline
    name, Hub id, absolute folder) instead of the cache folder it was loaded from, so the
    adapter loads elsewhere too. Only here, after saving: while saving, PEFT looks the
    base up on the Hub unless it is a local folder.
    """
    import json

    final = Path(final_dir)
    processor.save_pretrained(str(final))
    model.generation_config.save_pretrained(str(final))
    if is_adapter_dir(final):
        cfg_file = final / "adapter_config.json"
        cfg = json.loads(cfg_file.read_text())
        cfg["base_model_name_or_path"] = portable_base_name(model_spec)
        cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def portable_base_name(spec: str) -> str:
    """How an adapter should name its base: a local folder as an absolute path (the run
    may be read from another working directory), anything else (offline name, Hub id)
    as written."""
    path = Path(spec).expanduser()
    return str(path.resolve()) if path.is_dir() else spec


def is_adapter_dir(path: str | Path) -> bool:
    """Whether `path` holds a PEFT adapter (a LoRA run's final/)."""
    return (Path(path) / "adapter_config.json").is_file()


def is_model_dir(path: str | Path) -> bool:
    """Whether `path` holds a transformers model of its own."""
    return (Path(path) / "config.json").is_file()


def _freeze_for_full(model, model_cfg: ModelConfig) -> None:
    # Whisper's encoder positions are fixed sinusoids in the original model; transformers
    # loads them as a trainable table, and a plain fine-tune would drift them. Keep them fixed.
    model.model.encoder.embed_positions.requires_grad_(False)
    if model_cfg.freeze_encoder:
        model.model.encoder.requires_grad_(False)


def _count_parameters(model) -> tuple[int, int]:
    trainable = total = 0
    for p in model.parameters():
        # 4-bit weights are packed two per byte; count what they stand for.
        n = p.numel() * (2 if p.__class__.__name__ == "Params4bit" else 1)
        total += n
        trainable += n if p.requires_grad else 0
    return trainable, total


class _OnceFilter(logging.Filter):
    """Passes a message the first time only."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix, self.seen = prefix, False

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.prefix):
            return True
        shown, self.seen = self.seen, True
        return not shown


def _quiet_int8_cast_notice() -> None:
    # bitsandbytes logs "inputs will be cast ... to float16" on every 8-bit matmul whose
    # input is not fp16 (always in fp32 or bf16 runs): thousands of lines a step. Once is news.
    bnb_log = logging.getLogger("bitsandbytes.autograd._functions")
    if not any(isinstance(f, _OnceFilter) for f in bnb_log.filters):
        bnb_log.addFilter(_OnceFilter("MatMul8bitLt: inputs will be cast"))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _bitsandbytes_installed() -> bool:
    # find_spec, not import: importing bitsandbytes takes seconds and prints backend notices.
    return importlib.util.find_spec("bitsandbytes") is not None


def _bitsandbytes_version() -> str:
    from importlib.metadata import version

    return version("bitsandbytes")


def _bitsandbytes_problems(flag: str) -> list[str]:
    """Why `flag` cannot use bitsandbytes here: not installed, or too old for the CPU."""
    if not _bitsandbytes_installed():
        return [f"{flag} needs bitsandbytes, which is not installed: {BNB_HINT}"]
    have = _bitsandbytes_version()
    if not bitsandbytes_runs_here(have, cuda=_cuda_available()):
        return [
            f"{flag} without a CUDA GPU needs bitsandbytes 0.50 or newer (its CPU backend), "
            f"found {have}: {BNB_HINT}"
        ]
    return []
