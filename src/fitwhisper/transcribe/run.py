"""Transcribe many files with one engine: decode, batch, report bad files one by one.

`transcribe_files` is the engine of `fitwhisper transcribe`; `choose_engine` picks the engine
for `--engine auto` (the faster one measured in bench/RESULTS-transcribe.md). Both engine
functions take the model spec resolved once by the caller (`models.resolve.resolve_model`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fitwhisper.data.audio import CONVERT_COMMAND, AudioDecodeError, load_audio, probe_audio
from fitwhisper.errors import ConfigError, FitWhisperError
from fitwhisper.transcribe.formats import Transcript
from fitwhisper.transcribe.inputs import InputProblem
from fitwhisper.transcribe.options import TranscribeOptions
from fitwhisper.transcribe.repeats import MAX_REPEATS, drop_repeats

if TYPE_CHECKING:
    import numpy as np

    from fitwhisper.models.resolve import ResolvedModel
    from fitwhisper.transcribe.engine import Engine

log = logging.getLogger(__name__)

_CONVERT_HINT = f"convert it to WAV or FLAC, e.g. `{CONVERT_COMMAND}`"


@dataclass(frozen=True)
class EngineChoice:
    name: str  # "transformers" or "ct2"
    device: str  # "cpu", "cuda", "cuda:1"
    reason: str


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when a GPU is visible, else `cpu`; others are checked."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (kind == "cpu" and index) or (index and not index.isdigit()):
        raise ConfigError(f"unknown --device {device!r}", hint="use auto, cpu, cuda or cuda:N")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: no CUDA GPU is visible", hint="use --device cpu")
    if index and int(index) >= (count := torch.cuda.device_count()):
        raise ConfigError(
            f"--device {device}: this machine shows {count} GPU(s), numbered 0 to {count - 1}",
            hint="`fitwhisper doctor` lists them; CUDA_VISIBLE_DEVICES renumbers them from 0",
        )
    return device


def choose_engine(engine: str, model: ResolvedModel, device: str) -> EngineChoice:
    """The engine for `--engine`; `auto` follows the benchmark: CTranslate2 (int8) is the
    faster one on CPU; a LoRA adapter stays unmerged on transformers; on CUDA no comparison
    was measured, so transformers (the model as trained) is kept."""
    if engine == "ct2" and not _ct2_installed():
        raise ConfigError(
            "--engine ct2 needs ctranslate2 and faster-whisper",
            hint="pip install 'fitwhisper[ct2]', or use --engine transformers",
        )
    if engine in ("transformers", "ct2"):
        return EngineChoice(engine, device, "--engine " + engine)
    if engine != "auto":
        raise ConfigError(f"unknown --engine {engine!r}", hint="use auto, transformers or ct2")
    if not _ct2_installed():
        return EngineChoice("transformers", device, "ctranslate2/faster-whisper not installed")
    if model.adapter is not None:
        return EngineChoice("transformers", device, "a LoRA adapter runs unmerged")
    if device == "cpu":
        return EngineChoice("ct2", device, "CTranslate2 int8 is the faster engine on CPU")
    return EngineChoice("transformers", device, "on CUDA the engines were not compared")


def make_engine(model: ResolvedModel, opts: TranscribeOptions, choice: EngineChoice) -> Engine:
    """Load the model into the chosen engine (exporting to CTranslate2 once if needed).
    Without --language both engines take the model's default language, the rule `evaluate`
    and export re-scoring follow (`models.resolve.default_language`: its preset's, else the
    one its training recorded); a model with neither detects it per file. The engine's
    `language_why` says which applied."""
    opts, why = _decided_language(model, opts)
    engine = _loaded_engine(model, opts, choice)
    engine.language_why = why
    return engine


# Why a run has no language: nothing asked for one or recorded it.
_DETECTED = "none given or recorded: detected per file, or an English-only model"


def _decided_language(
    model: ResolvedModel, opts: TranscribeOptions
) -> tuple[TranscribeOptions, str]:
    if model.kind == "ct2_dir":  # a CTranslate2 folder: the language its export recorded
        from fitwhisper.models.ct2_export import export_info

        if opts.language:
            return opts, "--language"
        if recorded := export_info(Path(model.spec)).get("language"):
            return dataclasses.replace(opts, language=recorded), "recorded by its export"
        return opts, _DETECTED
    from fitwhisper.models.resolve import language_choice

    language, why = language_choice(model, opts.language)
    if language is None:
        why = _DETECTED
    return dataclasses.replace(opts, language=language), why


def _loaded_engine(model: ResolvedModel, opts: TranscribeOptions, choice: EngineChoice) -> Engine:
    if choice.name == "transformers":
        from fitwhisper.transcribe.hf_engine import TransformersEngine

        return TransformersEngine(model, opts, choice.device)
    from fitwhisper.transcribe.ct2_engine import CT2Engine

    if model.kind == "ct2_dir" and opts.compute_type == "auto":
        folder = Path(model.spec)  # a CTranslate2 folder runs as it is
    else:
        from fitwhisper.models.ct2_export import cached_ct2

        gpu = choice.device.startswith("cuda")
        ct = opts.compute_type if opts.compute_type != "auto" else None
        folder = cached_ct2(model, ct or ("float16" if gpu else "int8"))
    return CT2Engine(folder, opts, choice.device, _ct2_window(model, folder, opts))


def _ct2_window(model: ResolvedModel, folder: Path, opts: TranscribeOptions) -> str:
    """The encoder window for the ct2 engine: as asked, or for auto the one the model's
    training chose: recorded in its config.json, or in an exported folder's export info (a
    cached export made before the info held it would say nothing)."""
    from fitwhisper.models.ct2_export import export_info
    from fitwhisper.models.short_window import recorded_window

    if opts.encoder_window != "auto":
        return opts.encoder_window
    if model.kind != "ct2_dir":
        return "full" if model.adapter is not None else recorded_window(model.path_or_id)
    window = export_info(folder).get("encoder_window")
    return window if window in ("full", "short") else "full"


def transcribe_files(
    engine,
    files: Sequence[Path],
    opts: TranscribeOptions,
    *,
    on_result: Callable[[Transcript], None],
    on_problem: Callable[[InputProblem], None],
    progress: Callable[[float], None] | None = None,
    group_size: int | None = None,
) -> tuple[int, int]:
    """Decode and transcribe `files`, calling `on_result` per transcript as soon as the
    engine has finished that file (not when its group ends), and `on_problem` per file that
    cannot be read; returns (transcribed, failed). Files are decoded `group_size` at a
    time, shortest first; the engine batches within a group."""
    ok = failed = 0
    durations: dict[Path, float] = {}
    for f in files:
        problem = _probe(f)
        if isinstance(problem, InputProblem):
            on_problem(problem)
            failed += 1
        else:
            durations[f] = problem
    # Similar lengths together: less padding per batch.
    order = sorted(durations, key=durations.__getitem__)
    size = group_size or opts.batch_size
    for group in _chunks(order, size):
        names, audios = [], []
        for f in group:
            try:
                audio = load_audio(f)
            except FitWhisperError as e:
                hint = _CONVERT_HINT if isinstance(e, AudioDecodeError) else e.hint
                on_problem(InputProblem(str(f), e.message, hint))
                failed += 1
                continue
            if audio.size == 0:
                on_problem(_empty(f))
                failed += 1
                continue
            names.append(str(f))
            audios.append(audio)
        if not audios:
            continue
        # Each file as soon as the engine has it: a run stopped part way keeps those.
        for _i, t in engine.stream(names, audios, progress):
            on_result(convert_script(without_loops(t), opts.output_script))
            ok += 1
    return ok, failed


def without_loops(t: Transcript) -> Transcript:
    """The transcript without a hallucination loop (the same text, segment after segment,
    beyond `repeats.MAX_REPEATS`), saying in the log how many segments went."""
    segments, dropped = drop_repeats(t.segments)
    if not dropped:
        return t
    log.warning(
        "%s: dropped %d segments repeating the text before them more than %d times "
        "(a hallucination loop)",
        t.audio,
        dropped,
        MAX_REPEATS,
    )
    return dataclasses.replace(t, segments=segments, extra={**t.extra, "repeats_dropped": dropped})


def convert_script(t: Transcript, output_script: str | None) -> Transcript:
    """The transcript with its texts converted into a script (traditional, simplified, an
    OpenCC table such as s2tw), or as it is."""
    from fitwhisper.chinese_script import check_output_script, to_script

    script = check_output_script(output_script)
    if script is None:
        return t
    segments = tuple(dataclasses.replace(s, text=to_script(s.text, script)) for s in t.segments)
    return dataclasses.replace(t, segments=segments)


def transcribe_file(model_spec: str | Path, audio_path: str | Path, *, device: str = "cpu") -> str:
    """Transcribe one audio file of any length and return the text (the demo's path).

    Args:
        model_spec: anything `fitwhisper.models.resolve.resolve_model` accepts, or a run's
            `final/` folder.
        audio_path: any format `fitwhisper.data.audio.load_audio` decodes.
        device: "cpu", "cuda", "cuda:N" or "auto".
    """
    # Clips of up to 30 s in one generate call, as the ASR pipeline does; longer ones in
    # Whisper's long-form algorithm.
    from fitwhisper.models.resolve import resolve_model

    opts = TranscribeOptions(device=device, timestamps="none")
    choice = EngineChoice("transformers", resolve_device(device), "the model as trained")
    engine = make_engine(resolve_model(model_spec), opts, choice)
    audio = load_audio(audio_path)
    return engine.transcribe([str(audio_path)], [audio])[0].text


def recording_transcriber(
    model_spec,
    *,
    language: str | None,
    task: str,
    output_script: str | None,
    initial_prompt: str | None = None,
) -> Callable[[str, np.ndarray], Transcript]:
    """A function transcribing one recording of any length as `fitwhisper transcribe` does
    by default (the transformers engine, the model as trained, its long-form windows and
    conditioning, `--initial_prompt` if given), loops dropped and the script converted:
    `evaluate --long_form`'s."""
    from fitwhisper.models.resolve import as_resolved

    model = as_resolved(model_spec)
    opts = TranscribeOptions(language=language, task=task, initial_prompt=initial_prompt)
    engine = make_engine(model, opts, choose_engine("transformers", model, resolve_device("auto")))

    def transcribe(name: str, audio: np.ndarray) -> Transcript:
        (t,) = engine.transcribe([name], [audio])
        return convert_script(without_loops(t), output_script)

    return transcribe


# --- helpers ------------------------------------------------------------------------------


def _ct2_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("ctranslate2", "faster_whisper"))


def _probe(f: Path) -> float | InputProblem:
    try:
        duration = probe_audio(f).duration_s
    except AudioDecodeError as e:
        return InputProblem(str(f), e.message, _CONVERT_HINT)
    except FitWhisperError as e:
        return InputProblem(str(f), e.message, e.hint)
    if duration <= 0:
        return _empty(f)
    return duration


def _empty(f: Path) -> InputProblem:
    return InputProblem(
        str(f), "the file holds no audio (0 samples)", "check the recording; nothing to transcribe"
    )


def _chunks(items: list, n: int) -> Iterator[list]:
    for i in range(0, len(items), max(1, n)):
        yield items[i : i + n]
