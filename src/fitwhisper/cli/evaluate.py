"""`fitwhisper evaluate`: flags and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_configs
from fitwhisper.config import DataConfig, EvalConfig


@dataclass(frozen=True)
class EvaluateCommand:
    """What to score and where the per-clip files go."""

    model: str = field(
        default="",
        metadata={
            "path": "model",
            "help": "Hub id, local transformers or CTranslate2 folder, run folder (its "
            "final/), a run's checkpoint-N/, or an offline name (offline/tiny.en, "
            "offline/base).",
            "positional": True,
        },
    )
    manifest: str = field(
        default="",
        metadata={
            "path": "any",
            "help": "Manifest to score (JSON, JSONL, CSV/TSV, audiofolder).",
            "positional": True,
        },
    )
    compare: str | None = field(
        default=None,
        metadata={
            "path": "model",
            "help": "Score this model too, on the same clips with the same metric and "
            "normaliser, and print both side by side with the difference (MODEL minus "
            "OTHER_MODEL).",
            "metavar": "OTHER_MODEL",
        },
    )
    long_form: bool = field(
        default=False,
        metadata={
            "help": "Score each row as one long recording (any length): transcribed as "
            "`fitwhisper transcribe` does it (its 30 s windows, conditioned on the previous "
            "text) and scored as one text against the row's transcript, or against its "
            "segments (a `segments` column, an SRT/VTT file beside the recording), with the "
            "mean distance of segment boundaries from the reference's where it has times. "
            "Without it, rows with segments are scored window by window.",
        },
    )
    initial_prompt: str | None = field(
        default=None,
        metadata={
            "help": "With --long_form: prime the decoder with this text, as `fitwhisper "
            "transcribe --initial_prompt` does (names, terms, the style of the text), to "
            "see whether it helps; score once with it and once without.",
            "metavar": "TEXT",
        },
    )
    output_dir: str | None = field(
        default=None,
        metadata={
            "path": "new_folder",
            "help": "Write predictions.jsonl (per clip: texts as written and normalised, "
            "substitutions, deletions, insertions) and metrics.json here; with --compare, each "
            "model's in OUTPUT_DIR/<model>/ plus comparison.json and comparison.jsonl (per "
            "clip).",
        },
    )


# Manifest columns and the bad-row policy are DataConfig's, as `train` and `check-data` show.
DATA_FIELDS = (
    "audio_column",
    "text_column",
    "audio_dir",
    "language_column",
    "language_token",
    "bad_rows",
)
OPTIONS = (
    Options(EvaluateCommand),
    Options(EvalConfig, "scoring"),
    Options(DataConfig, "data", only=DATA_FIELDS),
)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "evaluate",
        OPTIONS,
        run,
        help="Score a model on a manifest by real generation (WER, or CER for Chinese).",
        description="Transcribes every clip of the manifest with greedy generation (never "
        "teacher-forced) and scores it against the manifest's transcripts, raw and after one "
        "normaliser applied to both sides. --compare scores a second model on the same clips "
        "side by side (e.g. the zero-shot model against a fine-tune).",
    )


def run(args: argparse.Namespace) -> int:
    cmd, cfg, data_cfg = build_configs(args, (EvaluateCommand, EvalConfig, DataConfig))
    if not cmd.output_dir:
        return _evaluate(cmd, cfg, data_cfg)
    from pathlib import Path

    from fitwhisper.folder_lock import LOCK_FILE, output_folder
    from fitwhisper.output_guard import MARKER, Output, check_outputs, claim_folder

    # Before the model runs, not after it.
    inputs = {"MODEL": cmd.model, "MANIFEST": cmd.manifest, "--compare": cmd.compare}
    check_outputs([Output("--output_dir", cmd.output_dir, "folder")], inputs)
    with output_folder(Path(cmd.output_dir), "evaluation", ignore=(MARKER,)) as out:
        claim_folder(out, "evaluate", ignore=(LOCK_FILE,))
        return _evaluate(cmd, cfg, data_cfg)


def _evaluate(cmd: EvaluateCommand, cfg: EvalConfig, data_cfg: DataConfig) -> int:
    from fitwhisper.evaluate import compare_manifest, evaluate_manifest

    if cmd.long_form and cmd.compare:
        from fitwhisper.errors import ConfigError

        raise ConfigError(
            "--long_form does not take --compare yet",
            hint="score each model with --long_form on its own, with the same options",
        )
    if cmd.initial_prompt is not None and not cmd.long_form:
        from fitwhisper.errors import ConfigError

        raise ConfigError(
            "--initial_prompt is used with --long_form only",
            hint="add --long_form to score whole recordings as `transcribe` writes them; "
            "clip-by-clip scoring feeds the model no prompt",
        )
    if cmd.long_form:
        from fitwhisper.evaluate.long_form import evaluate_long_form
        from fitwhisper.transcribe.run import recording_transcriber

        def transcriber():
            return recording_transcriber(
                cmd.model,
                language=cfg.language,
                task=cfg.task,
                output_script=cfg.output_script,
                initial_prompt=cmd.initial_prompt,
            )

        res = evaluate_long_form(cmd.model, cmd.manifest, transcriber, cfg, data_cfg)
        print(res.format_summary())
        if cmd.output_dir:
            out = res.write(cmd.output_dir)
            print(f"\nper recording: {out / 'predictions.jsonl'}  metrics: {out / 'metrics.json'}")
        skipped = res.skipped
    elif cmd.compare:
        cmp = compare_manifest(cmd.model, cmd.compare, cmd.manifest, cfg, data_cfg)
        print(cmp.format_table())
        if cmd.output_dir:
            written = cmp.write(cmd.output_dir)
            print(f"\nper clip: {written['model']}/, {written['baseline']}/")
            print(f"comparison: {written['comparison']} (per clip: comparison.jsonl)")
        skipped = cmp.model.skipped
    else:
        res = evaluate_manifest(cmd.model, cmd.manifest, cfg, data_cfg)
        print(res.format_summary())
        if cmd.output_dir:
            out = res.write(cmd.output_dir)
            print(f"\nper clip: {out / 'predictions.jsonl'}  metrics: {out / 'metrics.json'}")
        skipped = res.skipped
    if cmd.output_dir:
        from fitwhisper.report import report_quietly

        if (page := report_quietly(cmd.output_dir)) is not None:
            print(f"report: {page}")
    if skipped:
        print(f"\n{len(skipped)} rows skipped (--bad_rows skip):")
        print("\n".join(f"  {line}" for line in skipped[:20]))
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more (all in metrics.json)")
    return 0
