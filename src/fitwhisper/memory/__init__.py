"""Memory planning (SPEC M1-M6): `predict.py` predicts a training step's peak, `trace.py`
traces it on fake tensors, `architectures.py` ships the standard Whisper configurations."""
