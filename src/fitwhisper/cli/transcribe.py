"""`fitwhisper transcribe`: flags and the function that runs it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_HELP = (
    "Exit status: 0 when every file was transcribed, 1 when any input failed (each is "
    "reported on stderr, the others are still transcribed), 2 for bad flags."
)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from fitwhisper.scoring import OPENCC_CONFIGS
    from fitwhisper.transcribe.formats import FORMATS

    p = sub.add_parser(
        "transcribe",
        parents=[common],
        help="Transcribe audio files of any length to text, json, srt, vtt or tsv.",
        description="Transcribes files, folders (searched for audio) and list files with any "
        "model: a Hub id, a fine-tune, a LoRA adapter folder (run unmerged), a CTranslate2 "
        "folder or an offline name. Files over 30 s are cut at pauses and decoded in "
        "batches (ct2 engine), or run through Whisper's sequential long-form algorithm "
        "(timestamps, temperature fallback, thresholds; --mode sequential, and always on the "
        "transformers engine). " + EXIT_HELP,
        epilog=EXIT_HELP,
    )
    p.add_argument("audio", nargs="*", metavar="AUDIO", help="Audio files or folders.")
    p.add_argument("--model", required=True, help="Model spec, as for evaluate.")
    p.add_argument(
        "--audio_list", "--audio-list", metavar="FILE", help="A text file, one audio path a line."
    )
    p.add_argument(
        "--output_dir",
        "--output-dir",
        metavar="DIR",
        help="Write one file per input and format here (NAME.FORMAT).",
    )
    p.add_argument(
        "--output_file",
        "--output-file",
        metavar="FILE",
        help="Write the one input's transcript here; the format follows the suffix unless "
        "--output_format is given.",
    )
    p.add_argument(
        "--output_format",
        "--output-format",
        default=None,
        help=f"Comma-separated, from {', '.join(FORMATS)} or all (default txt).",
    )
    p.add_argument("--language", help="e.g. zh; default: the model's own, else detected.")
    p.add_argument(
        "--task",
        choices=["transcribe", "translate"],
        default="transcribe",
        help="transcribe (default), or translate into English.",
    )
    p.add_argument(
        "--timestamps",
        choices=["none", "segment", "word"],
        default="segment",
        help="segment (default); word (ct2 engine) adds word times to json; none decodes "
        "clips of up to 30 s without timestamp tokens (one segment per clip).",
    )
    p.add_argument(
        "--engine",
        choices=["auto", "transformers", "ct2"],
        default="auto",
        help="auto (default): ct2 on CPU (measured faster; a transformers model is exported to "
        "CTranslate2 int8 once, into the cache), transformers for LoRA adapters (unmerged) "
        "and on CUDA.",
    )
    p.add_argument(
        "--mode",
        choices=["auto", "sequential", "batched"],
        default="auto",
        help="Files over 30 s: sequential runs Whisper's long-form algorithm (previous-text "
        "conditioning, temperature fallback); batched cuts them at pauses (voice activity) "
        "and decodes the chunks in batches (ct2 only). auto (default): batched on the ct2 "
        "engine (measured faster at equal CER), sequential on transformers. Clips of up to "
        "30 s are batched across files in every mode but sequential.",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N.")
    p.add_argument("--beam_size", "--beam-size", type=int, default=1, help="1: greedy.")
    p.add_argument(
        "--batch_size", "--batch-size", type=int, default=8, help="Files or chunks per batch."
    )
    p.add_argument(
        "--max_new_tokens",
        type=int,
        help="Most tokens written per 30 s window (default: the model's limit, 448).",
    )
    p.add_argument("--initial_prompt", "--initial-prompt", help="Text to prime the decoder.")
    p.add_argument(
        "--no_condition_on_previous_text",
        dest="condition_on_previous_text",
        action="store_false",
        help="Do not feed a window's text to the next (long files): fewer repetition loops.",
    )
    p.add_argument(
        "--no_temperature_fallback",
        dest="temperature_fallback",
        action="store_false",
        help="Greedy only; no re-decoding at 0.2, 0.4 ... 1.0 when a window fails a threshold.",
    )
    p.add_argument(
        "--compression_ratio_threshold",
        type=float,
        help="Re-decode a window that repeats itself: default 2.4 (text gzip ratio, ct2) or "
        "1.35 (token zlib ratio, transformers).",
    )
    p.add_argument(
        "--logprob_threshold",
        type=float,
        default=-1.0,
        help="Re-decode a window whose average token log-probability is below this.",
    )
    p.add_argument(
        "--no_speech_threshold",
        type=float,
        default=0.6,
        help="Skip a window whose no-speech probability is above this and whose average "
        "log-probability is below --logprob_threshold (silence, music).",
    )
    p.add_argument(
        "--compute_type",
        default="auto",
        help="ct2 engine: int8, int8_float16, float16, float32 (default: int8 on CPU, "
        "float16 on CUDA).",
    )
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: library default).")
    p.add_argument(
        "--output_script",
        "--output-script",
        "--opencc",
        dest="opencc",
        metavar="SCRIPT",
        help="Convert the output's Chinese script: traditional (OpenCC s2tw, for zh-TW), "
        f"simplified (t2s), or an OpenCC table ({', '.join(OPENCC_CONFIGS)}). Default: none.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.errors import ConfigError
    from fitwhisper.logs import progress_enabled
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.formats import render
    from fitwhisper.transcribe.inputs import collect_inputs
    from fitwhisper.transcribe.options import TranscribeOptions
    from fitwhisper.transcribe.run import (
        choose_engine,
        make_engine,
        resolve_device,
        transcribe_files,
    )

    # 1. Inputs and outputs, checked before any model loads.
    if not args.audio and not args.audio_list:
        raise ConfigError("no audio given", hint="pass files or folders, or --audio_list FILE")
    formats = _formats(args.output_format, args.output_file)
    check_output_script(args.opencc)
    files, problems = collect_inputs(args.audio, args.audio_list)
    for problem in problems:
        print(problem.format(), file=sys.stderr)
    if args.output_file and len(files) + len(problems) != 1:
        raise ConfigError(
            f"--output_file takes one input; {len(files) + len(problems)} were given",
            hint="use --output_dir for several files",
        )
    if not files:
        print(f"no audio to transcribe ({len(problems)} inputs failed)", file=sys.stderr)
        return 1
    opts = TranscribeOptions(
        language=args.language,
        task=args.task,
        beam_size=args.beam_size,
        timestamps=args.timestamps,
        initial_prompt=args.initial_prompt,
        condition_on_previous_text=args.condition_on_previous_text,
        temperature_fallback=args.temperature_fallback,
        compression_ratio_threshold=args.compression_ratio_threshold,
        logprob_threshold=args.logprob_threshold,
        no_speech_threshold=args.no_speech_threshold,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        mode=args.mode,
        device=args.device,
        compute_type=args.compute_type,
        threads=args.threads,
        opencc=args.opencc,
    )
    # 2. Engine and model.
    # The spec is resolved here, once, and the result passed down.
    model = resolve_model(args.model)
    choice = choose_engine(args.engine, model, resolve_device(args.device))
    if choice.name == "transformers" and args.mode == "batched":
        raise ConfigError("--mode batched needs the ct2 engine", hint="pass --engine ct2")
    engine = make_engine(model, opts, choice)
    print(f"engine {choice.name} on {choice.device} ({choice.reason})", file=sys.stderr)

    # 3. Transcribe; outputs are written as files finish, stdout in input order at the end.
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    stems = _unique_stems(files)
    done: dict[str, object] = {}

    def on_result(t) -> None:
        done[t.audio] = t
        for fmt in formats:
            if out_dir:
                (out_dir / f"{stems[t.audio]}.{fmt}").write_text(render(t, fmt), encoding="utf-8")
            elif args.output_file:
                Path(args.output_file).write_text(render(t, fmt), encoding="utf-8")

    def on_problem(problem) -> None:
        print(problem.format(), file=sys.stderr)

    bar = _progress_bar(files, progress_enabled() and not getattr(args, "quiet", False))
    group = opts.batch_size * (16 if choice.name == "ct2" else 1)
    ok, failed = transcribe_files(
        engine,
        files,
        opts,
        on_result=on_result,
        on_problem=on_problem,
        progress=bar.update if bar else None,
        group_size=group,
    )
    if bar:
        bar.close()
    if not out_dir and not args.output_file:
        for f in files:
            t = done.get(str(f))
            if t is None:
                continue
            if len(files) > 1:
                print(f"==> {f} <==")
            for fmt in formats:
                sys.stdout.write(render(t, fmt))
    failed += len(problems)
    if failed:
        print(f"transcribed {ok} files; {failed} failed (see above)", file=sys.stderr)
        return 1
    return 0


def _formats(spec: str | None, output_file: str | None) -> list[str]:
    from fitwhisper.errors import ConfigError
    from fitwhisper.transcribe.formats import FORMATS

    if spec is None:
        suffix = Path(output_file).suffix.lstrip(".").lower() if output_file else ""
        return [suffix if suffix in FORMATS else "txt"]
    names = list(FORMATS) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    bad = [n for n in names if n not in FORMATS]
    if bad or not names:
        raise ConfigError(
            f"unknown --output_format {', '.join(bad) or repr(spec)}",
            hint=f"use one or more of {', '.join(FORMATS)} (comma-separated), or all",
        )
    if output_file and len(names) > 1:
        raise ConfigError(
            "--output_file takes one format", hint="use --output_dir for several formats"
        )
    return names


def _unique_stems(files: list[Path]) -> dict[str, str]:
    """Output names: the file's stem, with -2, -3 ... when two inputs share one."""
    seen: dict[str, int] = {}
    out = {}
    for f in files:
        n = seen.get(f.stem, 0) + 1
        seen[f.stem] = n
        out[str(f)] = f.stem if n == 1 else f"{f.stem}-{n}"
    return out


def _progress_bar(files: list[Path], enabled: bool):
    """A bar over seconds of audio, on stderr, only when it is a terminal."""
    if not enabled or not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    from fitwhisper.data.audio import probe_audio

    total = 0.0
    for f in files:
        try:
            total += probe_audio(f).duration_s
        except Exception:  # bad files are reported by the run itself
            pass
    return tqdm(total=round(total, 1), unit="audio s", file=sys.stderr, dynamic_ncols=True)
