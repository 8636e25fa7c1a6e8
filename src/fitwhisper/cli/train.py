"""`fitwhisper train`: flags and the function that runs it."""

from __future__ import annotations

import argparse

_SECTIONS = {"model": "ModelConfig", "data": "DataConfig", "train": "TrainConfig"}


def _config_classes() -> dict[str, type]:
    from fitwhisper import config

    return {section: getattr(config, name) for section, name in _SECTIONS.items()}


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from fitwhisper.cli.flags import add_config_arguments

    p = sub.add_parser(
        "train",
        parents=[common],
        help="Fine-tune a Whisper model on a manifest of audio and transcripts.",
        description="Checks every row of the data first, then fine-tunes with Seq2SeqTrainer "
        "and scores the result by generation (WER, or CER for Chinese). Options come from "
        "--config FILE (YAML, flat or in model:/data:/train: sections, e.g. a run's "
        "fitwhisper.yaml) and from flags, which win.",
    )
    p.add_argument("--config", metavar="FILE", help="YAML file of options (flags override it).")
    for section, cls in _config_classes().items():
        add_config_arguments(p, cls, section)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.cli.flags import build_config, load_config_file
    from fitwhisper.train import train

    classes = _config_classes()
    from_file = load_config_file(args.config, classes) if args.config else {}
    model_cfg, data_cfg, train_cfg = (
        build_config(cls, args, from_file.get(section, {})) for section, cls in classes.items()
    )
    if train_cfg.plan or train_cfg.auto_fit:
        from fitwhisper.memory.fit import resolve_plan

        # Flags absent from the command line are absent from args (argparse.SUPPRESS).
        explicit = set(vars(args)) | {k for part in from_file.values() for k in part}
        model_cfg, train_cfg = resolve_plan(model_cfg, data_cfg, train_cfg, explicit)
    r = train(model_cfg, data_cfg, train_cfg)
    scores = ", ".join(f"{k.upper()} {100 * v:.2f}%" for k, v in r.eval_metrics.items())
    print(
        f"trained {r.global_step} steps on {r.train_rows} clips"
        + (
            f" ({r.skipped_rows} rows skipped, see {r.output_dir / 'data_report.json'})"
            if r.skipped_rows
            else ""
        )  # fmt: skip
    )
    if r.resumed_from:
        print(f"resumed from {r.resumed_from}")
    if r.best_checkpoint:
        print(f"best checkpoint: {r.best_checkpoint} (saved as the model)")
    if scores:
        print(f"held-out {r.eval_rows} clips: {scores}  (per clip: {r.output_dir / 'eval'})")
    print(f"model: {r.final_dir}")
    return 0
