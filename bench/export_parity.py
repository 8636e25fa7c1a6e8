"""Export parity and speed: a model exported to every format and re-scored in each format's
own engine against its source, in one run of `fitwhisper export --manifest`.

    PYTHONPATH=src python bench/export_parity.py --out table.md

Mandarin: `offline/base` (the multilingual base; pass --model for another, e.g. a run's
final/) on 24 AISHELL-1 sentences of ../shared/data/aishell-s0150 (none with spelled-out
Latin letters), language zh, OpenCC t2s on both sides (base writes either script).
English: `offline/tiny.en` on 16 held-out digit strings built from ../shared/data/fsdd-train,
as the fine-tuning tests build them.

Each format at its shipping weight type (ct2 int8, ggml f16), then ct2 at float32 and ggml
at whisper.cpp's q8_0 (ggml f32 is not offered: whisper.cpp's CPU convolution aborts on it);
onnx and openai are fp32 and run once. "seconds" is each engine's wall time over the
rows on this machine's CPU threads (the source: transformers' batched generate, 8 clips a
batch; the engines: one clip at a time, faster-whisper and openai-whisper given it padded
with silence to 30 s as transformers pads it); "x source" is the source's seconds over the
row's. The long file joins the first clips with a second of
silence (about a minute) and is transcribed with timestamps.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))  # tests.digit_strings builds the digit strings


def aishell_manifest(folder: Path, n: int = 24) -> Path:
    src = SHARED / "aishell-s0150"
    rows = [json.loads(line) for line in (src / "manifest.jsonl").read_text().splitlines()]
    # Without spelled-out Latin letters ("H A N N A H"), which send base into a repetition
    # loop of chance length: that scores the loop, not the export.
    sentences = [r for r in rows if r["kind"] == "sentence"]
    picked = [r for r in sentences if not re.search("[A-Za-z]", r["text"])][:n]
    path = folder / "zh.jsonl"
    path.write_text("".join(
        json.dumps({"audio": str(src / r["audio"]), "text": r["text"]}, ensure_ascii=False)
        + "\n" for r in picked
    ))  # fmt: skip
    return path


def digits_manifest(folder: Path) -> Path:
    from tests.digit_strings import make_digit_strings

    return make_digit_strings(SHARED / "fsdd-train", folder / "digits", n_train=1,
                              n_eval=16).eval_manifest  # fmt: skip


def run(model: str, manifest: Path, out: Path, formats: str, extra: list[str]) -> dict:
    from fitwhisper.cli import main as cli

    code = cli(["export", model, str(out), "--format", formats,
                "--manifest", str(manifest), *extra])  # fmt: skip
    if code != 0:
        raise SystemExit(f"export failed ({code}) for {model}")
    return json.loads((out / "export_report.json").read_text())


def table(title: str, reports: dict[str, dict]) -> str:
    first = next(iter(reports.values()))
    m = first["metric"]
    src = first["source"]
    lines = [
        f"### {title}",
        "",
        f"{first['rows']} clips, {m.upper()} ({first['normalizer']}); long file "
        f"{first['long_file']['seconds']:.0f} s ({first['long_file']['clips']} clips).",
        "",
        f"| format | weights | engine | {m.upper()} | change (points) | seconds | x source "
        f"| long-file {m.upper()} | segments, times |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| source | fp32 | transformers | {100 * src[m]:.2f}% | | {src['seconds']:.1f} | 1.00 "
        f"| {100 * src['long_file'][m]:.2f}% | {src['long_file']['segments']}, "
        f"{'in order' if src['long_file']['times_ok'] else 'OUT OF ORDER'} |",
    ]
    for weights, report in reports.items():
        for fmt, r in report["formats"].items():
            w = {"ct2": weights.split("/")[0], "ggml": weights.split("/")[1]}.get(fmt, "fp32")
            if fmt in ("onnx", "openai") and weights != next(iter(reports)):
                continue  # one weight type: the first run's row is the row
            lf = r["long_file"]
            lines.append(
                f"| {fmt} | {w} | {r['engine']} | {100 * r[m]:.2f}% | "
                f"{100 * r['difference'][m]:+.2f} | {r['seconds']:.1f} | "
                f"{r['speed_vs_source']:.2f} | {100 * lf[m]:.2f}% | {lf['segments']}, "
                f"{'in order' if lf['times_ok'] else 'OUT OF ORDER'} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="offline/base", help="Mandarin model (default base).")
    ap.add_argument("--only", choices=["zh", "en"], default=None)
    ap.add_argument("--out", default=None, help="Also write the markdown here.")
    a = ap.parse_args(argv)
    import torch

    work = Path(tempfile.mkdtemp(prefix="fw-export-parity-"))
    sections = [
        f"Machine: {platform.machine()}, torch {torch.__version__} ({torch.get_num_threads()} "
        f"threads), Python {platform.python_version()}."
    ]
    sets = []
    if a.only in (None, "zh"):
        sets.append((f"{a.model}, Mandarin (AISHELL-1)", a.model, aishell_manifest(work),
                     ["--language", "zh", "--opencc", "t2s"]))  # fmt: skip
    if a.only in (None, "en"):
        sets.append(("offline/tiny.en, English digit strings", "offline/tiny.en",
                     digits_manifest(work), []))  # fmt: skip
    for title, model, manifest, extra in sets:
        reports = {}
        for weights, formats, flags in (
            ("int8/f16", "ct2,ggml,onnx,openai", []),
            ("float32/q8_0", "ct2,ggml", ["--quantization", "float32", "--ggml_dtype", "q8_0"]),
        ):
            out = work / f"{model.replace('/', '_')}-{weights.replace('/', '-')}"
            reports[weights] = run(model, manifest, out, formats, [*extra, *flags])
        text = table(title, reports)
        print(text, flush=True)
        sections.append(text)
    if a.out:
        Path(a.out).write_text("\n\n".join(sections) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
