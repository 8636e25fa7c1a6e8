"""Memory planning (SPEC M1-M6): `predict.py` predicts a training step's peak, `trace.py`
traces it on fake tensors, `architectures.py` ships the standard Whisper configurations,
`search.py` finds the fastest settings that fit a GPU, `fit.py` applies a plan to `train`'s
options (`--plan`, `--auto_fit`), and `presets.py` generates the README's GPU-size presets."""
