"""The GPU check's speed step: training clips per second of fitwhisper's defaults against
the standard recipe, at the same batch, on real speech, random-initialised models of the
real shapes (bench/gpu_check.py runs it on CUDA only).

    PYTHONPATH=src python bench/gpu_speed.py --out speed.json [--shapes small large-v3-turbo]
        [--batch 16] [--warmup 3] [--steps 12] [--cpu]   # --cpu: the code path, tiny, slow

Both configurations draw the same real clips (../shared/data/aishell-s0150 sentences, mean
5.2 s) through a torch DataLoader into an AdamW step under bf16 autocast (fp16 where the GPU
has no bf16):

- defaults: fitwhisper's dataset and collator, each batch cut to its longest clip
  (`--encoder_input trimmed`; the default `mixed` keeps a quarter of the batches at 30 s,
  reported as the blend), the data-loader settings the run plan chooses on this machine
  (train/input_plan.py), and the log-mel made on the CPU (`cpu`) or on the GPU (`device`);
- recipe: the Hugging Face blog's (https://huggingface.co/blog/fine-tune-whisper): every
  clip padded to 30 s by the feature extractor, its collator (pad features, labels -100),
  4 loader workers (the blog's `num_proc=4` map).

Per row: clips/s over `--steps` steps after `--warmup`, the share of wall time spent waiting
for the loader, the GPU's mean utilisation (`torch.cuda.utilization`, where pynvml is
installed), and `max_memory_allocated`. Writes the rows as JSON and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
LABEL_TOKENS_MAX = 128
RECIPE_WORKERS = 4  # the blog's dataset.map(num_proc=4)
FULL_SHARE = 0.25  # --full_window_share's default: the mixed blend's share of 30 s batches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", nargs="+", default=["small", "large-v3-turbo"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--clips", type=int, default=256)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (a tiny shape)")
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available() and not args.cpu
    if not cuda and not args.cpu:
        print("no CUDA: nothing to time (give --cpu to run the code path on the CPU)")
        return 0
    rows = _rows(args.clips)
    processor = _processor()
    table = []
    for shape in args.shapes:
        for config in ("recipe", "defaults cpu log-mel", "defaults device log-mel"):
            row = {"shape": shape, "config": config, "batch": args.batch}
            try:
                row |= _time(shape, config, rows, processor, args, cuda)
            except torch.OutOfMemoryError:
                row["note"] = "CUDA out of memory"
            except Exception as e:  # one failed row must not end the table
                row["note"] = f"{type(e).__name__}: {str(e)[:120]}"
            print(json.dumps(row), flush=True)
            table.append(row)
            _free(cuda)
    args.out.write_text(json.dumps(table, indent=1))
    print(table_markdown(table))
    return 0


def table_markdown(table: list[dict]) -> str:
    """The speed rows as Markdown, each shape's defaults against its recipe row."""
    out = [
        "| model | configuration | batch | clips/s | x recipe | data wait | GPU util | peak GiB "
        "| note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    recipe = {r["shape"]: r.get("clips_per_s") for r in table if r["config"] == "recipe"}
    blends = []
    for shape, base in recipe.items():
        rates = [
            r.get("clips_per_s")
            for r in table
            if r["shape"] == shape and r["config"].startswith("defaults")
        ]
        best = max((x for x in rates if x), default=None)
        if best and base:  # the default mixed input: a quarter of the batches at 30 s
            note = f"derived: {FULL_SHARE:.0%} of batches at the recipe's 30 s rate"
            blends.append({"shape": shape, "config": "defaults mixed", "note": note,
                           "batch": table[0]["batch"],
                           "clips_per_s": round(mixed_rate(best, base), 2)})  # fmt: skip
    for r in table + blends:
        rate, base = r.get("clips_per_s"), recipe.get(r["shape"])
        ratio = f"{rate / base:.2f}" if rate and base else "-"
        out.append(
            f"| {r['shape']} | {r['config']} | {r['batch']} | {_f(rate, '.1f')} | {ratio} | "
            f"{_f(r.get('data_wait_share'), '.0%')} | {_f(r.get('gpu_util'), '.0f', '%')} | "
            f"{_f(r.get('peak_gib'), '.2f')} | {r.get('note', '')} |"
        )
    return "\n".join(out)


def _f(x, spec: str, suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def _rows(n: int):
    from fitwhisper.data.manifest import load_manifest

    manifest = SHARED / "aishell-s0150" / "manifest.jsonl"
    if not manifest.is_file():
        raise SystemExit(f"no real clips at {manifest}")
    kinds = [json.loads(line)["kind"] for line in manifest.read_text().splitlines()]
    rows = load_manifest(manifest).rows
    return [r for r, kind in zip(rows, kinds, strict=True) if kind == "sentence"][:n]


def _processor():
    from fitwhisper.models.resolve import load_processor

    return load_processor("offline/base")  # multilingual: the Mandarin labels


def _loader(config: str, rows, processor, batch: int, cuda: bool):
    """The configuration's DataLoader, and where its log-mel is made."""
    from torch.utils.data import DataLoader

    from fitwhisper.data.batching import TrimmedCollator, WithDurations
    from fitwhisper.data.features import SpeechDataset, WhisperCollator
    from fitwhisper.train.input_plan import (
        clip_cost,
        decide_input,
        machine_cores,
    )

    start = processor.tokenizer.convert_tokens_to_ids("<|startoftranscript|>")
    collator = WhisperCollator(processor, start)
    if config == "recipe":
        ds = SpeechDataset(rows, processor, language="zh")
        return DataLoader(
            ds,
            batch_size=batch,
            shuffle=True,
            num_workers=RECIPE_WORKERS,
            collate_fn=_RecipeCollator(collator),
            pin_memory=cuda,
            persistent_workers=True,
        )
    log_mel = "device" if "device" in config else "cpu"
    ds = SpeechDataset(rows, processor, language="zh", log_mel=log_mel)
    from fitwhisper.config import TrainConfig

    plan = decide_input(
        TrainConfig(log_mel=log_mel),
        set(),
        {},
        cuda=True,  # as on the GPU, also for --cpu: the code path the GPU takes
        cores=machine_cores(),
        processes_here=1,
        augmenting=False,
        clip_cost_s=lambda _: clip_cost(ds),
    )
    durations = [_duration(r) for r in rows]
    return DataLoader(
        WithDurations(ds, durations),
        batch_size=batch,
        shuffle=True,
        num_workers=plan.dataloader_num_workers,
        collate_fn=TrimmedCollator(collator),
        pin_memory=cuda,
        persistent_workers=plan.dataloader_persistent_workers,
        prefetch_factor=plan.dataloader_prefetch_factor,
    )


class _RecipeCollator:
    """The blog's collator: features padded (already 30 s), labels padded with -100."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, items):
        for item in items:
            item.pop("clip_frames", None)
        return self.collator(items)


def _duration(row) -> float:
    import soundfile

    return soundfile.info(str(row.audio)).duration


def _model(shape: str, cuda: bool):
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    from fitwhisper.memory.architectures import whisper_config
    from fitwhisper.models.short_window import allow_short_input

    if shape == "tiny":  # --cpu: the code path at a size a CPU trains in seconds
        config = WhisperConfig(
            vocab_size=51865, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
            decoder_ffn_dim=128, num_mel_bins=80,
        )  # fmt: skip
    else:
        config = whisper_config(f"openai/whisper-{shape}")
    config._attn_implementation = "sdpa"
    config.use_cache = False
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = WhisperForConditionalGeneration(config)
    allow_short_input(model)  # as train does for trimmed input
    return model


def _time(shape: str, config: str, rows, processor, args, cuda: bool) -> dict:
    import torch

    from fitwhisper.data.log_mel import log_mel

    device = torch.device("cuda" if cuda else "cpu")
    if cuda and torch.cuda.is_bf16_supported():
        dtype = torch.bfloat16
    else:
        dtype = torch.float16 if cuda else torch.bfloat16
    model = _model("tiny" if args.cpu else shape, cuda)
    from transformers import WhisperFeatureExtractor

    # Whisper's extractor with the model's mel bins (large-v3 and turbo: 128).
    processor.feature_extractor = WhisperFeatureExtractor(feature_size=model.config.num_mel_bins)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=cuda)
    loader = _loader(config, rows, processor, args.batch, cuda)
    fe = processor.feature_extractor
    batches = iter(_forever(loader))
    waited = 0.0
    util: list[float] = []
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            waited, start = 0.0, time.perf_counter()
        t0 = time.perf_counter()
        batch = next(batches)
        waited += time.perf_counter() - t0
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        if "input_audio" in batch:
            audio, masks = batch.pop("input_audio"), batch.pop("mel_masks")
            batch["input_features"] = log_mel(audio, fe, masks)
        labels = batch["labels"][:, :LABEL_TOKENS_MAX]
        with torch.autocast(device.type, dtype=dtype):
            loss = model(input_features=batch["input_features"], labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda and i >= args.warmup:
            util += _utilisation()
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    out = {
        "clips_per_s": round(args.batch * args.steps / wall, 2),
        "data_wait_share": round(waited / wall, 4),
        "frames": int(batch["input_features"].shape[-1]),
        "workers": loader.num_workers,
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "gpu_util": round(sum(util) / len(util), 1) if util else None,
    }
    del model, opt
    return out


def _forever(loader):
    while True:
        yield from loader


def _utilisation() -> list[float]:
    import torch

    try:
        return [float(torch.cuda.utilization())]
    except Exception:  # no pynvml: not reported
        return []


def _free(cuda: bool) -> None:
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def mixed_rate(trimmed: float, full: float, share: float = FULL_SHARE) -> float:
    """Clips/s of `--encoder_input mixed`: `share` of the batches at the 30 s rate."""
    return 1.0 / ((1 - share) / trimmed + share / full)


if __name__ == "__main__":
    raise SystemExit(main())
