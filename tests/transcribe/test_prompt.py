"""`--initial_prompt` reaches the decoder as one short timestamped segment when the
decoding writes timestamps: a plain prompt reads as one segment as long as the window, and
the model then writes each 30 s window as one segment and loses its last sentence at the
window's end (transcribe/prompt.py)."""

from __future__ import annotations

from types import SimpleNamespace

from fitwhisper.transcribe.prompt import PROMPT_SEGMENT_S, prompt_tokens


def test_a_prompt_is_a_timestamped_segment_when_decoding_with_timestamps(
    tiny_en_processor,
) -> None:
    tok = tiny_en_processor.tokenizer
    encode = lambda t: tok(t, add_special_tokens=False).input_ids  # noqa: E731
    first = tok.convert_tokens_to_ids("<|0.00|>")
    timed = prompt_tokens(encode, first, "  Kaohsiung, Taichung. ")
    assert tok.decode(timed, decode_with_timestamps=True) == (
        f"<|0.00|> Kaohsiung, Taichung.<|{PROMPT_SEGMENT_S:.2f}|>"
    )
    plain = prompt_tokens(encode, None, "Kaohsiung, Taichung.")
    assert plain == timed[1:-1] and tok.decode(plain) == " Kaohsiung, Taichung."


def test_the_batched_pipeline_gets_the_same_segment() -> None:
    """faster-whisper's batched pipeline encodes the prompt text itself; the wrapper it is
    handed (ct2_padding) writes the tokens as the sequential path does, and leaves a
    decoding without timestamps its plain prompt."""
    from fitwhisper.transcribe.ct2_padding import padded_model

    seen = []
    model = SimpleNamespace(
        feature_extractor=object(),
        get_prompt=lambda tokenizer, previous, without_timestamps, **kw: seen.append(
            (list(previous), without_timestamps, kw)
        ),
    )
    tokenizer = SimpleNamespace(timestamp_begin=1000)
    wrapped = padded_model(model)
    wrapped.get_prompt(tokenizer, [7, 8], without_timestamps=False, hotwords=None)
    wrapped.get_prompt(tokenizer, [7, 8], without_timestamps=True)
    wrapped.get_prompt(tokenizer, [], without_timestamps=False)
    steps = round(PROMPT_SEGMENT_S / 0.02)
    assert seen == [
        ([1000, 7, 8, 1000 + steps], False, {"hotwords": None}),
        ([7, 8], True, {}),
        ([], False, {}),
    ]


def test_the_transformers_engine_prompts_by_its_decoding(tiny_whisper_dir, monkeypatch) -> None:
    import numpy as np

    import fitwhisper.models.short_window as short_window
    from fitwhisper.transcribe.hf_engine import TransformersEngine
    from fitwhisper.transcribe.options import TranscribeOptions

    seen = []

    class Seen(Exception):
        pass

    def generate(model, features, **kwargs):
        seen.append(kwargs["prompt_ids"].tolist())
        raise Seen

    monkeypatch.setattr(short_window, "generate_short", generate)
    clip = np.zeros(16000, np.float32)
    for timestamps in ("segment", "none"):
        opts = TranscribeOptions(vad=False, timestamps=timestamps, initial_prompt="Taipei.")
        engine = TransformersEngine(str(tiny_whisper_dir), opts, "cpu")
        try:
            engine._generate([clip], None)
        except Seen:
            pass
    tok = engine.processor.tokenizer
    timed, plain = (tok.decode(ids, decode_with_timestamps=True) for ids in seen)
    assert timed == f"<|startofprev|><|0.00|> Taipei.<|{PROMPT_SEGMENT_S:.2f}|>"
    assert plain == "<|startofprev|> Taipei."
