"""`fitwhisper plan`: flags and the function that runs it."""

from __future__ import annotations

import argparse


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    from dataclasses import fields

    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.memory.search import DEFAULT_EFFECTIVE_BATCH, DEFAULT_MARGIN

    p = sub.add_parser(
        "plan",
        parents=[common],
        help="Predict the GPU memory a training configuration needs, before downloading it.",
        description="Predicts the peak device memory of one training step, broken down into "
        "weights, gradients, optimizer states, activations and fixed overheads. Weights, "
        "gradients and optimizer states are exact byte counts of the model built without "
        "weights; activations come from tracing one real training step on fake tensors at "
        "the exact batch, lengths and settings. The standard Whisper sizes and Breeze-ASR-25 "
        "need no download.",
    )
    f = {
        x.name: x for cls in (DataConfig, ModelConfig, TrainConfig) for x in fields(cls)
    }  # help text shared with `train`

    def helped(name: str) -> str:
        return f[name].metadata["help"].replace("%", "%%")  # argparse %-formats help

    p.add_argument("--model", default=f["model"].default, help=helped("model"))
    p.add_argument(
        "--per_device_train_batch_size",
        type=int,
        default=f["per_device_train_batch_size"].default,
        help=helped("per_device_train_batch_size"),
    )
    for name in ("gradient_checkpointing", "freeze_encoder"):
        p.add_argument(f"--{name}", action="store_true", help=helped(name))
    p.add_argument("--fp16", action="store_true", help="fp16 mixed precision.")
    p.add_argument("--bf16", action="store_true", help="bf16 mixed precision.")
    p.add_argument("--fp32", action="store_true", help="fp32, no mixed precision.")
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help="The GPU planned for, for its precision, by train's rule: without --fp16/--bf16/"
        "--fp32, bf16 mixed precision unless NAME is a pre-Ampere card (T4, V100, P100, "
        "RTX 20xx, ...) or fp16-only, which get fp16; without --gpu, this machine's GPU "
        "decides, and bf16 is assumed when there is none. --device cpu plans fp32.",
    )
    p.add_argument("--use_lora", action="store_true", help=helped("use_lora"))
    # LoRA defaults are train's (ModelConfig), so a plan describes what train would run.
    p.add_argument("--lora_r", type=int, default=f["lora_r"].default, help=helped("lora_r"))
    p.add_argument(
        "--lora_target_modules",
        default=",".join(f["lora_target_modules"].default_factory()),
        help=helped("lora_target_modules"),
    )
    p.add_argument("--lora_dropout", type=float, default=0.05, help="LoRA dropout (default: 0.05).")
    p.add_argument(
        "--use_8bit", action="store_true", help="8-bit (bitsandbytes int8) base model + LoRA."
    )
    p.add_argument(
        "--use_4bit", action="store_true", help="4-bit (bitsandbytes nf4) base model + LoRA."
    )
    p.add_argument(
        "--optim",
        choices=("adamw_torch", "adamw_torch_fused", "adamw_8bit", "adafactor"),
        default="adamw_torch",
        help="Optimizer (default: adamw_torch).",
    )
    p.add_argument(
        "--max_audio_len", type=float, default=f["max_audio_len"].default,
        help=helped("max_audio_len"),
    )  # fmt: skip
    p.add_argument(
        "--max_label_tokens",
        type=int,
        default=f["max_label_tokens"].default,
        help=helped("max_label_tokens") + " Batches are padded to their longest transcript, "
        "so this is the worst case.",
    )
    p.add_argument(
        "--attn_implementation",
        choices=("sdpa", "eager"),
        default="sdpa",
        help="Attention kernel training uses (default: sdpa, transformers' choice); eager "
        "stores every attention matrix.",
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="Device to plan for (default: cuda); cpu predicts tensor bytes on a CPU run.",
    )
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    g = p.add_argument_group(
        "recommend",
        "Search for the fastest settings that fit a GPU: per-device batch (powers of two), "
        "gradient checkpointing, optimizer (adamw_torch; adamw_8bit, then adafactor only when "
        "AdamW fits nowhere) and method, keeping the effective batch.",
    )
    g.add_argument(
        "--gpu_memory",
        "--gpu-memory",
        metavar="SIZE",
        help="Memory of the GPU to fit, e.g. 8GB, 12GiB, 40GB (GB = GiB = 2**30 bytes, as GPU "
        "makers count). Turns on the search.",
    )
    g.add_argument(
        "--fit",
        action="store_true",
        help="Search for this machine's GPU (its total memory); implied by --gpu_memory.",
    )
    g.add_argument(
        "--effective_batch_size",
        type=int,
        default=DEFAULT_EFFECTIVE_BATCH,
        help="Clips per optimizer step to keep: per-device batch x accumulation "
        f"(default: {DEFAULT_EFFECTIVE_BATCH}).",
    )
    g.add_argument(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN,
        help="Fraction of the GPU's memory kept free for what the prediction leaves out "
        f"(default: {DEFAULT_MARGIN}).",
    )
    g.add_argument(
        "--allow_methods",
        metavar="A,B",
        help="Methods the search may use, from full, lora, 8bit, 4bit; lighter ones only when "
        "the heavier cannot fit. Default: the method named by --use_lora/--use_8bit/"
        "--use_4bit alone, else all four.",
    )
    g.add_argument(
        "--output",
        metavar="FILE",
        help="Write the recommendation as JSON (plan.json) for `fitwhisper train --plan FILE`.",
    )
    g.add_argument(
        "--presets",
        action="store_true",
        help="Print the presets table (8-80 GB x model sizes x methods) and exit; "
        "`python -m fitwhisper.memory.presets --readme README.md` writes it into the README.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.errors import ConfigError
    from fitwhisper.memory.predict import MemoryRequest, predict_memory
    from fitwhisper.memory.search import (
        METHODS,
        detected_gpu_memory,
        gpu_precision,
        method_of_request,
        parse_memory,
        search,
    )

    if args.presets:
        from fitwhisper.memory.presets import presets_markdown

        print(presets_markdown(), end="")
        return 0
    if sum((args.fp16, args.bf16, args.fp32)) > 1:
        raise ConfigError("--fp16, --bf16 and --fp32: more than one is set", hint="pick one")
    if args.fp32 or args.device == "cpu":
        precision = "fp32" if not (args.fp16 or args.bf16) else "fp16" if args.fp16 else "bf16"
    else:
        precision = gpu_precision(args.gpu, args.fp16 or None, args.bf16 or None)
    request = MemoryRequest(
        model=args.model,
        per_device_train_batch_size=args.per_device_train_batch_size,
        precision=precision,
        optim=args.optim,
        gradient_checkpointing=args.gradient_checkpointing,
        freeze_encoder=args.freeze_encoder,
        use_lora=args.use_lora,
        lora_r=args.lora_r,
        lora_target_modules=tuple(m.strip() for m in args.lora_target_modules.split(",") if m),
        lora_dropout=args.lora_dropout,
        use_8bit=args.use_8bit,
        use_4bit=args.use_4bit,
        max_audio_len=args.max_audio_len,
        max_label_tokens=args.max_label_tokens,
        attn_implementation=args.attn_implementation,
        device=args.device,
    )
    if not (args.gpu_memory or args.fit or args.output):
        prediction = predict_memory(request)
        print(prediction.to_json() if args.json else prediction.format_table())
        return 0

    # Recommendation mode: the budget, the methods allowed, then the search.
    if args.device == "cpu":
        raise ConfigError("--gpu_memory/--fit plan for a GPU", hint="drop --device cpu")
    budget = parse_memory(args.gpu_memory) if args.gpu_memory else detected_gpu_memory()
    if budget is None:
        raise ConfigError(
            "no CUDA GPU is visible to plan for",
            hint="pass the GPU's memory: --gpu_memory 8GB (or 12GB, 24GB, 40GB, ...)",
        )
    if args.allow_methods:
        allowed = [m.strip() for m in args.allow_methods.split(",") if m.strip()]
        unknown = [m for m in allowed if m not in METHODS]
        if unknown or not allowed:
            raise ConfigError(
                f"--allow_methods {args.allow_methods!r}: unknown {', '.join(unknown) or 'none'}",
                hint=f"choose from {','.join(METHODS)}",
            )
        methods = tuple(m for m in METHODS if m in allowed)
    elif args.use_lora or args.use_8bit or args.use_4bit:
        methods = (method_of_request(request),)
    else:
        methods = METHODS
    plan = search(
        request,
        budget,
        effective_batch_size=args.effective_batch_size,
        margin=args.margin,
        methods=methods,
    )
    print(json.dumps(plan.to_dict(), indent=2) if args.json else plan.format())
    if args.output:
        written = plan.write(args.output)
        if not args.json:
            print(f"\nplan written to {written}: fitwhisper train --plan {written} ...")
    return 0
