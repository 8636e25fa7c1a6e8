"""The run plan (train/run_plan.py): every "auto" of a run answered once, recorded in the
run folder, and read by what follows; above all, the metric the Trainer selects the best
checkpoint on is the one it logs."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.conftest import write_tone

from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
from fitwhisper.errors import ConfigError
from fitwhisper.precision import run_precision
from fitwhisper.train.run_plan import decide, resolve_options


def _plan(eval_languages: list[str | None], *, fsdp=False, cuda=False, **train):
    model_cfg, train_cfg, choices = resolve_options(
        ModelConfig(model="offline/base"), DataConfig(), TrainConfig(**train), explicit=set()
    )
    rows = [SimpleNamespace(language=lang) for lang in eval_languages]
    return decide(choices, model_cfg, train_cfg, eval_rows=rows, world_size=1, fsdp=fsdp, cuda=cuda)


def test_rows_tagged_zh_without_language_are_scored_and_selected_by_cer() -> None:
    plan = _plan(["zh", "zh"], load_best_model_at_end=True)
    assert (plan.scoring_language, plan.metric, plan.best_metric) == ("zh", "cer", "cer")
    assert plan.normalizer == "chinese"
    assert "zh" in plan.why["metric"]


def test_untagged_english_rows_and_no_best_model() -> None:
    plan = _plan([None])
    assert (plan.metric, plan.best_metric, plan.normalizer) == ("wer", None, "whisper_english")
    assert plan.encoder_input == "mixed"
    assert plan.precision == run_precision(None, None)  # the machine's: fp32 without CUDA
    assert plan.method == "full" and plan.sharding == "none"


def test_a_best_model_metric_other_than_the_rows_metric_is_refused() -> None:
    with pytest.raises(ConfigError) as e:
        _plan(["zh"], load_best_model_at_end=True, metric_for_best_model="wer")
    assert "scored by cer (language zh)" in e.value.message
    assert _plan(["zh"], early_stopping_patience=2, metric_for_best_model="loss").best_metric == (
        "loss"
    )


def test_adamw_on_the_cpu_takes_torchs_fused_kernel_and_nothing_else_changes() -> None:
    plan = _plan([None])
    assert plan.optimizer == "adamw_torch_fused" and "CPU" in plan.why["optimizer"]
    # On a GPU torch already takes its foreach kernels; DeepSpeed and FSDP own the
    # optimizer; other optimizers are what was asked.
    assert _plan([None], cuda=True).optimizer == "adamw_torch"
    assert _plan([None], fsdp=True).optimizer == "adamw_torch"
    assert _plan([None], deepspeed="zero2").optimizer == "adamw_torch"
    assert _plan([None], optim="adafactor").optimizer == "adafactor"
    assert "optimizer" not in _plan([None], cuda=True).why


def test_the_options_decide_encoder_input_and_method_with_reasons() -> None:
    _, train_cfg, choices = resolve_options(
        ModelConfig(model="offline/base", use_4bit=True, freeze_encoder=True),
        DataConfig(),
        TrainConfig(),
        explicit=set(),
    )
    assert choices.method == "4bit" and choices.encoder_input == "full"
    assert train_cfg.encoder_input == "full"
    assert "--freeze_encoder" in choices.why["encoder_input"]
    assert choices.why["method"] == "--use_4bit (the same as --method 4bit-lora)"
    # `method` and the earlier flags agree from here on: the record holds both.
    model_cfg, _, _ = resolve_options(
        ModelConfig(model="offline/base", use_8bit=True), DataConfig(), TrainConfig(), set()
    )
    assert (model_cfg.method, model_cfg.use_lora, model_cfg.use_8bit) == ("8bit-lora", True, True)


def test_a_run_on_zh_rows_without_language_selects_on_the_cer_it_logs(
    tiny_multilingual_dir: Path, tmp_path: Path
) -> None:
    """Before the plan, the Trainer looked for eval_wer (from --language, unset) while the
    held-out clips were scored by CER (their own column): the run failed at its first
    evaluation."""
    import torch

    from fitwhisper.cli import main

    rows = []
    for i, text in enumerate(["你好", "謝謝你", "再見了", "早安"]):
        wav = write_tone(tmp_path / f"{i}.wav", 1.0 + 0.2 * i, freq=300 + 50 * i)
        rows.append({"audio": str(wav), "text": text, "language": "zh"})
    manifest = tmp_path / "zh.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "run"
    flags = {
        "--model": tiny_multilingual_dir,
        "--train_manifest": manifest,
        "--eval_manifest": manifest,
        "--output_dir": out,
        "--max_steps": 2,
        "--per_device_train_batch_size": 2,
        "--eval_strategy": "steps",
        "--eval_steps": 1,
        "--save_strategy": "steps",
        "--save_steps": 1,
        "--generation_max_length": 6,
        "--report_to": "none",
    }
    args = [str(x) for pair in flags.items() for x in pair]
    code = main(["train", *args, "--load_best_model_at_end", "--no-score_before", "-q"])
    assert code in (0, None)
    plan = json.loads((out / "run_plan.json").read_text())
    assert (plan["scoring_language"], plan["metric"], plan["best_metric"]) == ("zh", "cer", "cer")
    state = json.loads((out / "trainer_state.json").read_text())
    assert sum("eval_cer" in e for e in state["log_history"]) == 2
    assert not any("eval_wer" in e for e in state["log_history"])
    assert state["best_model_checkpoint"] is not None
    assert json.loads((out / "eval" / "metrics.json").read_text())["metric"] == "cer"
    # The optimizer the plan chose is the one that trained (its checkpoint): on the CPU,
    # the fused kernel.
    cpu = not torch.cuda.is_available()
    assert plan["optimizer"] == ("adamw_torch_fused" if cpu else "adamw_torch")
    saved = torch.load(out / "checkpoint-2" / "optimizer.pt", weights_only=True)
    assert bool(saved["param_groups"][0]["fused"]) is cpu


def _lr(model_cfg: ModelConfig, train_cfg: TrainConfig, explicit: set[str] | None):
    _, resolved, choices = resolve_options(model_cfg, DataConfig(), train_cfg, explicit)
    return resolved.learning_rate, choices.why["learning_rate"]


def test_a_learning_rate_left_out_is_the_methods_and_one_given_always_wins() -> None:
    base = "offline/base"
    lr, why = _lr(ModelConfig(model=base, use_lora=True), TrainConfig(), set())
    assert lr == 1e-3 and "LoRA's default" in why
    # A quantised base trains LoRA adapters: LoRA's recipe.
    assert _lr(ModelConfig(model=base, use_8bit=True), TrainConfig(), set())[0] == 1e-3
    lr, why = _lr(ModelConfig(model=base), TrainConfig(), set())
    assert lr == 1e-5 and "full fine-tuning" in why
    # Given on the command line or in a config file, even full fine-tuning's value: kept.
    lr, why = _lr(ModelConfig(model=base, use_lora=True), TrainConfig(), {"learning_rate"})
    assert (lr, why) == (1e-5, "--learning_rate as given")
    # A library call (no record of what was given): a value other than the default is given.
    assert (
        _lr(ModelConfig(model=base, use_lora=True), TrainConfig(learning_rate=2e-4), None)[0]
        == 2e-4
    )
    assert _lr(ModelConfig(model=base, use_lora=True), TrainConfig(), None)[0] == 1e-3


def test_on_the_cpu_training_uses_deterministic_kernels_so_the_position_gradient_repeats() -> None:
    """The decoder's position embedding is indexed by the same positions in every clip; on
    the CPU its gradient (an accumulating index_put) is summed in a thread-dependent order,
    so two runs of tiny.en drifted apart from the second step (2 threads, 71 to 117 distinct
    gradients in 200 repeats of this block). The plan asks for torch's deterministic
    kernels on the CPU, only while training, and the process's setting comes back after."""
    import hashlib

    import torch
    import torch.utils.deterministic as det
    from transformers.models.whisper.modeling_whisper import WhisperPositionalEmbedding

    from fitwhisper.train.run import deterministic_kernels

    plan = _plan([None])
    assert plan.deterministic and plan.why["deterministic"].startswith("CPU")
    assert not _plan([None], cuda=True).deterministic

    torch.manual_seed(0)
    table = WhisperPositionalEmbedding(448, 384)
    upstream = torch.randn(8, 20, 384)
    positions = torch.arange(20).expand(8, 20)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = set()
    try:
        with deterministic_kernels(plan.deterministic):
            assert torch.are_deterministic_algorithms_enabled()
            for _ in range(40):
                table.weight.grad = None
                table(positions[:, :1], position_ids=positions).backward(upstream)
                seen.add(hashlib.sha256(table.weight.grad.numpy().tobytes()).hexdigest())
    finally:
        torch.set_num_threads(threads)
    assert len(seen) == 1
    assert not torch.are_deterministic_algorithms_enabled() and det.fill_uninitialized_memory


def test_a_small_set_trains_more_epochs_unless_epochs_or_steps_are_given() -> None:
    """recipes.with_epochs_for_data: at least MIN_OPTIMIZER_STEPS optimizer steps in whole
    epochs, at most MAX_EPOCHS; --num_train_epochs or --max_steps given always win."""
    from fitwhisper.recipes import MAX_EPOCHS, MIN_OPTIMIZER_STEPS
    from fitwhisper.train.run_plan import with_epochs_for_data

    def epochs(rows: int, processes: int = 1, given=frozenset(), **train):
        _, cfg, choices = resolve_options(
            ModelConfig(model="offline/base"),
            DataConfig(),
            TrainConfig(**train),
            None if given is None else set(given),
        )
        cfg, choices = with_epochs_for_data(choices, cfg, rows, processes)
        return cfg.num_train_epochs, choices.why["num_train_epochs"]

    assert MIN_OPTIMIZER_STEPS == 128
    # 88 clips at batch 8: 11 steps an epoch, 33 in the default 3 epochs.
    n, why = epochs(88, per_device_train_batch_size=8)
    assert n == 12 and why.startswith("12, not 3: 88 rows / effective batch 8 = 11 step(s)")
    # 337 clips: 43 an epoch, 129 in 3: the default holds.
    n, why = epochs(337, per_device_train_batch_size=8)
    assert n == 3 and "129 in all" in why
    # Two processes (or twice the accumulation) halve the steps of an epoch.
    assert epochs(337, 2, per_device_train_batch_size=8)[0] == 6
    assert epochs(337, per_device_train_batch_size=8, gradient_accumulation_steps=2)[0] == 6
    assert epochs(8, per_device_train_batch_size=8)[0] == MAX_EPOCHS
    # Given, even at the default value, or a step count: kept.
    assert epochs(88, given={"num_train_epochs"}) == (3, "--num_train_epochs as given")
    assert epochs(88, max_steps=40) == (3, "--max_steps as given")
    # A library call: a value other than the default is given.
    assert epochs(88, given=None, num_train_epochs=2)[0] == 2


def test_continuing_a_mandarin_fine_tune_keeps_its_language_and_its_cer(
    tiny_multilingual_dir: Path, tmp_path: Path
) -> None:
    """Without --language, `train` takes the language a fine-tune on disk recorded, by the
    rule `evaluate` and `transcribe` follow: it was cleared, and the held-out clips (no
    language column) were scored by WER."""
    import shutil

    from transformers import GenerationConfig

    from fitwhisper.cli import main

    model = tmp_path / "zh-fine-tune"
    shutil.copytree(tiny_multilingual_dir, model)
    gen = GenerationConfig.from_pretrained(model)
    gen.language, gen.task = "zh", "transcribe"
    gen.save_pretrained(model)
    rows = []
    for i, text in enumerate(["你好", "謝謝你", "再見了", "早安"]):
        wav = write_tone(tmp_path / f"{i}.wav", 1.0 + 0.2 * i, freq=300 + 50 * i)
        rows.append({"audio": str(wav), "text": text})
    manifest = tmp_path / "zh.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    out = tmp_path / "run"
    argv = [
        "train", "--model", str(model), "--train_manifest", str(manifest),
        "--eval_manifest", str(manifest), "--output_dir", str(out), "--max_steps", "2",
        "--per_device_train_batch_size", "2", "--generation_max_length", "6",
        "--report_to", "none", "--no-score_before", "-q",
    ]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads((out / "run_plan.json").read_text())
    assert (plan["language"], plan["scoring_language"], plan["metric"]) == ("zh", "zh", "cer")
    assert "recorded in the model's generation config" in plan["why"]["language"]
    assert GenerationConfig.from_pretrained(out / "final").language == "zh"
