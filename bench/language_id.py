"""Language identification kept: how often each model detects the language spoken, before
and after a fine-tune, on speakers the fine-tune never heard.

    PYTHONPATH=src python bench/language_id.py offline/base W/zh/defaults/final --out t.md

W is a `bench/quality.py --set zh --work W` folder. Clips: the held-out speakers of
bench/quality.py's splits (seed 42, 20 held-out speakers each; --train_speakers 40 as the
quality tables): English from speechocean-train (Mandarin-accented read English, the hard
case for a Mandarin fine-tune), Mandarin from cv-zh-train, so a model fine-tuned on the zh
set's training speakers heard none of them. Detection is transformers' `detect_language`
(Whisper's rule: the most likely language token after <|startoftranscript|>, on the first
30 s), what `fitwhisper transcribe` does without --language. Per model: the share of
English clips detected as en and of Mandarin clips detected as zh, and each share's
difference from the first model's, paired by clip (95% bootstrap interval).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import quality  # noqa: E402  (bench/ is not a package)

BATCH = 16


def held_out_clips(key: str, a: argparse.Namespace) -> list[dict]:
    ds = quality.SETS[key]
    rows = quality.load_rows(ds)
    split = quality.speaker_split(rows, a.train_speakers, a.eval_speakers, a.seed, ds.stratum)
    return split.eval


def detected(model_spec: str, clips: list[dict]) -> list[str]:
    """The language code `model_spec` detects for each clip."""
    import torch
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from fitwhisper.data.audio import load_audio
    from fitwhisper.models.resolve import resolve_model

    path = str(resolve_model(model_spec).path_or_id)
    processor = WhisperProcessor.from_pretrained(path)
    model = WhisperForConditionalGeneration.from_pretrained(path).eval()
    tok = processor.tokenizer
    out = []
    for i in range(0, len(clips), BATCH):
        audio = [load_audio(c["audio"]) for c in clips[i : i + BATCH]]
        feats = processor.feature_extractor(audio, sampling_rate=16000, return_tensors="pt")
        with torch.inference_mode():
            ids = model.detect_language(input_features=feats.input_features)
        out += [t.strip("<|>") for t in tok.convert_ids_to_tokens([int(x) for x in ids])]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="Models to compare; the first is the reference.")
    ap.add_argument("--train_speakers", type=int, default=40)
    ap.add_argument("--eval_speakers", type=int, default=20)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default=None, help="Also write the markdown here.")
    a = ap.parse_args(argv)
    import torch

    from fitwhisper.report.stats import paired_bootstrap

    torch.set_num_threads(quality.train_speed.THREADS)
    sets = {"en": held_out_clips("en", a), "zh": held_out_clips("zh", a)}
    wrong: dict[str, dict[str, list[int]]] = {}
    for model in a.models:
        wrong[model] = {}
        for lang, clips in sets.items():
            found = detected(model, clips)
            wrong[model][lang] = [int(f != lang) for f in found]
            print(f"{model} {lang}: {100 * (1 - sum(wrong[model][lang]) / len(clips)):.1f}%")
    first = a.models[0]
    head = ["model"]
    for lang, clips in sets.items():
        head += [
            f"{lang} clips detected {lang} % (of {len(clips)})",
            f"vs {first}, points (95% CI)",
        ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in a.models:
        cells = [f"`{model}`"]
        for lang, clips in sets.items():
            errors = wrong[model][lang]
            cells.append(f"{100 * (1 - sum(errors) / len(clips)):.1f}")
            if model == first:
                cells.append("")
                continue
            # Detected share minus the first model's: the first's errors minus this one's.
            b = paired_bootstrap(errors, wrong[first][lang], [1] * len(clips), seed=a.seed)
            cells.append(
                f"{100 * b['difference']:+.1f} ({100 * b['low']:+.1f} to {100 * b['high']:+.1f})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
