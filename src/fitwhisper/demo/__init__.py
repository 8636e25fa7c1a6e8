"""`fitwhisper demo`: a real Whisper learns a new vocabulary on this CPU, in minutes.

- `data`: the demo's speech, made offline (invented words in sentences, an offline voice)
- `run`: the demo itself: score, fine-tune, score again, transcribe (`run_demo`)
"""
