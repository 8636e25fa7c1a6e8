"""Let Whisper's encoder take input shorter than 30 s (`train --short_encoder_input`, opt-in).

transformers' `WhisperEncoder.forward` refuses any mel input but 3000 frames, and adds the
whole 1500-row position table. For a batch of 5 s clips most of the encoder's work is then
padding. As the icefall Whisper recipes do, the encoder here takes T frames (T even) and
adds the first T/2 rows of the position table. The pretrained model never saw such windows,
so this is opt-in: the benchmark scores the result on normally padded 30 s input.
"""

from __future__ import annotations

import types

from fitwhisper.whisper_facts import FRAMES_PER_SECOND, WINDOW_FRAMES


def allow_short_input(model) -> None:
    """Patch the model's encoder (in place) to accept 2..3000 mel frames.

    The position table is not copied or resized, so checkpoints and saved models are those
    of the stock architecture; 3000-frame input behaves exactly as before.
    """
    encoder = model.get_encoder()
    if getattr(encoder, "_fitwhisper_short_input", False):
        return
    full_forward = encoder.forward

    def forward(self, input_features, *args, **kwargs):
        positions = input_features.shape[-1] // (self.conv1.stride[0] * self.conv2.stride[0])
        table = self.embed_positions
        saved = self.config.max_source_positions, table.num_embeddings
        # forward() checks the length against config.max_source_positions and adds
        # embed_positions(arange(num_embeddings)); both are set to this input's length.
        self.config.max_source_positions = table.num_embeddings = positions
        try:
            return full_forward(input_features, *args, **kwargs)
        finally:
            self.config.max_source_positions, table.num_embeddings = saved

    encoder.forward = types.MethodType(forward, encoder)
    encoder._fitwhisper_short_input = True


CONFIG_KEY = "fitwhisper_encoder_input"


def record_training_window(model, mode: str, full_share: float, packed_share: float = 0.0) -> None:
    """Write into the model's config (saved with every checkpoint and final/) that it
    trains on trimmed input, so inference may encode short clips on their own length.
    `packed_share`: the share of training items that were 30 s windows of several clips."""
    config = model.config
    record = {"mode": mode, "full_window_share": full_share}
    if packed_share:
        record["packed_window_share"] = round(packed_share, 4)
    setattr(config, CONFIG_KEY, record)


def trained_window(config) -> str:
    """How the model was trained: "full" (Whisper's 30 s), "trimmed" or "mixed"."""
    recorded = getattr(config, CONFIG_KEY, None)
    return recorded.get("mode", "full") if isinstance(recorded, dict) else "full"


def _recorded(model_dir) -> dict:
    """The training-window record in a local model folder's config.json ({} if none)."""
    import json
    from pathlib import Path

    config = Path(str(model_dir)) / "config.json"
    try:
        recorded = json.loads(config.read_text()).get(CONFIG_KEY)
    except (OSError, ValueError):  # a Hub id, or no readable config: nothing recorded
        return {}
    return recorded if isinstance(recorded, dict) else {}


def recorded_window(model_dir) -> str:
    """The window `--encoder_window auto` uses for a saved model folder (see window_for)."""
    return _chosen(_recorded(model_dir))


def thirty_second_note(model_dir) -> str | None:
    """For `fitwhisper export`: a model trained on trimmed input meets 30 s windows in the
    other engines; a note saying so and how to measure it, or None."""
    mode = _recorded(model_dir).get("mode")
    if mode not in ("trimmed", "mixed"):
        return None
    return (
        f"  note: this model trained with --encoder_input {mode}; engines other than "
        "`fitwhisper transcribe` feed it 30 s windows, where it can score worse than on its "
        "own short window (English digit strings, mixed: WER 4.3% at 30 s, 3.8% short, "
        "bench/RESULTS-train-speed.md). `fitwhisper evaluate MODEL MANIFEST "
        "--encoder_window full` measures it on your data."
    )


def window_for(config, choice: str) -> str:
    """The encoder window inference uses: `choice` (full, short), or for auto the one the
    training run chose by measurement (train/window_choice.py); 30 s when none was."""
    return window_choice(config, choice)[0]


def window_choice(config, choice: str) -> tuple[str, str]:
    """`window_for`'s window, and why it applies (for the records of what was decided)."""
    if choice in ("full", "short"):
        return choice, "--encoder_window"
    recorded = getattr(config, CONFIG_KEY, None)
    window = _chosen(recorded)
    if isinstance(recorded, dict) and recorded.get("inference_window") in ("full", "short"):
        return window, f"auto: chosen by the training run ({recorded.get('why', 'measured')})"
    return window, "auto: 30 s, as Whisper was trained (no training run chose another)"


def _chosen(recorded) -> str:
    """The window a training record chose; 30 s when it chose none."""
    window = recorded.get("inference_window") if isinstance(recorded, dict) else None
    return window if window in ("full", "short") else "full"


def record_inference_window(config, window: str, why: str) -> None:
    """Write into the model's config the window `--encoder_window auto` uses, and why."""
    recorded = getattr(config, CONFIG_KEY, None)
    recorded = dict(recorded) if isinstance(recorded, dict) else {}
    setattr(config, CONFIG_KEY, {**recorded, "inference_window": window, "why": why})


def short_frames(clip_frames: int, multiple: int = 2) -> int:
    """A window that holds `clip_frames`: rounded up to `multiple` (the encoder's second
    convolution has stride 2), at most 30 s."""
    return min(WINDOW_FRAMES, max(multiple, clip_frames + (-clip_frames % multiple)))


# Inference only: the window runs 1 s past the batch's longest clip. Cut at the clip's end,
# that clip has no room for its closing timestamp; on a model fine-tuned with the defaults
# (40 short Mandarin clips, batches of 8) segment-timestamp CER went 8.62% -> 6.47% with the
# margin (30 s windows: 5.64%), and 6.30% -> 6.14% without timestamps.
INFERENCE_MARGIN_FRAMES = FRAMES_PER_SECOND  # 1 s


def inference_frames(clip_frames: int) -> int:
    """The short window inference encodes a batch on: its longest clip and a 1 s margin."""
    return short_frames(clip_frames + INFERENCE_MARGIN_FRAMES)


class ShortWindowCollator:
    """Wraps a collator: cuts each batch's features to its longest clip (`clip_frames`) and
    the inference margin."""

    def __init__(self, collator) -> None:
        self.collator = collator

    def __call__(self, features):
        frames = max(int(f.get("clip_frames", WINDOW_FRAMES)) for f in features)
        batch = self.collator(features)
        batch["input_features"] = batch["input_features"][..., : inference_frames(frames)]
        return batch


def generate_short(model, input_features, *, generate=None, **kwargs):
    """`model.generate` (or `generate`) with input shorter than 30 s encoded on its own
    length.

    transformers' generate cuts the input into segments of `2 x max_source_positions`
    frames and pads each to that length, so for the call the model's window is the
    input's own: one segment, unpadded (temperature fallback and timestamps as usual).
    """
    generate = generate or model.generate
    if input_features is None or input_features.shape[-1] >= WINDOW_FRAMES:
        return generate(input_features=input_features, **kwargs)
    allow_short_input(model)
    kwargs.pop("attention_mask", None)  # one window per clip: nothing to mask
    config = model.config
    saved = config.max_source_positions
    config.max_source_positions = input_features.shape[-1] // 2  # conv stride 2
    try:
        return generate(input_features=input_features, **kwargs)
    finally:
        config.max_source_positions = saved


class short_generation:
    """Within it, `model.generate` encodes short input on its own length (generate_short);
    for where a Trainer calls generate (evaluation)."""

    def __init__(self, model) -> None:
        self.model = model

    def __enter__(self):
        import functools

        real = self.model.generate
        self.model.generate = functools.partial(generate_short, self.model, generate=real)
        return self.model

    def __exit__(self, *exc) -> None:
        self.model.__dict__.pop("generate", None)
