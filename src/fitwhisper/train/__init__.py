"""Fine-tuning: config in, run folder out. `Seq2SeqTrainer` owns the loop.

Run with `fitwhisper train` (or `fitwhisper demo` for a ready-made example).

- `run`: `train()`, the run as numbered steps, and `TrainResult`
- `run_plan`: every "auto" of a run answered once, with its reason (RUN/run_plan.json)
- `validation`: every option problem, raised at once before anything loads
- `setup`: processor, model, datasets and Trainer for a run
- `streamed`: training on streamed data: steps, dataset, data loader, position in checkpoints
- `trainer`: Seq2SeqTrainingArguments, the Trainer class, callbacks, the logged plan
- `console`: the console line per log (step, loss, clips/s, time left, memory against the
  plan), a progress bar on a terminal, in place of Trainer's printed dictionaries
- `guard`: a NaN or Inf loss or gradient stops (or skips) the step, naming its clips;
  non-finite weights are never saved
- `method_loading`: how full fine-tuning, LoRA and LoRA on an 8-bit or 4-bit base load and
  are made ready to train (what each method is: `fitwhisper.method`)
- `rows`: checked rows, output script, language tokens, rehearsal, data_report.json
- `regression`: the forgetting guard, scored before and after training
- `held_out`: the held-out clips scored by generation, before training and after
- `window_choice`: after trimmed or mixed training, the encoder window inference uses,
  chosen by scoring the held-out clips on both
- `hub`: `--push_to_hub`, final/ uploaded, the Hub checked before training
- `checkpoints`: checkpoint folders written whole (fsynced, then marked with their files'
  sizes), judged by their contents, rotated without losing the last whole one
- `resume`: which checkpoint to continue from, refusing a changed run, the run folder on
  start, a run resumed at its last step finished without training
- `record`: RUN/fitwhisper.yaml, the run record
- `master_weights`: final/ from DeepSpeed's fp32 master weights after a 16-bit run
- `ranks`: several processes (torchrun, accelerate launch): what the main one does alone
- `sharding`: `--deepspeed` (the shipped ZeRO configs, a file, what they refuse) and FSDP
  launches that would leave final/ without weights

The run folder:

    RUN/fitwhisper.yaml   resolved configuration, versions, data hashes
    RUN/data_report.json  what the data check found and what was skipped
    RUN/checkpoint-N/     Trainer checkpoints (model, processor, optimizer, RNG, ...);
                          fitwhisper_checkpoint.json marks one whole (checkpoints.py)
    RUN/trainer_state.json  the whole run's log history and best checkpoint
    RUN/final/            model + processor + generation config (from_pretrained-ready);
                          for LoRA runs the adapter, with processor and generation config;
                          README.md, the model card (models/card.py), and the run record;
                          written as RUN/final.partial/ and renamed when whole
    RUN/.fitwhisper.lock  while a run is going: its process id
    RUN/eval/             predictions.jsonl and metrics.json of the final model;
                          before/: the same with the starting weights (--score_before);
                          short_window/: the same on the short window (window_choice.py);
                          regression.json: --regression_manifest before and after
    RUN/logs/             TensorBoard events
"""

from fitwhisper.train.run import TrainResult, train
from fitwhisper.train.validation import validate

__all__ = ["TrainResult", "train", "validate"]
