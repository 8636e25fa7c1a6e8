"""Transcription speed and accuracy on CPU: fitwhisper's engines against faster-whisper
called directly and the transformers ASR pipeline.

    PYTHONPATH=src python bench/transcribe_speed.py --threads 2 --out table.md

Same model for every row (offline/base, the multilingual base; CTranslate2 rows use its
int8 export), greedy decoding (beam 1), language zh, on
- short: 40 AISHELL-1 sentences of ../shared/data/aishell-s0150 (one file each), and
- long: 60 other sentences laid end to end with 0.5 s of silence between them (~5 min), one
  file; its reference is the sentences' texts joined.
Each row loads its model first (not timed), transcribes one clip to warm up, then is timed
over all clips: audio seconds per wall second. CER uses fitwhisper's scorer (chinese
normaliser) with OpenCC t2s on both sides, since base writes either script.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fitwhisper.data.audio import load_audio
from fitwhisper.evaluate import make_scorer
from fitwhisper.scoring import score
from fitwhisper.whisper_facts import SAMPLE_RATE, WINDOW_SAMPLES

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "aishell-s0150"
MODEL = "offline/base"
GAP_S = 0.5


def main(argv: list[str] | None = None) -> int:
    global MODEL
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--short", type=int, default=40)
    ap.add_argument("--long", type=int, default=60, help="Sentences in the long file.")
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", nargs="*", help="Run only rows whose name contains these.")
    ap.add_argument("--sets", nargs="*", choices=("short", "long"), default=["short", "long"],
                    help="Which sets to run (short: the issue's short-clip target).")  # fmt: skip
    ap.add_argument("--model", default=MODEL,
                    help="Model for every row (e.g. a run's final/ trained with "
                    "--encoder_input mixed, for the short-window rows).")  # fmt: skip
    args = ap.parse_args(argv)
    MODEL = args.model

    import torch

    torch.set_num_threads(args.threads)
    rows = [json.loads(line) for line in (DATA / "manifest.jsonl").read_text().splitlines()]
    sentences = [r for r in rows if r["kind"] == "sentence"]
    short = sentences[: args.short]
    long_rows = sentences[args.short : args.short + args.long]
    short_audio = [load_audio(DATA / r["audio"]) for r in short]
    gap = np.zeros(int(GAP_S * SAMPLE_RATE), np.float32)
    long_audio = np.concatenate(
        [x for r in long_rows for x in (load_audio(DATA / r["audio"]), gap)]
    )
    sets = {
        "short": (short_audio, [r["text"] for r in short]),
        "long": ([long_audio], ["".join(r["text"] for r in long_rows)]),
    }
    metric, norm = make_scorer("zh", opencc="t2s")

    from fitwhisper.models.ct2_export import cached_ct2
    from fitwhisper.models.resolve import resolve_model

    t0 = time.perf_counter()
    ct2_dir = cached_ct2(resolve_model(MODEL), "int8")
    export_s = time.perf_counter() - t0

    results = []
    for name, make in _rows(args, ct2_dir).items():
        if args.only and not any(o in name for o in args.only):
            continue
        transcribe = make()
        transcribe([short_audio[0]])  # warm-up
        for set_name, (audios, refs) in sets.items():
            if set_name not in args.sets or (name.startswith("experiment") and set_name == "long"):
                continue  # the window experiment is about clips of up to 30 s
            t = time.perf_counter()
            hyps = transcribe(audios)
            wall = time.perf_counter() - t
            audio_s = sum(len(a) for a in audios) / SAMPLE_RATE
            s = score(refs, hyps, metric, norm)
            results.append((name, set_name, len(audios), audio_s, wall, s.normalized))
            print(f"{name:55s} {set_name:5s} {audio_s / wall:6.2f} audio s/s  "
                  f"CER {100 * s.normalized:5.2f}%", file=sys.stderr, flush=True)  # fmt: skip
            if args.out:  # after every row, so a cut-short run keeps what it measured
                Path(args.out).write_text(_table(results, args, export_s))
    table = _table(results, args, export_s)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    return 0


def _rows(args, ct2_dir: Path) -> dict:
    bs, threads = args.batch_size, args.threads

    def fw_sequential():
        from faster_whisper import WhisperModel

        m = WhisperModel(str(ct2_dir), compute_type="int8", cpu_threads=threads)

        def run(audios):
            return ["".join(s.text for s in m.transcribe(a, language="zh", beam_size=1)[0])
                    for a in audios]  # fmt: skip

        return run

    def fw_batched():
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        p = BatchedInferencePipeline(
            WhisperModel(str(ct2_dir), compute_type="int8", cpu_threads=threads)
        )

        def run(audios):
            return [
                "".join(s.text for s in p.transcribe(a, language="zh", beam_size=1,
                                                     batch_size=bs)[0])
                for a in audios
            ]  # fmt: skip

        return run

    def hf_pipeline():
        import torch
        from transformers import pipeline

        from fitwhisper.models.resolve import resolve_model

        asr = pipeline(
            "automatic-speech-recognition",
            model=str(resolve_model(MODEL).path_or_id),
            device="cpu",
            dtype=torch.float32,
        )
        kw = dict(language="zh", task="transcribe", num_beams=1)

        def run(audios):
            inputs = [{"raw": a, "sampling_rate": SAMPLE_RATE} for a in audios]
            if max(len(a) for a in audios) > WINDOW_SAMPLES:
                outs = asr(inputs, batch_size=bs, chunk_length_s=30, generate_kwargs=kw)
            else:
                outs = asr(inputs, batch_size=bs, generate_kwargs=kw)
            return [o["text"] for o in outs]

        return run

    def fitwhisper(engine: str, mode: str = "auto", timestamps: str = "segment",
                   window: str = "auto"):  # fmt: skip
        def make():
            from fitwhisper.models.resolve import resolve_model
            from fitwhisper.transcribe.options import TranscribeOptions
            from fitwhisper.transcribe.run import EngineChoice, make_engine

            opts = TranscribeOptions(
                language="zh", beam_size=1, batch_size=bs, threads=threads, mode=mode,
                timestamps=timestamps, encoder_window=window,
            )  # fmt: skip
            eng = make_engine(resolve_model(MODEL), opts, EngineChoice(engine, "cpu", "bench"))
            group = bs * (16 if engine == "ct2" else 1)

            def run(audios):
                # In-process equivalent of `fitwhisper transcribe` on files already decoded:
                # the same batching by length that transcribe_files does.
                order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
                texts = [""] * len(audios)
                for k in range(0, len(order), group):
                    idx = order[k : k + group]
                    ts = eng.transcribe([str(i) for i in idx], [audios[i] for i in idx])
                    for i, t in zip(idx, ts, strict=True):
                        texts[i] = t.text
                return texts

            return run

        return make

    def short_window(pad_to_30s: bool):
        """Experiment (not in fitwhisper): clips of up to 30 s encoded over their own length
        (+1 s) instead of a 30 s padded window, like whisper.cpp's audio_ctx; CTranslate2's
        encoder accepts any even frame count. Same code with 30 s padding as the accuracy
        reference. Greedy, no timestamps, batches of similar length. The log-mel past each
        clip is zeros, as faster-whisper pads it (fitwhisper pads with silence:
        `transcribe/ct2_padding.py`)."""

        def make():
            import ctranslate2
            from faster_whisper import WhisperModel
            from faster_whisper.tokenizer import Tokenizer
            from faster_whisper.transcribe import get_suppressed_tokens

            m = WhisperModel(str(ct2_dir), compute_type="int8", cpu_threads=threads)
            tok = Tokenizer(m.hf_tokenizer, True, task="transcribe", language="zh")
            prompt = m.get_prompt(tok, [], without_timestamps=True)
            suppress = get_suppressed_tokens(tok, [-1])

            def run(audios):
                order = sorted(range(len(audios)), key=lambda i: len(audios[i]))
                texts = [""] * len(audios)
                for k in range(0, len(order), bs):
                    idx = order[k : k + bs]
                    feats = [m.feature_extractor(audios[i])[:, :-1] for i in idx]
                    longest = max(f.shape[1] for f in feats)
                    # Even frame count (two stride-2 convolutions); faster-whisper pads with 0.
                    n = 3000 if pad_to_30s else min(3000, 2 * ((longest + 101) // 2))
                    batch = np.stack(
                        [np.pad(f[:, :n], ((0, 0), (0, n - min(n, f.shape[1])))) for f in feats]
                    )
                    enc = m.model.encode(ctranslate2.StorageView.from_array(batch))
                    res = m.model.generate(
                        enc,
                        [prompt] * len(idx),
                        beam_size=1,
                        max_length=448,
                        suppress_blank=True,
                        suppress_tokens=suppress,
                    )
                    for i, r in zip(idx, res, strict=True):
                        texts[i] = tok.decode(r.sequences_ids[0])
                return texts

            return run

        return make

    return {
        "faster-whisper WhisperModel.transcribe (sequential), int8": fw_sequential,
        f"faster-whisper BatchedInferencePipeline (batch {bs}), int8": fw_batched,
        f"transformers ASR pipeline (batch {bs}, fp32; long: chunk 30 s)": hf_pipeline,
        "fitwhisper transcribe (default: engine ct2, mode auto), int8": fitwhisper("ct2"),
        "fitwhisper transcribe --mode batched (ct2), int8": fitwhisper("ct2", "batched"),
        "fitwhisper transcribe --timestamps none (ct2), int8": fitwhisper("ct2", "auto", "none"),
        "fitwhisper transcribe --encoder_window full (ct2), int8":
            fitwhisper("ct2", window="full"),
        "fitwhisper transcribe --encoder_window short (ct2), int8":
            fitwhisper("ct2", window="short"),
        "experiment: CT2 greedy, 30 s padded window (reference)": short_window(True),
        "experiment: CT2 greedy, window = clip + 1 s": short_window(False),
        "fitwhisper transcribe --engine transformers, fp32": fitwhisper("transformers"),
        "fitwhisper transcribe --engine transformers --encoder_window full, fp32":
            fitwhisper("transformers", window="full"),
        "fitwhisper transcribe --engine transformers --encoder_window short, fp32":
            fitwhisper("transformers", window="short"),
        "fitwhisper transcribe --engine transformers --encoder_window short "
        "--timestamps none, fp32": fitwhisper("transformers", timestamps="none",
                                              window="short"),
    }  # fmt: skip


def _table(results, args, export_s: float) -> str:
    import ctranslate2
    import faster_whisper
    import torch
    import transformers

    env = (
        f"CPU, {args.threads} threads ({os.cpu_count()} cores visible), {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, ctranslate2 {ctranslate2.__version__}, faster-whisper "
        f"{faster_whisper.__version__}; model {MODEL}; greedy; language zh"
    )
    lines = [
        env,
        "",
        f"One-time export of {MODEL} to CTranslate2 int8 (cached; 0 s if already cached): "
        f"{export_s:.1f} s",
        "",
        "| engine | set | files | audio s | wall s | audio s / wall s | CER (t2s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, set_name, n, audio_s, wall, cer in results:
        lines.append(
            f"| {name} | {set_name} | {n} | {audio_s:.0f} | {wall:.1f} | {audio_s / wall:.2f} "
            f"| {100 * cer:.2f}% |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
