"""Generation over a dataset by this process alone: the held-out, before/after and
regression scoring of a training run, and `fitwhisper evaluate`.

A plain loop (DataLoader, the run's collator, `model.generate`), not a Trainer's `predict`.
A Trainer made here would read the launcher's process group through accelerate's shared
state: under several GPU processes it shards the clips and waits on gathers that the other
ranks never join (they are in DDP's start-up or done), a hang; with several GPUs visible
and no launcher it wraps the model in DataParallel, whose replicas run the short-window
encoder patch on the first GPU; and it rewrites the shared mixed-precision state a training
run set up. Generation needs none of it, so none of it is here: no collective is called,
whatever the process group. Evaluation during training (every rank, gathered) stays with
the training Trainer.

Outputs equal `Seq2SeqTrainer.predict`'s: the same collator, batch size and generation
settings (greedy, `max_length`); the Trainer's teacher-forced loss pass, which scoring
never read, is not run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import torch

from fitwhisper.errors import OutOfMemoryError
from fitwhisper.memory.backoff import batch_rows, is_oom, release_memory, split_rows

log = logging.getLogger(__name__)

# What a batch carries for the loss alone; generation starts from the prompt, not from them.
_TEACHER_FORCING_KEYS = ("labels", "decoder_input_ids", "decoder_attention_mask")


def generate_texts(
    model,
    dataset,
    collator,
    tokenizer,
    *,
    batch_size: int,
    max_length: int | None,
    groups: Sequence[tuple[str | None, list[int]]],
    num_beams: int = 1,
    hit_limit: dict[int, bool] | None = None,
) -> dict[int, str]:
    """Each clip's generated text, by dataset index, group by group (Whisper prompts a batch
    in one language: `groups` pairs a language, None for the generation config's, with the
    clip indices it holds). The model's language and training mode are restored after.
    `hit_limit`, when given, receives whether each clip's generation stopped at the length
    limit (no end-of-text), a sign of a runaway (hallucinated) output."""
    from torch.utils.data import Subset

    from fitwhisper.evaluate.scorer import decode

    gen = model.generation_config
    saved_language, was_training = gen.language, model.training
    device = _place(model)
    model.eval()
    texts: dict[int, str] = {}
    chunk = batch_size  # halved on out-of-memory, kept for the batches after
    try:
        for language, idx in groups:
            part = dataset
            if len(groups) > 1:
                part, gen.language = Subset(dataset, idx), language
            batches = torch.utils.data.DataLoader(
                part,
                batch_size=batch_size,
                collate_fn=collator,
                pin_memory=device.type == "cuda",
            )
            out: list[str] = []
            cut: list[bool] = []
            for batch in batches:
                inputs = {k: v for k, v in batch.items() if k not in _TEACHER_FORCING_KEYS}
                ids, chunk = _generate_batch(model, inputs, device, max_length, num_beams, chunk)
                out += decode(tokenizer, ids)
                cut += [
                    _hit_limit(row, tokenizer.eos_token_id, max_length or gen.max_length)
                    for row in ids
                ]
            texts.update(zip(idx, out, strict=True))
            if hit_limit is not None:
                hit_limit.update(zip(idx, cut, strict=True))
    finally:
        gen.language = saved_language
        model.train(was_training)
    return texts


# Whisper's generate returns each row without its decoder prompt (start, language, task,
# no-timestamps: up to 4 tokens) and without the end-of-text of the longest row; a row that
# stopped at the limit has no end-of-text and at least max_length - 4 tokens.
_PROMPT_TOKENS = 4


def _hit_limit(row: list[int], eos: int, max_length: int | None) -> bool:
    return bool(max_length) and eos not in row and len(row) >= max_length - _PROMPT_TOKENS


def _generate_batch(
    model, inputs: dict[str, Any], device, max_length: int | None, num_beams: int, chunk: int
) -> tuple[list[list[int]], int]:
    """The batch's generated ids (one list per clip), in chunks of `chunk` clips; on
    out-of-memory the failed chunk and those after it are redone at half the size
    (generation has no side effects). Returns the ids and the chunk size that fitted."""
    # Seq2SeqTrainer's: greedy unless asked, and max_length only when set (else the
    # generation config's).
    settings = {"num_beams": num_beams} | ({"max_length": max_length} if max_length else {})
    ids: list[list[int]] = []
    pending = split_rows(inputs, chunk)
    while pending:
        part = pending.pop(0)
        try:
            with torch.no_grad():
                generated = model.generate(**_moved(part, device), **settings)
        except Exception as e:
            if not is_oom(e):
                raise
            generated = None
        if generated is None:  # out of the except block, so its tensors can be freed
            release_memory()
            old = batch_rows(part)
            if old <= 1:
                raise _no_fit_error(max_length) from None
            chunk = -(-old // 2)
            log.warning(
                "out of memory in generation with a batch of %d: generating in batches of %d",
                old,
                chunk,
            )
            pending = [q for p in (part, *pending) for q in split_rows(p, chunk)]
            continue
        ids += generated.tolist()
    return ids, chunk


def _place(model) -> torch.device:
    """The device the model generates on: where its weights are; a model on the CPU moves
    to this process's GPU when one is visible (LOCAL_RANK's, as Trainer placed it).
    Quantised and multi-device models stay where their loader put them."""
    device = next(model.parameters()).device
    if device.type != "cpu" or not torch.cuda.is_available():
        return device
    if getattr(model, "hf_device_map", None) or getattr(model, "is_quantized", False):
        return device
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0") or 0))
    model.to(device)
    return device


def _moved(inputs: dict[str, Any], device) -> dict[str, Any]:
    def move(v):
        if isinstance(v, torch.Tensor):
            return v.to(device, non_blocking=True)
        if isinstance(v, tuple):
            return tuple(move(x) for x in v)
        return v

    return {k: move(v) for k, v in inputs.items()}


def _no_fit_error(max_length: int | None) -> OutOfMemoryError:
    from fitwhisper.memory.backoff import GIB

    where = ""
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        where = f" on this GPU ({total / GIB:.1f} GiB, {free / GIB:.1f} GiB free now)"
    return OutOfMemoryError(
        f"out of memory in generation with a batch of 1{where}: even one clip does not fit",
        hint=f"a lower --generation_max_length (now {max_length}) needs less; so do fp16/bf16, "
        "--use_8bit or --use_4bit, or a smaller model; `fitwhisper plan` shows where the "
        "memory goes",
    )
