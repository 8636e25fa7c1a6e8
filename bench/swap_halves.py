"""Which half of a trimmed/mixed-trained model loses accuracy at 30 s: encoder or decoder?

    PYTHONPATH=src python bench/swap_halves.py FULL/final MIXED/final EVAL.jsonl --out OUT

FULL: the same data trained with `--encoder_input full`; MIXED: with the default. Scores
both models' halves swapped (the encoder of one in the other), at 30 s windows, on the
held-out manifest, and prints each WER/CER; predictions are written under OUT.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def hybrid(encoder_from: str, decoder_from: str, out: Path) -> str:
    from transformers import WhisperForConditionalGeneration

    enc = WhisperForConditionalGeneration.from_pretrained(encoder_from)
    model = WhisperForConditionalGeneration.from_pretrained(decoder_from)
    model.model.encoder.load_state_dict(enc.model.encoder.state_dict())
    model.save_pretrained(out)
    for f in Path(decoder_from).iterdir():  # tokenizer and feature extractor files
        wanted = f.suffix in (".json", ".txt") and f.name != "config.json"
        if wanted and not (out / f.name).exists():
            shutil.copy(f, out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("full")
    ap.add_argument("mixed")
    ap.add_argument("eval_manifest")
    ap.add_argument("--out", required=True)
    ap.add_argument("--language", default=None)
    a = ap.parse_args()
    from fitwhisper.evaluate import evaluate_manifest

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {
        "full": a.full,
        "mixed": a.mixed,
        "full encoder + mixed decoder": hybrid(a.full, a.mixed, out / "fe_md"),
        "mixed encoder + full decoder": hybrid(a.mixed, a.full, out / "me_fd"),
    }
    for i, (name, path) in enumerate(runs.items()):
        res = evaluate_manifest(path, a.eval_manifest, language=a.language, batch_size=8,
                                generation_max_length=96, encoder_window="full")  # fmt: skip
        res.write(out / f"eval-{i}")
        print(f"{name}: {res.score.metric} {100 * res.score.normalized:.2f}%", flush=True)


if __name__ == "__main__":
    main()
