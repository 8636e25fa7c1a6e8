"""`fitwhisper demo`: a real Whisper learns a new vocabulary on this CPU, in minutes.

- `data`: the demo's speech, made offline (invented words in sentences, an offline voice)
- `run`: the demo itself: score, fine-tune, score again, transcribe (`run_demo`)
"""

# How many clips the demo speaks for training and holds out (`fitwhisper demo --train_clips`,
# `--eval_clips`): 240 and 48 take the held-out WER from 47% to under 1% in one epoch.
DEFAULT_N_TRAIN = 240
DEFAULT_N_EVAL = 48
