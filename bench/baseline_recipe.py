"""The standard Whisper fine-tuning recipe, as most users copy it: the baseline of
bench/train_speed.py.

Follows the Hugging Face blog "Fine-Tune Whisper For Multilingual ASR"
(https://huggingface.co/blog/fine-tune-whisper) and the transformers example
`run_speech_recognition_seq2seq.py`:

- a `datasets.Dataset` whose features are precomputed once with `.map(prepare_dataset)`:
  every clip's log-mel padded to 30 s (3000 frames), labels from a tokenizer set to the
  language and task (`<|startoftranscript|><|lang|><|transcribe|><|notimestamps|>` text
  `<|endoftext|>`);
- the blog's `DataCollatorSpeechSeq2SeqWithPadding`, verbatim;
- `Seq2SeqTrainer` with `Seq2SeqTrainingArguments`.

Deviations, all to match fitwhisper's run so the comparison is one of method only: batch
size, learning rate, warm-up, epochs and seed are the benchmark's; fp32 and no gradient
checkpointing (the blog's fp16=True needs CUDA; its gradient_checkpointing=True would make
the baseline about a third slower still); audio decoded with soundfile (datasets 5 decodes
through torchcodec, which needs a CUDA torch); no evaluation during training.

    PYTHONPATH=src python bench/baseline_recipe.py MODEL_DIR TRAIN.jsonl OUT_DIR --language zh
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import soundfile as sf
import soxr
import torch


@dataclass
class DataCollatorSpeechSeq2SeqWithPadding:
    """The blog's collator, verbatim."""

    processor: Any
    decoder_start_token_id: int

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        # split inputs and labels since they have to be of different lengths and need
        # different padding methods
        # first treat the audio inputs by simply returning torch tensors
        input_features = [{"input_features": feature["input_features"]} for feature in features]
        batch = self.processor.feature_extractor.pad(input_features, return_tensors="pt")

        # get the tokenized label sequences
        label_features = [{"input_ids": feature["labels"]} for feature in features]
        # pad the labels to max length
        labels_batch = self.processor.tokenizer.pad(label_features, return_tensors="pt")

        # replace padding with -100 to ignore loss correctly
        labels = labels_batch["input_ids"].masked_fill(labels_batch.attention_mask.ne(1), -100)

        # if bos token is appended in previous tokenization step,
        # cut bos token here as it's append later anyways
        if (labels[:, 0] == self.decoder_start_token_id).all().cpu().item():
            labels = labels[:, 1:]

        batch["labels"] = labels

        return batch


def load_16k(path: str) -> list[float]:
    data, sr = sf.read(path, dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    if sr != 16_000:
        mono = soxr.resample(mono, sr, 16_000)
    return mono


def prepare(model_dir: str, manifest: str, language: str | None):
    """Processor and the precomputed training set (the blog's `prepare_dataset` via `.map`)."""
    from datasets import Dataset
    from transformers import WhisperProcessor

    processor = WhisperProcessor.from_pretrained(model_dir)
    if language:
        processor.tokenizer.set_prefix_tokens(language=language, task="transcribe")
    rows = [json.loads(line) for line in Path(manifest).read_text().splitlines() if line]
    base = Path(manifest).parent
    ds = Dataset.from_dict(
        {
            "audio": [{"array": load_16k(str(base / r["audio"])), "sampling_rate": 16_000}
                      for r in rows],
            "sentence": [r["text"] for r in rows],
        }
    )  # fmt: skip
    feature_extractor, tokenizer = processor.feature_extractor, processor.tokenizer

    def prepare_dataset(batch):
        # load and resample audio data from 48 to 16kHz
        audio = batch["audio"]
        # compute log-Mel input features from input audio array
        batch["input_features"] = feature_extractor(
            audio["array"], sampling_rate=audio["sampling_rate"]
        ).input_features[0]
        # encode target text to label ids
        batch["labels"] = tokenizer(batch["sentence"]).input_ids
        return batch

    # No num_proc: even num_proc=1 forks a worker pool in datasets 5.2, which deadlocked here
    # once (a fork of a process with torch threads running).
    ds = ds.map(prepare_dataset, remove_columns=ds.column_names)
    return processor, ds


def make_trainer(model_dir, processor, train_ds, out_dir, *, language, batch_size, lr,
                 epochs, seed, max_steps=-1, callbacks=()):  # fmt: skip
    from transformers import (
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
        WhisperForConditionalGeneration,
    )

    model = WhisperForConditionalGeneration.from_pretrained(model_dir)
    if language:
        model.generation_config.language = language
        model.generation_config.task = "transcribe"
    model.generation_config.forced_decoder_ids = None
    args = Seq2SeqTrainingArguments(
        output_dir=str(out_dir),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=1,
        learning_rate=lr,
        warmup_steps=0,
        num_train_epochs=epochs,
        max_steps=max_steps,
        activation_checkpointing=False,  # gradient_checkpointing, deprecated in transformers 5
        fp16=False,
        save_strategy="no",
        eval_strategy="no",
        predict_with_generate=True,
        generation_max_length=225,
        logging_steps=25,
        report_to="none",
        seed=seed,
        disable_tqdm=True,
    )
    collator = DataCollatorSpeechSeq2SeqWithPadding(
        processor=processor, decoder_start_token_id=model.config.decoder_start_token_id
    )
    return Seq2SeqTrainer(
        args=args,
        model=model,
        train_dataset=train_ds,
        data_collator=collator,
        processing_class=processor,
        callbacks=list(callbacks),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("train_manifest")
    ap.add_argument("output_dir")
    ap.add_argument("--language", default=None)
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--learning_rate", type=float, default=1e-5)
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args(argv)
    processor, ds = prepare(a.model_dir, a.train_manifest, a.language)
    trainer = make_trainer(a.model_dir, processor, ds, a.output_dir, language=a.language,
                           batch_size=a.batch_size, lr=a.learning_rate, epochs=a.epochs,
                           seed=a.seed)  # fmt: skip
    out = trainer.train()
    print(out.metrics)
    trainer.save_model(a.output_dir)
    processor.save_pretrained(a.output_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
