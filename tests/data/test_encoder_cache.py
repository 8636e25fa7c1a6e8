"""--cache_encoder_outputs on a tiny random Whisper: training on cached encoder outputs gives
the losses of training on audio, the encoder runs once per item (not per epoch), a second
run in the same folder reuses the cache, a changed manifest rebuilds it, and the options
that would make cached outputs wrong are refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.data import encoder_cache
from fitwhisper.errors import ConfigError
from fitwhisper.train import train, validate


class _Losses:
    """A TrainerCallback keeping every logged training loss."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        losses: list[float] = []
        self.losses = losses

        class _CB(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "loss" in logs:
                    losses.append(float(logs["loss"]))

        self.callback = _CB()


@pytest.fixture
def encoder_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Batch size of every Whisper encoder forward pass, training and caching alike."""
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    calls: list[int] = []
    forward = WhisperEncoder.forward

    def counting(self, input_features, *args, **kwargs):
        calls.append(input_features.shape[0])
        return forward(self, input_features, *args, **kwargs)

    monkeypatch.setattr(WhisperEncoder, "forward", counting)
    return calls


def _train(model: Path, manifest: Path, out: Path, *, cache: bool, **kw):
    losses = _Losses()
    cfg = {
        "output_dir": str(out),
        "train_manifest": str(manifest),
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-3,
        "num_train_epochs": 2,  # 6 clips: 3 steps per epoch
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "seed": 0,
        "cache_encoder_outputs": cache,
        **kw,
    }
    res = train(
        ModelConfig(model=str(model), freeze_encoder=True),
        DataConfig(),
        TrainConfig(**cfg),
        callbacks=(losses.callback,),
    )
    return res, losses.losses


def test_cached_encoder_outputs_train_like_the_encoder_and_run_it_once_per_clip(
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    encoder_calls: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, plain = _train(tiny_whisper_dir, tone_manifest, tmp_path / "plain", cache=False)
    assert encoder_calls == [2] * 6  # 2 epochs x 3 batches of 2 clips, all on audio
    encoder_calls.clear()

    _, cached = _train(tiny_whisper_dir, tone_manifest, tmp_path / "fp16", cache=True)
    assert encoder_calls == [2, 2, 2]  # the cache pass over 6 clips; training runs none
    assert len(cached) == len(plain) == 6
    assert not np.allclose(plain, plain[0])  # the decoder learns: a real comparison
    # float16 on disk rounds the encoder's outputs (relative 2^-11): the losses move by far
    # less than training moves them.
    assert cached == pytest.approx(plain, rel=1e-4)

    # Stored in float32, only the batching of the encoder pass differs: equal losses.
    monkeypatch.setattr(encoder_cache, "CACHE_DTYPE", np.float32)
    _, exact = _train(tiny_whisper_dir, tone_manifest, tmp_path / "fp32", cache=True)
    assert exact == pytest.approx(plain, rel=1e-5)

    cache = encoder_cache.EncoderCache(tmp_path / "fp16" / "encoder_cache")
    assert cache.hidden().shape == (6, 1500, 64) and cache.hidden().dtype == np.float16
    assert json.loads(cache.key_path.read_text())["items"] == 6
    # Item i of the cached dataset is clip i: its labels and its encoder output. (The random
    # encoder's outputs differ little from clip to clip, too little to move the losses
    # above: this is what checks that outputs and labels stay paired.)
    items = encoder_cache.EncoderCacheDataset(cache, base=None)
    clips, expected = _clips_and_encoder_outputs(tiny_whisper_dir, tone_manifest)
    for i in range(6):
        assert items[i]["labels"] == clips[i]["labels"]
        hidden = items[i]["encoder_hidden"].astype(np.float32)
        assert np.abs(hidden - expected[i]).max() < 2e-3  # float16 rounding of values to +-4
        assert np.abs(hidden - expected[i - 1]).max() > 0.02


def _clips_and_encoder_outputs(model_dir: Path, manifest: Path):
    """The clips of `manifest` as training items, and the encoder's last_hidden_state of
    each, `(clips, 1500, d_model)`."""
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    from fitwhisper.data.features import SpeechDataset
    from fitwhisper.data.manifest import load_manifest

    model = WhisperForConditionalGeneration.from_pretrained(model_dir).eval()
    ds = SpeechDataset(load_manifest(manifest).rows, WhisperProcessor.from_pretrained(model_dir))
    clips = [ds[i] for i in range(len(ds))]
    features = torch.from_numpy(np.stack([c["input_features"] for c in clips]))
    with torch.no_grad():
        return clips, model.get_encoder()(features).last_hidden_state.numpy()


def test_a_second_run_reuses_the_cache_and_a_changed_manifest_rebuilds_it(
    tiny_whisper_dir: Path,
    tone_manifest: Path,
    tmp_path: Path,
    encoder_calls: list[int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="fitwhisper")
    out = tmp_path / "run"
    quick = {"num_train_epochs": 1}
    _, first = _train(tiny_whisper_dir, tone_manifest, out, cache=True, **quick)
    assert sum(encoder_calls) == 6
    assert "encoder cache: 6 items x 1500 x 64 float16 = 0.00 GiB in" in caplog.text
    assert "encoder cache: built 0.00 GiB in" in caplog.text
    key = (out / "encoder_cache" / "key.json").read_text()

    encoder_calls.clear()
    caplog.clear()
    # Into the finished run's folder again: its final/ is replaced only when asked.
    quick["overwrite_output_dir"] = True
    _, second = _train(tiny_whisper_dir, tone_manifest, out, cache=True, **quick)
    assert encoder_calls == []  # nothing recomputed
    assert "encoder cache: reusing" in caplog.text
    assert second == first

    # One transcript changed: the stored labels are stale, so the cache is built again.
    rows = [json.loads(x) for x in tone_manifest.read_text().splitlines()]
    rows[3]["text"] = "a different transcript"
    tone_manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    encoder_calls.clear()
    caplog.clear()
    _train(tiny_whisper_dir, tone_manifest, out, cache=True, **quick)
    assert sum(encoder_calls) == 6
    assert "encoder cache: built" in caplog.text
    assert (out / "encoder_cache" / "key.json").read_text() != key
    labels = json.loads((out / "encoder_cache" / "labels.json").read_text())
    from transformers import WhisperTokenizer

    tok = WhisperTokenizer.from_pretrained(tiny_whisper_dir)
    assert "a different transcript" in tok.decode(labels[3], skip_special_tokens=True)


def test_evaluation_during_training_runs_the_whole_model_on_audio(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, encoder_calls: list[int]
) -> None:
    out = tmp_path / "run"
    kw = {"max_steps": 1, "eval_manifest": str(tone_manifest), "eval_strategy": "steps",
          "eval_steps": 1, "per_device_eval_batch_size": 6, "generation_max_length": 4}  # fmt: skip
    _train(tiny_whisper_dir, tone_manifest, out, cache=True, **kw)
    state = json.loads((out / "trainer_state.json").read_text())
    assert any("eval_wer" in e for e in state["log_history"])
    # The cache pass (3 batches of 2); then the evaluation during training (its loss and
    # its generation) and the final scoring encode the 6 held-out clips from their audio.
    assert encoder_calls[:3] == [2, 2, 2]
    assert len(encoder_calls) >= 5 and set(encoder_calls[3:]) == {6}


def test_an_interrupted_build_is_not_reused(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, encoder_calls: list[int]
) -> None:
    out = tmp_path / "run"
    _train(tiny_whisper_dir, tone_manifest, out, cache=True, num_train_epochs=1)
    (out / "encoder_cache" / "key.json").unlink()  # as if the build stopped before the end
    encoder_calls.clear()
    _train(tiny_whisper_dir, tone_manifest, out, cache=True, num_train_epochs=1,
           overwrite_output_dir=True)  # fmt: skip
    assert sum(encoder_calls) == 6


@pytest.mark.parametrize(
    ("model_kw", "train_kw", "problem"),
    [
        (
            {"freeze_encoder": False},
            {},
            "--cache_encoder_outputs needs --freeze_encoder: a trained encoder's outputs "
            "change every step",
        ),
        (
            {"freeze_encoder": True},
            {"short_encoder_input": True},
            "--cache_encoder_outputs and --encoder_input trimmed: the cache holds the "
            "encoder's outputs of 30 s windows, a trimmed batch has fewer frames; use "
            "--encoder_input full with the cache",
        ),
    ],
)
def test_option_conflicts_are_refused_before_loading(
    tmp_path: Path, model_kw: dict, train_kw: dict, problem: str
) -> None:
    cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        train_manifest="train.json",
        cache_encoder_outputs=True,
        **train_kw,
    )
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(model="no/such-model", **model_kw), DataConfig(), cfg)
    assert e.value.message == f"the options conflict:\n  - {problem}"


def test_specaugment_in_the_model_config_is_refused(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    model.config.apply_spec_augment = True
    model.config.mask_time_prob = 0.05
    augmented = tmp_path / "augmented"
    model.save_pretrained(augmented)
    WhisperProcessor.from_pretrained(tiny_whisper_dir).save_pretrained(augmented)

    with pytest.raises(ConfigError) as e:
        _train(augmented, tone_manifest, tmp_path / "run", cache=True)
    assert e.value.message == (
        "the options conflict:\n  - --cache_encoder_outputs with SpecAugment on in the model's "
        "config (apply_spec_augment, mask_time_prob 0.05, mask_feature_prob 0.0): cached "
        "encoder outputs would train on unmasked input in every epoch"
    )
    assert not (tmp_path / "run" / "encoder_cache").exists()


def test_encoder_adapters_and_a_trainable_encoder_are_refused(tiny_whisper_dir: Path) -> None:
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.train.method_loading import prepare_for_training

    def loaded():
        return WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)

    lora_everywhere = prepare_for_training(
        loaded(), ModelConfig(use_lora=True, freeze_encoder=False), TrainConfig()
    )
    assert encoder_cache.model_problems(lora_everywhere) == [
        "--cache_encoder_outputs with LoRA adapters in the encoder: they change its outputs "
        "as they train; add --freeze_encoder to put adapters in the decoder only"
    ]
    lora_decoder = prepare_for_training(
        loaded(), ModelConfig(use_lora=True, freeze_encoder=True), TrainConfig()
    )
    assert encoder_cache.model_problems(lora_decoder) == []
    full = prepare_for_training(loaded(), ModelConfig(freeze_encoder=False), TrainConfig())
    assert encoder_cache.model_problems(full) == [
        "--cache_encoder_outputs with a trainable encoder: add --freeze_encoder"
    ]


def test_lora_in_the_decoder_trains_on_the_cache_like_on_audio(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, encoder_calls: list[int]
) -> None:
    def run(out: Path, cache: bool) -> list[float]:
        losses = _Losses()
        # The adapters' initial weights come from torch's global generator, which --seed
        # does not reset before they are made: the same state for both runs in one process.
        torch.manual_seed(0)
        train(
            ModelConfig(model=str(tiny_whisper_dir), freeze_encoder=True, use_lora=True),
            DataConfig(),
            TrainConfig(
                output_dir=str(out), train_manifest=str(tone_manifest),
                per_device_train_batch_size=2, learning_rate=1e-3, num_train_epochs=2,
                logging_steps=1, save_strategy="no", report_to="none", seed=0,
                cache_encoder_outputs=cache,
            ),
            callbacks=(losses.callback,),
        )  # fmt: skip
        return losses.losses

    plain = run(tmp_path / "plain", cache=False)
    encoder_calls.clear()
    cached = run(tmp_path / "cached", cache=True)
    # The PeftModel hands encoder_outputs on to Whisper's forward: no encoder in training.
    assert encoder_calls == [2, 2, 2]
    assert len(cached) == len(plain) == 6
    assert cached == pytest.approx(plain, rel=1e-4)


def test_packed_windows_are_cached_like_clips(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path, encoder_calls: list[int]
) -> None:
    kw = {"pack_clips": True, "per_device_train_batch_size": 1}
    _, plain = _train(tiny_whisper_dir, tone_manifest, tmp_path / "plain", cache=False, **kw)
    assert encoder_calls == [1, 1]  # 6 clips of 1-2 s: one 9 s window, 2 epochs
    encoder_calls.clear()
    _, cached = _train(tiny_whisper_dir, tone_manifest, tmp_path / "cached", cache=True, **kw)
    assert encoder_calls == [1]
    assert len(cached) == 2
    assert cached == pytest.approx(plain, rel=1e-4)


def test_backoff_splits_the_cached_encoder_outputs_with_the_batch() -> None:
    from fitwhisper.memory.backoff import _split

    hidden = torch.arange(5.0).view(5, 1, 1)
    parts = _split({"encoder_outputs": (hidden,), "labels": torch.ones(5, 3)}, 2)
    assert [p["encoder_outputs"][0].shape[0] for p in parts] == [3, 2]
    assert torch.equal(torch.cat([p["encoder_outputs"][0] for p in parts]), hidden)


def test_the_cache_is_built_on_the_gpu_training_will_use(monkeypatch) -> None:
    """The encoder pass runs on the GPU of this process (LOCAL_RANK's) when the model is
    still on the CPU; without CUDA, or for weights already placed, it stays where it is."""
    import torch

    from fitwhisper.data.encoder_cache import training_device

    cpu, placed = torch.device("cpu"), torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert training_device(cpu) == cpu
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert training_device(cpu) == torch.device("cuda", 1)
    assert training_device(placed) == placed
    monkeypatch.delenv("LOCAL_RANK")
    assert training_device(cpu) == torch.device("cuda", 0)
