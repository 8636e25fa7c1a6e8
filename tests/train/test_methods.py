"""Training methods: LoRA on the tiny random Whisper end to end, the 8-bit and
4-bit configuration, option conflicts, adapter folders, and `fitwhisper merge`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fitwhisper.config import WHISPER_LINEAR_MODULES, DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError, ModelLoadError
from fitwhisper.models.resolve import has_processor
from fitwhisper.train import method_loading as methods
from fitwhisper.train import train, validate

# Merged vs adapter model in float32: only the order of the sums differs.
LOGITS_ATOL = 1e-4  # tiny random Whisper, logits of order 1
LOGITS_ATOL_REAL = 1e-3  # offline/base, logits of order 10 (2.7e-5 seen)


class _Snapshots:
    """A TrainerCallback that copies every parameter at the start and end of training."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}
        outer = self

        class _CB(TrainerCallback):
            def on_train_begin(self, args, state, control, model=None, **kwargs):
                outer.before = {k: v.detach().clone() for k, v in model.named_parameters()}

            def on_train_end(self, args, state, control, model=None, **kwargs):
                outer.after = {k: v.detach().clone() for k, v in model.named_parameters()}

        self.callback = _CB()

    def moved(self) -> set[str]:
        """Names of the parameters that changed during training."""
        return {k for k, v in self.before.items() if not torch.equal(v, self.after[k])}


def _features(processor, path: Path) -> torch.Tensor:
    from fitwhisper.data.audio import load_audio

    audio = load_audio(path)
    return processor.feature_extractor(audio, sampling_rate=16_000, return_tensors="pt")[
        "input_features"
    ]


def _logits(model, features: torch.Tensor, decoder_ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_features=features, decoder_input_ids=decoder_ids).logits


def test_lora_trains_adapters_only_and_merges_into_an_equal_model(
    tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    from transformers import WhisperForConditionalGeneration, pipeline

    from fitwhisper.cli import main
    from fitwhisper.models.resolve import load_model, load_processor

    out = tmp_path / "run"
    snaps = _Snapshots()
    result = train(
        ModelConfig(model=str(tiny_whisper_dir), use_lora=True),
        DataConfig(max_train_samples=2),  # every step is two 30 s windows: keep it quick
        TrainConfig(
            output_dir=str(out),
            train_manifest=str(tone_manifest),
            per_device_train_batch_size=2,
            learning_rate=1e-2,
            max_steps=2,
            logging_steps=1,
            save_strategy="steps",
            save_steps=2,
            # Gradients must still reach the encoder's adapters through checkpointed layers.
            gradient_checkpointing=True,
            report_to="none",
            seed=0,
        ),
        callbacks=(snaps.callback,),
    )
    assert result.global_step == 2

    # Only adapters trained: every base weight is bit-identical, every lora_B (zero at
    # start) moved, in the encoder and the decoder alike.
    lora_b = {k for k in snaps.before if "lora_B" in k}
    moved = snaps.moved()
    assert lora_b and {k for k in moved if "lora_" not in k} == set()
    assert lora_b <= moved
    assert any(".encoder." in k for k in moved) and any(".decoder." in k for k in moved)

    # The final folder is an adapter usable on its own: weights, processor, generation config.
    final = result.final_dir
    for name in (
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "generation_config.json",
    ):
        assert (final / name).is_file(), name
    assert has_processor(final)
    assert not (final / "model.safetensors").exists()
    adapter_cfg = json.loads((final / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == str(tiny_whisper_dir.resolve())
    assert adapter_cfg["r"] == 16 and adapter_cfg["lora_alpha"] == 32
    assert set(adapter_cfg["target_modules"]) == set(WHISPER_LINEAR_MODULES)
    base_bytes = (tiny_whisper_dir / "model.safetensors").stat().st_size
    assert (final / "adapter_model.safetensors").stat().st_size < 0.1 * base_bytes
    # Trainer checkpoints of a LoRA run hold the adapter (what resuming loads) and work as
    # a model spec, with the base's tokenizer (a checkpoint holds only the feature extractor).
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()
    assert load_processor(out / "checkpoint-2").tokenizer.eos_token == "<|endoftext|>"

    # `fitwhisper merge` writes a full model whose logits equal the adapter model's.
    merged_dir = tmp_path / "merged"
    assert main(["merge", str(out), str(merged_dir)]) == 0
    assert main(["merge", str(out), str(merged_dir)]) == 1  # exists: needs --force
    assert not (merged_dir / "adapter_config.json").exists()
    merged = WhisperForConditionalGeneration.from_pretrained(merged_dir)
    adapted = load_model(final)
    assert type(adapted).__name__.startswith("Peft")
    processor = load_processor(final)
    clip = next((tone_manifest.parent / "clips").glob("*.wav"))
    features = _features(processor, clip)
    ids = torch.tensor([[merged.config.decoder_start_token_id, 50362, 440, 1115]])
    want = _logits(adapted, features, ids)
    got = _logits(merged, features, ids)
    assert torch.allclose(got, want, atol=LOGITS_ATOL, rtol=0)
    # ...and the LoRA update is not a no-op: the base alone gives other logits.
    base = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    assert not torch.allclose(_logits(base, features, ids), want, atol=LOGITS_ATOL, rtol=0)

    # The merged folder works in the transformers ASR pipeline and writes what the adapter
    # model writes.
    from fitwhisper.data.audio import load_audio

    asr = pipeline("automatic-speech-recognition", model=str(merged_dir), device="cpu")
    audio = {"raw": load_audio(clip), "sampling_rate": 16_000}
    text = asr(audio, generate_kwargs={"max_new_tokens": 5, "num_beams": 1})["text"]
    with torch.no_grad():
        adapter_ids = adapted.generate(input_features=features, max_new_tokens=5)
    assert (
        text.strip() == processor.tokenizer.decode(adapter_ids[0], skip_special_tokens=True).strip()
    )

    # Training on from an adapter is refused before loading; from its merged model it works.
    for spec in (out, final):
        with pytest.raises(ConfigError, match=f"--model {spec} is a LoRA adapter; to train on"):
            validate(ModelConfig(model=str(spec)), DataConfig(), TrainConfig(train_manifest="t"))
    validate(ModelConfig(model=str(merged_dir)), DataConfig(), TrainConfig(train_manifest="t"))

    # `fitwhisper evaluate` takes the LoRA run folder as a model.
    argv = ["evaluate", str(out), str(tone_manifest), "--max_samples", "2"]
    assert main([*argv, "--generation_max_length", "8"]) == 0


def test_every_method_conflict_is_reported_at_once_before_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fitwhisper.models.resolve as resolve

    monkeypatch.setattr(methods, "_cuda_available", lambda: False)
    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: False)

    def no_loading(*a, **k):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(resolve, "resolve_model", no_loading)
    model_cfg = ModelConfig(
        model="no/such-model",
        use_8bit=True,
        use_4bit=True,
        lora_r=0,
        lora_alpha=0,
        lora_dropout=1.5,
        lora_target_modules=["q_proj", "query"],
        bnb_4bit_compute_dtype="bfloat16",
    )
    train_cfg = TrainConfig(
        output_dir=str(tmp_path / "run"),
        train_manifest="train.jsonl",
        fp16=True,
        optim="adamw_8bit",
    )
    with pytest.raises(ConfigError) as e:
        train(model_cfg, DataConfig(), train_cfg)
    lines = e.value.message.splitlines()[1:]
    hint = "pip install 'bitsandbytes>=0.50' (a dependency of fitwhisper; 0.50+ runs on CPU too)"
    assert lines == [
        "  - --fp16 needs a CUDA GPU and none is visible (fp16 mixed precision is CUDA-only); "
        "use --bf16 or leave both unset to train in fp32 on CPU",
        "  - --lora_r must be at least 1, got 0",
        "  - --lora_alpha must be at least 1, got 0",
        "  - --lora_dropout must be in [0, 1), got 1.5",
        "  - --use_8bit and --use_4bit are both set; pick one",
        "  - --lora_target_modules has unknown layers query; Whisper's are "
        "q_proj,k_proj,v_proj,out_proj,fc1,fc2",
        f"  - --use_4bit needs bitsandbytes, which is not installed: {hint}",
        f"  - --optim adamw_8bit needs bitsandbytes, which is not installed: {hint}",
        "  - --fp16 with --bnb_4bit_compute_dtype bfloat16: mixed precision and the 4-bit "
        "layers would compute in different dtypes; use float16 or auto",
    ]
    assert not (tmp_path / "run").exists()


def test_quantised_options_pass_where_cuda_and_bitsandbytes_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fitwhisper.precision as precision

    monkeypatch.setattr(methods, "_cuda_available", lambda: True)
    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": True, "bf16_supported": True})
    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: True)
    train_cfg = TrainConfig(train_manifest="t.jsonl", bf16=True, optim="adamw_8bit")
    validate(ModelConfig(use_4bit=True), DataConfig(), train_cfg)  # no error
    fp16_compute = ModelConfig(use_4bit=True, bnb_4bit_compute_dtype="float16")
    with pytest.raises(ConfigError, match="--bf16 with --bnb_4bit_compute_dtype float16"):
        validate(fp16_compute, DataConfig(), train_cfg)
    # LoRA values are checked whether or not LoRA runs: each number is checked against its
    # field's declared range alone (fitwhisper.option_ranges), so --lora_r 0 is never taken.
    with pytest.raises(ConfigError, match="--lora_r must be at least 1, got 0"):
        validate(ModelConfig(lora_r=0), DataConfig(), TrainConfig(train_manifest="t.jsonl"))


def test_quantised_options_pass_on_cpu_with_a_recent_bitsandbytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import fitwhisper.precision as precision

    monkeypatch.setattr(methods, "_cuda_available", lambda: False)
    monkeypatch.setattr(precision, "hardware", lambda: {"cuda": False, "bf16_supported": False})
    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: True)
    monkeypatch.setattr(methods, "_bitsandbytes_version", lambda: "0.50.2")
    for model_cfg in (ModelConfig(use_8bit=True), ModelConfig(use_4bit=True)):
        train_cfg = TrainConfig(train_manifest="t.jsonl", bf16=True, optim="adamw_8bit")
        validate(model_cfg, DataConfig(), train_cfg)  # no error
    # fp16 mixed precision stays CUDA-only, with quantisation as without.
    with pytest.raises(ConfigError, match=r"--fp16 needs a CUDA GPU .* CUDA-only"):
        validate(
            ModelConfig(use_4bit=True), DataConfig(), TrainConfig(train_manifest="t", fp16=True)
        )
    # A bitsandbytes without the CPU backend is named, for each flag that needs it.
    monkeypatch.setattr(methods, "_bitsandbytes_version", lambda: "0.45.5")
    train_cfg = TrainConfig(train_manifest="t.jsonl", optim="adamw_8bit")
    with pytest.raises(ConfigError) as e:
        validate(ModelConfig(use_8bit=True), DataConfig(), train_cfg)
    assert [line.split(" without")[0] for line in e.value.message.splitlines()[1:]] == [
        "  - --use_8bit",
        "  - --optim adamw_8bit",
    ]
    assert "needs bitsandbytes 0.50 or newer (its CPU backend), found 0.45.5" in e.value.message
    # ...but serves a CUDA machine.
    monkeypatch.setattr(methods, "_cuda_available", lambda: True)
    validate(ModelConfig(use_8bit=True), DataConfig(), TrainConfig(train_manifest="t.jsonl"))


def test_bitsandbytes_configs_follow_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    assert methods.quantization_config(ModelConfig(), "fp32") is None
    assert methods.load_kwargs(ModelConfig(use_lora=True), "fp32") == {}

    q8 = methods.quantization_config(ModelConfig(use_8bit=True), "fp32")
    assert q8.load_in_8bit and not q8.load_in_4bit

    def q4(precision: str, dtype: str = "auto"):
        return methods.quantization_config(
            ModelConfig(use_4bit=True, bnb_4bit_compute_dtype=dtype), precision
        )

    cfg = q4("fp32")
    assert cfg.load_in_4bit and not cfg.load_in_8bit
    assert (cfg.bnb_4bit_quant_type, cfg.bnb_4bit_use_double_quant) == ("nf4", True)
    assert cfg.bnb_4bit_compute_dtype == torch.float32
    assert q4("bf16").bnb_4bit_compute_dtype == torch.bfloat16
    assert q4("fp16").bnb_4bit_compute_dtype == torch.float16
    assert q4("fp32", "bfloat16").bnb_4bit_compute_dtype == torch.bfloat16

    # Without bitsandbytes, loading refuses with the fix.
    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: False)
    with pytest.raises(ConfigError) as e:
        methods.load_kwargs(ModelConfig(use_8bit=True), "fp32")
    assert e.value.message == "8-bit and 4-bit loading need bitsandbytes, which is not installed"
    assert "pip install 'bitsandbytes>=0.50'" in e.value.hint

    # Without CUDA, the quantised base is made on the CPU (bitsandbytes' CPU backend)...
    monkeypatch.setattr(methods, "_cuda_available", lambda: False)
    monkeypatch.setattr(methods, "_bitsandbytes_installed", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    kwargs = methods.load_kwargs(ModelConfig(use_8bit=True), "fp32")
    assert kwargs["device_map"] == {"": "cpu"} and kwargs["quantization_config"].load_in_8bit

    # ...with CUDA, on this process's GPU.
    monkeypatch.setattr(methods, "_cuda_available", lambda: True)
    kwargs = methods.load_kwargs(ModelConfig(use_4bit=True), "fp32")
    assert kwargs["device_map"] == {"": 1} and kwargs["quantization_config"].load_in_4bit


def test_frozen_encoder_puts_adapters_in_the_decoder_only(tiny_whisper_dir: Path) -> None:
    from transformers import WhisperForConditionalGeneration

    def adapted_layers(model_cfg: ModelConfig) -> set[str]:
        model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
        peft_model = methods.prepare_for_training(model, model_cfg, TrainConfig(learning_rate=1e-3))
        return {k.split(".lora_A")[0] for k, _ in peft_model.named_parameters() if ".lora_A" in k}

    everywhere = adapted_layers(ModelConfig(use_lora=True))
    # 2 encoder layers x (4 attention + 2 ffn) + 2 decoder layers x (8 attention + 2 ffn)
    assert len(everywhere) == 2 * 6 + 2 * 10
    decoder_only = adapted_layers(ModelConfig(use_lora=True, freeze_encoder=True))
    assert decoder_only == {k for k in everywhere if ".decoder." in k}
    qv = adapted_layers(ModelConfig(use_lora=True, lora_target_modules=["q_proj", "v_proj"]))
    assert {k.rsplit(".", 1)[1] for k in qv} == {"q_proj", "v_proj"} and len(qv) == 2 * 2 + 2 * 4


def test_full_fine_tuning_keeps_encoder_positions_fixed(tiny_whisper_dir: Path) -> None:
    from transformers import WhisperForConditionalGeneration

    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)
    same = methods.prepare_for_training(model, ModelConfig(), TrainConfig())
    assert same is model
    assert not model.model.encoder.embed_positions.weight.requires_grad
    assert model.model.decoder.layers[0].fc1.weight.requires_grad


def test_adamw_8bit_on_cpu_warns_that_it_is_slow(
    tiny_whisper_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from transformers import WhisperForConditionalGeneration

    logging.getLogger("fitwhisper").addHandler(caplog.handler)  # the CLI stops propagation
    monkeypatch.setattr(methods, "_cuda_available", lambda: False)
    model = WhisperForConditionalGeneration.from_pretrained(tiny_whisper_dir)

    def warned(train_cfg: TrainConfig) -> set[str]:
        caplog.clear()
        methods.prepare_for_training(model, ModelConfig(), train_cfg)
        return {r.getMessage() for r in caplog.records if "adamw_8bit" in r.getMessage()}

    try:
        assert len(slow := warned(TrainConfig(optim="adamw_8bit"))) == 1
        assert "on CPU" in slow.pop() and warned(TrainConfig()) == set()
    finally:
        logging.getLogger("fitwhisper").removeHandler(caplog.handler)


def test_target_modules_flag_takes_commas_and_repeats(tmp_path: Path) -> None:
    from fitwhisper.cli import build_parser
    from fitwhisper.cli.flags import build_config, load_config_file

    args = build_parser().parse_args(
        ["train", "--lora_target_modules", "q_proj, v_proj", "--lora_target_modules", "fc1"]
    )
    assert build_config(ModelConfig, args, {}).lora_target_modules == ["q_proj", "v_proj", "fc1"]
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("model:\n  lora_target_modules: q_proj,k_proj\n  use_lora: true\n")
    from_file = load_config_file(cfg_file, {"model": ModelConfig})
    none_given = build_parser().parse_args(["train"])
    cfg = build_config(ModelConfig, none_given, from_file["model"])
    assert cfg.lora_target_modules == ["q_proj", "k_proj"] and cfg.use_lora


def test_merge_refuses_a_folder_without_an_adapter(
    tiny_whisper_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fitwhisper.cli import main

    assert main(["merge", str(tiny_whisper_dir), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"error: {tiny_whisper_dir} holds no LoRA adapter (no adapter_config.json)" in err
    assert not (tmp_path / "out").exists()


def test_adapter_whose_base_is_gone_names_it(tmp_path: Path) -> None:
    from fitwhisper.models.resolve import resolve_model

    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tmp_path / "gone")})
    )
    with pytest.raises(ModelLoadError) as e:
        resolve_model(tmp_path)
    assert e.value.message.startswith(
        f"the LoRA adapter in {tmp_path} needs its base model {str(tmp_path / 'gone')!r}: "
        f"no such folder"
    )


# --- real 8-bit and 4-bit training on CUDA (CPU: test_quantised_cpu.py) -----------------

_NO_GPU = not (torch.cuda.is_available() and methods._bitsandbytes_installed())


@pytest.mark.gpu
@pytest.mark.skipif(_NO_GPU, reason="needs a CUDA GPU and bitsandbytes")
@pytest.mark.parametrize("bits", [8, 4])
def test_quantised_base_with_lora_trains_on_gpu(
    bits: int, tiny_whisper_dir: Path, tone_manifest: Path, tmp_path: Path
) -> None:
    snaps = _Snapshots()
    result = train(
        ModelConfig(model=str(tiny_whisper_dir), use_8bit=bits == 8, use_4bit=bits == 4),
        DataConfig(),
        TrainConfig(
            output_dir=str(tmp_path / "run"),
            train_manifest=str(tone_manifest),
            eval_manifest=str(tone_manifest),
            per_device_train_batch_size=6,
            per_device_eval_batch_size=6,
            learning_rate=1e-2,
            max_steps=3,
            gradient_checkpointing=True,
            optim="adamw_8bit",
            generation_max_length=8,
            report_to="none",
        ),
        callbacks=(snaps.callback,),
    )
    assert result.global_step == 3 and result.train_loss == result.train_loss  # not NaN
    assert {k for k in snaps.moved() if "lora_B" in k}
    assert (result.final_dir / "adapter_model.safetensors").is_file()
    # The merged model is a plain full-precision one.
    from fitwhisper.models.merge import merge_adapter

    merged = merge_adapter(result.final_dir, tmp_path / "merged")
    config = json.loads((merged.out / "config.json").read_text())
    assert "quantization_config" not in config


# --- slow: LoRA on real Mandarin --------------------------------------------------------


@pytest.mark.slow
def test_lora_lowers_cer_on_real_mandarin(mandarin_lora, tmp_path: Path) -> None:
    """offline/base writes Mandarin in a mix of scripts; 4 LoRA steps on 16 clips with
    Traditional references must lower CER on 8 held-out clips of the same speaker.

    Adapters go in the decoder only (--freeze_encoder), so the encoder runs forward only:
    the encoder's adapters are exercised by the fast test; here CPU time decides. The run is
    shared (tests/shared_runs.py) with tests/test_mandarin_finetune.py, which checks its
    script and its forgetting guard.
    """
    from transformers import WhisperForConditionalGeneration

    from fitwhisper.data.features import prefix_ids
    from fitwhisper.models.merge import merge_adapter
    from fitwhisper.models.resolve import load_model, load_processor, resolve_model

    result, held_out = mandarin_lora.result, mandarin_lora.held_out
    before, after = mandarin_lora.zero_shot["cer"], result.eval_metrics["cer"]
    print(f"held-out CER {before:.3f} -> {after:.3f}")
    assert after < before - 0.1

    # The adapter names its base as the user did, and is a small fraction of it.
    adapter_cfg = json.loads((result.final_dir / "adapter_config.json").read_text())
    assert adapter_cfg["base_model_name_or_path"] == "offline/base"
    base_dir = Path(resolve_model("offline/base").path_or_id)
    adapter_bytes = (result.final_dir / "adapter_model.safetensors").stat().st_size
    assert adapter_bytes < 0.1 * (base_dir / "model.safetensors").stat().st_size

    # Merged and adapter models give the same logits on real speech.
    merged_dir = merge_adapter(result.output_dir, tmp_path / "merged").out
    processor = load_processor(result.final_dir)
    features = _features(processor, Path(json.loads(held_out.read_text().splitlines()[0])["audio"]))
    tok = processor.tokenizer
    text_ids = tok("當地四家", add_special_tokens=False).input_ids
    ids = torch.tensor([prefix_ids(tok, "zh", "transcribe") + text_ids])
    want = _logits(load_model(result.final_dir), features, ids)
    got = _logits(WhisperForConditionalGeneration.from_pretrained(merged_dir), features, ids)
    print(f"max |merged - adapter| logit difference {(got - want).abs().max():.2e}")
    assert torch.allclose(got, want, atol=LOGITS_ATOL_REAL, rtol=0)
