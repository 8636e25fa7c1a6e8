"""From manifests to model inputs: rows, audio, the data check, batches, features.

- `manifest`: JSON, JSONL, CSV/TSV, audiofolder and `save_to_disk` manifests to `Row`s
- `sources`: tar shards, shard folders (`fitwhisper shard`) and Hub datasets as rows or units
- `stream`: training clips streamed shard by shard, dealt to processes and workers, resumable
- `audio`: any audio file to 16 kHz mono float32 (soundfile, PyAV, soxr)
- `check`: every row's audio and transcript checked before training (`check-data`)
- `check_cache`: each clip's audio facts kept, so the check decodes a clip once per content
- `clip_facts`: what the check keeps of a decoded clip, and the problems its samples show
- `usable`: the checked, usable rows of a manifest, the one way every command reads data
- `sampled_check`: the rows `train --check sample:N` decodes, and the others' headers
- `late_check`: rows a sampled check read by header only, checked as training loads them
- `segments`: timed segments of a long recording (a manifest's `segments`, offsets), and
  their problems for the check
- `subtitles`: SRT and WebVTT files read as segments; folders of subtitled recordings
- `recordings`: long recordings cut into 30 s windows (the straddling rule), and a
  window's labels: timestamps, previous text as `<|startofprev|>` context
- `timestamp_tokens`: Whisper's `<|0.00|>` ... `<|30.00|>` in a tokenizer
- `features`: log-mel features and labels made as batches are drawn, and the collator
- `log_mel`: the whole batch's log-mel made on the training device (`--log_mel device`),
  equal to the feature extractor's
- `batching`: length-grouped order and batches trimmed to their longest clip
- `training_data`: the training items and collator the speed options ask for, put together
- `packing`: several short clips in one 30 s window (`--pack_clips`)
- `mixed_windows`: a few such windows among single clips (`--packed_window_share`)
- `frame_share`: the encoder frames a mixed run feeds, its batching replayed
- `augment`: training clips augmented on the fly (speed, noise, gain, SpecAugment masks)
- `noise`: noise recordings of `--noise_dir`, or generated coloured noise
- `encoder_cache`: a frozen encoder's outputs computed once (`--cache_encoder_outputs`)
"""
