"""`fitwhisper plan`: flags (from `PlanOptions`) and the function that runs it."""

from __future__ import annotations

import argparse
import dataclasses

from fitwhisper.cli.flags import Options, add_command, build_config
from fitwhisper.memory.options import PLAN_FIELDS, RECOMMEND_FIELDS, PlanOptions
from fitwhisper.method import method_of, method_problems

OPTIONS = (
    Options(PlanOptions, only=PLAN_FIELDS),
    Options(
        PlanOptions,
        "recommend",
        only=RECOMMEND_FIELDS,
        description="Search for the fastest settings that fit a GPU: per-device batch (powers "
        "of two), gradient checkpointing, optimizer (adamw_torch; adamw_8bit, then adafactor "
        "only when AdamW fits nowhere) and method, keeping the effective batch.",
    ),
)


def add(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    add_command(
        sub,
        common,
        "plan",
        OPTIONS,
        run,
        help="Predict the GPU memory a training configuration needs, before downloading it.",
        description="Predicts the peak device memory of one training step, broken down into "
        "weights, gradients, optimizer states, activations and fixed overheads. Weights, "
        "gradients and optimizer states are exact byte counts of the model built without "
        "weights; activations come from tracing one real training step on fake tensors at "
        "the exact batch, lengths and settings. The standard Whisper sizes and Breeze-ASR-25 "
        "need no download. With --num_gpus/--num_nodes above 1 in all, the plan is per GPU "
        "of a data-parallel run: plain DDP, or DeepSpeed ZeRO-2/ZeRO-3 (--deepspeed), which "
        "shard gradients, optimizer states and weights over the GPUs.",
    )


def run(args: argparse.Namespace) -> int:
    import json

    from fitwhisper.memory.predict import predict_memory
    from fitwhisper.memory.sharded import check_world, shard
    from fitwhisper.output_guard import Output, check_outputs

    opts = build_config(PlanOptions, args)
    check_outputs([Output("--output", opts.output, "file")], {"--model": opts.model})
    if opts.presets:
        return _presets(opts)
    check_world(opts.num_gpus, opts.num_nodes, opts.deepspeed)
    request = _request(opts)
    if not (opts.gpu_memory or opts.fit or opts.output):
        prediction = predict_memory(request)
        if opts.num_gpus * opts.num_nodes > 1:
            per_gpu = shard(prediction, opts.num_gpus, opts.num_nodes, opts.deepspeed)
            print(per_gpu.to_json() if opts.json else per_gpu.format_table())
        else:
            print(prediction.to_json() if opts.json else prediction.format_table())
        return 0

    # Recommendation mode: the budget, the methods allowed, then the search.
    from fitwhisper.memory.fit import plan_fit

    plan = plan_fit(
        request,
        _budget(opts),
        effective_batch_size=opts.effective_batch_size,
        margin=opts.margin,
        methods=_methods(opts),
        num_gpus=opts.num_gpus,
        num_nodes=opts.num_nodes,
        deepspeed=opts.deepspeed,
    )
    print(json.dumps(plan.to_dict(), indent=2) if opts.json else plan.format())
    if opts.output:
        written = plan.write(opts.output)
        if not opts.json:
            train = f"fitwhisper train --plan {written} ..."
            if plan.per_gpu:
                from fitwhisper.memory.sharded import launch_command

                launch = launch_command(plan.recommended.strategy, plan.num_gpus, plan.num_nodes)
                train = launch.replace("fitwhisper train ...", train)
            print(f"\nplan written to {written}: {train}")
    return 0


def _request(opts: PlanOptions):
    """The MemoryRequest the options describe, in the precision they choose."""
    from fitwhisper.errors import ConfigError
    from fitwhisper.memory.predict import MemoryRequest
    from fitwhisper.memory.search import gpu_precision

    if sum((opts.fp16, opts.bf16, opts.fp32)) > 1:
        raise ConfigError("--fp16, --bf16 and --fp32: more than one is set", hint="pick one")
    if problems := method_problems(opts):
        raise ConfigError(problems[0], hint="name one method, with --method")
    if opts.fp32 or opts.device == "cpu":
        precision = "fp16" if opts.fp16 else "bf16" if opts.bf16 else "fp32"
    else:
        precision = gpu_precision(opts.gpu, opts.fp16 or None, opts.bf16 or None)
    # The request's fields that are `plan`'s options too, under the same names.
    shared = {f.name for f in dataclasses.fields(PlanOptions)}
    fields = {
        f.name: getattr(opts, f.name) for f in dataclasses.fields(MemoryRequest) if f.name in shared
    }
    fields.update(_index_lengths(opts))
    fields["lora_target_modules"] = tuple(opts.lora_target_modules)
    return MemoryRequest(**fields, precision=precision, training_method=method_of(opts).name)


def _index_lengths(opts: PlanOptions) -> dict:
    """--max_audio_len and --max_label_tokens from --data's index, where it is shorter."""
    import logging

    from fitwhisper.data.sources.units import index_lengths
    from fitwhisper.errors import ConfigError

    if not opts.data:
        return {}
    lengths = index_lengths(opts.data)
    if lengths is None:
        raise ConfigError(
            f"--data {opts.data} has no index (shards.json) to read lengths from",
            hint=f"write it as shards first: fitwhisper shard {opts.data} SHARDS, then plan "
            "with --data SHARDS; or leave --data out and set --max_audio_len and "
            "--max_label_tokens",
        )
    logging.getLogger(__name__).info(lengths.describe(opts.data))
    found = {"max_audio_len": min(opts.max_audio_len, lengths.longest_s)}
    if lengths.label_tokens_at_most is not None:
        found["max_label_tokens"] = min(opts.max_label_tokens, lengths.label_tokens_at_most)
    return found


def _budget(opts: PlanOptions) -> int:
    from fitwhisper.errors import ConfigError
    from fitwhisper.memory.search import detected_gpu_memory, parse_memory

    if opts.device == "cpu":
        raise ConfigError("--gpu_memory/--fit plan for a GPU", hint="drop --device cpu")
    budget = parse_memory(opts.gpu_memory) if opts.gpu_memory else detected_gpu_memory()
    if budget is None:
        raise ConfigError(
            "no CUDA GPU is visible to plan for",
            hint="pass the GPU's memory: --gpu_memory 8GB (or 12GB, 24GB, 40GB, ...)",
        )
    return budget


def _methods(opts: PlanOptions) -> tuple:
    """--allow_methods, else the method the flags name, else the four fallbacks."""
    from fitwhisper.errors import ConfigError
    from fitwhisper.method import FALLBACKS, METHODS

    if opts.allow_methods:
        allowed = [m.strip() for m in opts.allow_methods.split(",") if m.strip()]
        unknown = [m for m in allowed if m not in METHODS]
        if unknown or not allowed:
            raise ConfigError(
                f"--allow_methods {opts.allow_methods!r}: unknown {', '.join(unknown) or 'none'}",
                hint=f"choose from {','.join(METHODS)}",
            )
        return tuple(m for m in METHODS if m in allowed)
    if (named := method_of(opts)).name != "full":
        return (named.name,)
    return FALLBACKS


def _presets(opts: PlanOptions) -> int:
    """The presets table on stdout, or rewritten between the markers of --readme."""
    import sys
    from pathlib import Path

    from fitwhisper.memory.presets import presets_markdown, replace_between_markers

    table = presets_markdown(opts.workers)
    if opts.readme:
        readme = Path(opts.readme)
        text = replace_between_markers(readme.read_text(encoding="utf-8"), table)
        readme.write_text(text, encoding="utf-8")
        print(f"presets written into {readme}")
    else:
        sys.stdout.write(table)
    return 0
