"""`fitwhisper transcribe`: flags (from `TranscribeJob` and `TranscribeOptions`) and the
function that runs it."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from fitwhisper.cli.flags import Options, add_command, build_configs
from fitwhisper.transcribe.options import TranscribeJob, TranscribeOptions, with_timestamps_for
from fitwhisper.whisper_facts import decoding

EXIT_HELP = (
    "Exit status: 0 when every file was transcribed, 1 when any input failed (each is "
    "reported on stderr, the others are still transcribed), 2 for bad flags, 130 or 143 "
    "when stopped by Ctrl-C or SIGTERM (each transcript finished by then is kept, whole)."
)

OPTIONS = (Options(TranscribeJob), Options(TranscribeOptions, "decoding"))


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "transcribe",
        OPTIONS,
        run,
        help="Transcribe audio files of any length to text, json, srt, vtt or tsv.",
        description="Transcribes files, folders (searched for audio) and list files with any "
        "model: a Hub id, a fine-tune, a LoRA adapter folder (run unmerged), a CTranslate2 "
        "folder or an offline name. Files over 30 s are cut at pauses and decoded in "
        "batches (ct2 engine), or run through Whisper's sequential long-form algorithm "
        "(timestamps, temperature fallback, thresholds; --mode sequential, and always on the "
        "transformers engine). " + EXIT_HELP,
        epilog=EXIT_HELP,
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.cli.common_options import CommonOptions
    from fitwhisper.errors import ConfigError
    from fitwhisper.logs import progress_enabled
    from fitwhisper.models.resolve import resolve_model
    from fitwhisper.transcribe.formats import render
    from fitwhisper.transcribe.inputs import collect_inputs
    from fitwhisper.transcribe.run import (
        choose_engine,
        make_engine,
        resolve_device,
        transcribe_files,
    )

    job, opts, common = build_configs(args, (TranscribeJob, TranscribeOptions, CommonOptions))
    quiet = common.quiet

    # 1. Inputs and outputs, checked before any model loads.
    formats = _checked_formats(job, opts)
    opts = with_timestamps_for(opts, formats)
    files, problems = collect_inputs(job.audio, job.audio_list)
    for problem in problems:
        print(problem.format(), file=sys.stderr)
    if job.output_file and len(files) + len(problems) != 1:
        raise ConfigError(
            f"--output_file takes one input; {len(files) + len(problems)} were given",
            hint="use --output_dir for several files",
        )
    if not files:
        print(f"no audio to transcribe ({len(problems)} inputs failed)", file=sys.stderr)
        return 1
    out_dir = Path(job.output_dir) if job.output_dir else None
    stems = _unique_stems(files)
    _refuse_writing_over_inputs(job, files, formats, stems)
    # 2. Engine and model: the spec is resolved here, once, and the result passed down.
    model = resolve_model(job.model)
    choice = choose_engine(job.engine, model, resolve_device(opts.device))
    if choice.name == "transformers" and opts.mode == "batched":
        raise ConfigError("--mode batched needs the ct2 engine", hint="pass --engine ct2")
    engine = make_engine(model, opts, choice)
    print(
        f"engine {choice.name} on {choice.device} ({choice.reason}); {_window(engine, opts)}; "
        f"{decoding(opts.beam_size)}, timestamps {opts.timestamps}; "
        f"language {engine.language or 'detected per file'} ({engine.language_why})",
        file=sys.stderr,
    )

    # 3. Transcribe; outputs are written as files finish, stdout in input order at the end.
    #    SIGTERM, like Ctrl-C, stops the run between two files' writes: what was finished
    #    stays, whole (each file is written to a temporary name and renamed).
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    done: dict[str, object] = {}

    def on_result(t) -> None:
        with _signals_held():  # the file's transcripts and its count, or none of them
            for fmt in formats:
                if out_dir:
                    _write_whole(out_dir / f"{stems[t.audio]}.{fmt}", render(t, fmt))
                elif job.output_file:
                    _write_whole(Path(job.output_file), render(t, fmt))
            done[t.audio] = t

    def on_problem(problem) -> None:
        print(problem.format(), file=sys.stderr)

    bar = _progress_bar(files, progress_enabled() and not quiet)
    group = opts.batch_size * (16 if choice.name == "ct2" else 1)
    try:
        with _stop_on_sigterm() as stopped_by:
            ok, failed = transcribe_files(
                engine,
                files,
                opts,
                on_result=on_result,
                on_problem=on_problem,
                progress=bar.update if bar else None,
                group_size=group,
            )
    except KeyboardInterrupt:
        if bar:
            bar.close()
        if not out_dir and not job.output_file:
            _print_transcripts(files, done, formats)
        where = f" in {out_dir}" if out_dir else f" in {job.output_file}" if job.output_file else ""
        print(
            f"interrupted ({stopped_by[0] if stopped_by else 'SIGINT'}): {len(done)} of "
            f"{len(files)} files transcribed, their transcripts whole{where}; the rest not",
            file=sys.stderr,
        )
        return 143 if stopped_by else 130
    if bar:
        bar.close()
    if not out_dir and not job.output_file:
        _print_transcripts(files, done, formats)
    failed += len(problems)
    if failed:
        print(f"transcribed {ok} files; {failed} failed (see above)", file=sys.stderr)
        return 1
    return 0


def _checked_formats(job: TranscribeJob, opts: TranscribeOptions) -> list[str]:
    """The output formats, once every option that needs no input file or model is checked."""
    from fitwhisper.chinese_script import check_output_script
    from fitwhisper.errors import ConfigError

    if not job.audio and not job.audio_list:
        raise ConfigError("no audio given", hint="pass files or folders, or --audio_list FILE")
    formats = _formats(job.output_format, job.output_file)
    _check_outputs(job.output_dir, job.output_file)
    check_output_script(opts.output_script)
    if opts.mode == "batched" and not opts.vad:
        raise ConfigError(
            "--mode batched cuts files at the pauses voice activity detection finds; it "
            "cannot run with --no_vad",
            hint="drop --no_vad, or pass --mode sequential to decode every window",
        )
    return formats


def _print_transcripts(files: list[Path], done: dict, formats: list[str]) -> None:
    """The finished transcripts on stdout, in input order."""
    from fitwhisper.transcribe.formats import render

    for f in files:
        t = done.get(str(f))
        if t is None:
            continue
        if len(files) > 1:
            print(f"==> {f} <==")
        for fmt in formats:
            sys.stdout.write(render(t, fmt))


def _write_whole(path: Path, text: str) -> None:
    """`text` into `path` through a temporary sibling and a rename, so `path` is never
    seen half-written (a stopped run leaves the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM wait until the block ends (then arrive as usual)."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def _stop_on_sigterm():
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so the run ends in one place;
    yields a list that names the signal once it came."""
    stopped_by: list[str] = []

    def stop(signum, _frame) -> None:
        stopped_by.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: SIGTERM keeps its default
        yield stopped_by
        return
    try:
        yield stopped_by
    finally:
        signal.signal(signal.SIGTERM, old)


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


def _check_outputs(output_dir: str | None, output_file: str | None) -> None:
    """Refuse outputs that cannot be written before a model loads or audio is decoded, and
    create nothing: a missing --output_dir is made later, once there is text to write."""
    from fitwhisper.output_guard import Output, check_outputs

    check_outputs(
        [
            Output("--output_file", output_file, "file"),
            Output("--output_dir", output_dir, "files_into"),
        ],
        [],
    )


def _refuse_writing_over_inputs(job, files: list[Path], formats: list[str], stems) -> None:
    """Every transcript path, checked against every input before any model loads (the
    output guard: the folder may hold the recordings, no transcript may be one)."""
    from fitwhisper.output_guard import Output, check_outputs

    written = [
        Output("--output_file", job.output_file, "file"),
        Output("--output_dir", job.output_dir, "files_into"),
    ]
    if job.output_dir:
        out_dir = Path(job.output_dir)
        written += [
            Output(
                "the transcript", out_dir / f"{stems[str(f)]}.{fmt}", "file", in_checked_folder=True
            )
            for f in files
            for fmt in formats
        ]
    inputs = [("audio", f) for f in files]
    check_outputs(written, [*inputs, ("--audio_list", job.audio_list), ("--model", job.model)])


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


def _window(engine, opts) -> str:
    """What the encoder gets for clips up to 30 s, and why."""
    if engine.window == "full":
        return "clips up to 30 s padded to 30 s windows"
    why = "the model's training chose it" if opts.encoder_window == "auto" else "as asked"
    return f"clips up to 30 s encoded on their own length and 1 s ({why})"
