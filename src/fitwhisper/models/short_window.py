"""Let Whisper's encoder take input shorter than 30 s (`train --short_encoder_input`, opt-in).

transformers' `WhisperEncoder.forward` refuses any mel input but 3000 frames, and adds the
whole 1500-row position table. For a batch of 5 s clips most of the encoder's work is then
padding. As the icefall Whisper recipes do, the encoder here takes T frames (T even) and
adds the first T/2 rows of the position table. The pretrained model never saw such windows,
so this is opt-in: the benchmark scores the result on normally padded 30 s input.
"""

from __future__ import annotations

import types


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


def record_training_window(model, mode: str, full_share: float) -> None:
    """Write into the model's config (saved with every checkpoint and final/) that it
    trains on trimmed input, so inference may encode short clips on their own length."""
    config = model.config
    setattr(config, CONFIG_KEY, {"mode": mode, "full_window_share": full_share})


def trained_window(config) -> str:
    """How the model was trained: "full" (Whisper's 30 s), "trimmed" or "mixed"."""
    recorded = getattr(config, CONFIG_KEY, None)
    return recorded.get("mode", "full") if isinstance(recorded, dict) else "full"
