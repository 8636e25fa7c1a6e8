"""`fitwhisper demo`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="Fine-tune a real Whisper model on generated speech, on this CPU, in minutes.",
        description="Makes a small speech dataset offline (invented words spoken by an offline "
        "voice), scores the real offline/tiny.en model on held-out sentences, fine-tunes it, "
        "scores it again on the same clips, and transcribes one of them. Needs no data or "
        "model of yours and no network.",
    )
    p.add_argument(
        "--output_dir", default="demo-run", help="Where everything goes (default: demo-run)."
    )
    p.add_argument(
        "--num_train_epochs",
        type=float,
        default=2.0,
        help="Passes over the training clips (default: 2).",
    )
    p.add_argument(
        "--freeze_encoder",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Train the decoder only (default). --no-freeze_encoder trains the whole model: "
        "about 2.5x slower per step on a CPU.",
    )
    p.add_argument("--learning_rate", type=float, default=1e-4, help="Peak learning rate.")
    p.add_argument("--seed", type=int, default=0, help="Seed for the data and the training.")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fitwhisper.demo.run import run_demo

    r = run_demo(
        args.output_dir,
        num_train_epochs=args.num_train_epochs,
        learning_rate=args.learning_rate,
        freeze_encoder=args.freeze_encoder,
        seed=args.seed,
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
  fine-tuned model    {r.final_dir}  (loads with from_pretrained)
  predictions         {r.out_dir / "eval-zero-shot"}, {r.out_dir / "run" / "eval"}
  TensorBoard logs    {r.out_dir / "run" / "logs"}
  took {r.seconds / 60:.1f} min"""
    )
    return 0
