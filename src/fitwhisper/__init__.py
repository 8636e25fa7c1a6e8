"""fitwhisper: fine-tune Whisper on your own audio without running out of GPU memory.

The command is `fitwhisper` (cli/); the library is arranged in layers, lowest first, and no
module imports a layer above its own (tests/test_package_shape.py):

- below everything: `whisper_facts` (16 kHz, the 30 s window, `<|zh|>` -> `zh`)
- ground: `errors` (user errors with hints), `logs`, `config` (the option dataclasses
  every flag comes from; `eval_config` holds the scoring ones, `tune_config` the
  search's), `option_ranges` (the values each option takes, declared on its field),
  `precision` (fp32, fp16 or bf16 for a run), `method` (full, LoRA, 8-bit, 4-bit);
  `recipes` (the defaults that depend on the method, chosen by measurement)
- `safe_text` (text from outside written safely: one writer per kind of output)
- `text_joins` (how pieces of a transcript join: spaced scripts with a space, CJK without)
- `output_guard` (the one rule of every command's outputs: never onto an input, writable,
  --force only over what fitwhisper made), `paths` (storage failures told as such),
  `folder_lock` (one command per output folder)
- text: `scoring` (normalisers, WER/CER/MER), `codeswitch` (language tokens),
  `chinese_script` (Traditional and Simplified characters, conversion)
- `models/` (resolve, load, convert), `data/` (manifests, audio, check, batches),
  `memory/` (predict, plan and watch GPU memory)
- `evaluate/` (scoring by generation), `transcribe/` (two engines, long files, formats)
- `train/` (a run, config in, run folder out), `export/` (deployable models, re-scored)
- `demo/`, `tune/` (hyperparameter search with Optuna, each trial a `train` run), and
  `cli/` with `__main__`: flags, errors, exit codes
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
