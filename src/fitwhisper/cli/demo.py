"""`fitwhisper demo`: flags and the function that runs it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.demo import DEFAULT_N_EVAL, DEFAULT_N_TRAIN
from fitwhisper.option_ranges import SEED


@dataclass(frozen=True)
class DemoOptions:
    """Where the demo writes, and how it trains."""

    output_dir: str = field(
        default="demo-run", metadata={"path": "new_folder", "help": "Where everything goes."}
    )
    num_train_epochs: float = field(
        default=2.0, metadata={"above": 0, "help": "Passes over the training clips."}
    )
    freeze_encoder: bool = field(
        default=False,
        metadata={
            "help": "Train the decoder only, on 30 s windows (a frozen encoder cannot learn "
            "the short window the default trains on): about 3.5x slower per step on a CPU."
        },
    )
    train_clips: int = field(
        default=DEFAULT_N_TRAIN,
        metadata={
            "min": 1,
            "help": "Clips spoken for training: fewer make a quicker demo that learns less.",
        },
    )
    eval_clips: int = field(
        default=DEFAULT_N_EVAL,
        metadata={
            "min": 1,
            "help": "Held-out clips (sentences never trained on), scored before and after.",
        },
    )
    learning_rate: float = field(default=1e-4, metadata={"above": 0, "help": "Peak learning rate."})
    seed: int = field(
        default=0,
        metadata={
            **SEED,
            "help": "Seed for the data and the training.",
        },
    )


OPTIONS = (Options(DemoOptions),)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "demo",
        OPTIONS,
        run,
        help="Fine-tune a real Whisper model on generated speech, on this CPU, in minutes.",
        description="Makes a small speech dataset offline (invented words spoken by an offline "
        "voice), scores the real offline/tiny.en model on held-out sentences, fine-tunes it, "
        "scores it again on the same clips, and transcribes one of them. Needs no data or "
        "model of yours and no network.",
    )


def run(args: argparse.Namespace) -> int:
    from fitwhisper.demo.run import run_demo
    from fitwhisper.output_guard import Output, check_outputs

    opts = build_config(DemoOptions, args)
    check_outputs([Output("--output_dir", opts.output_dir, "folder")], [])  # it reads nothing
    r = run_demo(
        opts.output_dir,
        num_train_epochs=opts.num_train_epochs,
        learning_rate=opts.learning_rate,
        freeze_encoder=opts.freeze_encoder,
        n_train=opts.train_clips,
        n_eval=opts.eval_clips,
        seed=opts.seed,
    )
    print(
        f"""
fitwhisper demo: offline/tiny.en fine-tuned on {r.n_train} generated clips
  WER on {r.n_eval} held-out clips (never trained on):
    before fine-tuning  {100 * r.wer_before:5.1f}%
    after fine-tuning   {100 * r.wer_after:5.1f}%
  transcript of {r.sample_file.name}:
    reference   {r.sample_reference}
    fine-tuned  {r.sample_transcript}
  the training run took {r.train_seconds:.0f} s with its scoring; {_saved(r)}
  fine-tuned model    {r.final_dir}  (loads with from_pretrained)
  predictions         {r.out_dir / "run" / "eval" / "before"}, {r.out_dir / "run" / "eval"}
  TensorBoard logs    {r.out_dir / "run" / "logs"}
  took {r.seconds / 60:.1f} min"""
    )
    return 0


def _saved(r) -> str:
    if r.encoder_input == "full":
        return "encoder input full: every clip padded to 30 s"
    share = r.encoder_frame_share
    return (
        f"encoder input {r.encoder_input} (the default): the encoder got about {share:.0%} "
        f"of the frames of 30 s windows, {1 / share:.1f}x less work"
    )
