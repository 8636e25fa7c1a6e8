"""Per-GPU plans of data-parallel runs: DDP and DeepSpeed ZeRO-2/3 (memory/sharded.py).

The DeepSpeed reference is its own estimators, `estimate_zero2_model_states_mem_needs`
(deepspeed/runtime/zero/stage_1_and_2.py) and `estimate_zero3_model_states_mem_needs`
(deepspeed/runtime/zero/stage3.py), DeepSpeed 0.19.8:

    ZeRO-2, no offload:  gpu = 2 * P + int(18 * P / world)
        "2 = params_16bit, 18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit
         + 8_optimizer_states_32bit(momentum and variance)"
    ZeRO-3, no offload:  gpu = 4 * largest_layer + int(18 * P / world)
    ZeRO-3, optimizer and parameters offloaded (zero3_offload.json), zero_init=False (the
    model loads whole in every rank before DeepSpeed takes it; no zero.Init):
                         gpu = 4 * largest_layer
                         cpu = P * max(4 * gpus_per_node, 18 / num_nodes)
                               * additional_buffer_factor (1.5)
    Every stage without offload, zero_init=False: cpu = P * 4 * gpus_per_node * 1.5

fitwhisper differs on purpose in two places, both checked below: frozen weights (not counted
by the estimators, which assume every parameter trains) stay 16-bit on every GPU under
ZeRO-2 and are sharded under ZeRO-3; and ZeRO-3 keeps its 16-bit gradient partition
(stage3.py's grad_partitions_flat_buffer) beside the fp32 gradient at the step, 2 bytes per
trainable parameter / world more than the estimator.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from fitwhisper.cli import main
from fitwhisper.errors import ConfigError
from fitwhisper.memory.predict import GIB, MemoryPrediction, MemoryRequest, predict_memory
from fitwhisper.memory.search import search
from fitwhisper.memory.sharded import shard

LARGE_V3 = "openai/whisper-large-v3"
# large-v3's largest module is its token embedding (tied to proj_out): 51866 tokens x 1280.
LARGE_V3_LARGEST_LAYER = 51866 * 1280


def _known(params: int) -> MemoryPrediction:
    """A hand-written one-GPU breakdown of `params` trainable parameters under torch bf16
    mixed precision: fp32 weights and gradients, two fp32 AdamW states."""
    request = MemoryRequest(model=LARGE_V3, precision="bf16")
    w, g, o, act = 4 * params, 4 * params, 8 * params, GIB
    return MemoryPrediction(
        request=request, params=params, trainable_params=params, weights_bytes=w,
        gradients_bytes=g, optimizer_bytes=o, activations_bytes=act, optimizer_step_bytes=g,
        peak_tensor_bytes=w + o + g + act, peak_phase="backward", cuda_context_bytes=GIB // 2,
        allocator_slack_bytes=0, total_bytes=w + o + g + act + GIB // 2,
        attn_implementation="sdpa", encoder_frames=3000, label_tokens=448, trace_seconds=0.0,
    )  # fmt: skip


def test_zero_model_states_equal_deepspeeds_documented_formulas_for_a_billion_params():
    """The estimators' values for P = 1e9 on 8 GPUs, written out from the formulas above."""
    p = 10**9
    zero2 = shard(_known(p), 8, 1, "zero2")
    assert zero2.model_states_bytes == 2 * p + 18 * p // 8 == 4_250_000_000
    zero3 = shard(_known(p), 8, 1, "zero3")
    estimator = 4 * LARGE_V3_LARGEST_LAYER + 18 * p // 8  # 2_515_564_480
    assert zero3.model_states_bytes + zero3.gathered_bytes == estimator + 2 * p // 8
    # CPU RAM per node: the ranks' fp32 load copies (4P each) or the offloaded states (18P
    # over the nodes), whichever is larger, x1.5.
    assert zero2.cpu_bytes_per_node == zero3.cpu_bytes_per_node == int(p * 4 * 8 * 1.5)
    for gpus, nodes, per_p in ((8, 1, 4 * 8), (4, 2, 4 * 4), (2, 1, 18), (1, 2, 18 / 2)):
        offload = shard(_known(p), gpus, nodes, "zero3_offload")
        assert offload.cpu_bytes_per_node == int(p * per_p * 1.5), (gpus, nodes)
        assert offload.weights_bytes + offload.gathered_bytes == 4 * LARGE_V3_LARGEST_LAYER
        assert offload.model_states_bytes == 0  # nothing but the gathered layer on the GPU
    fp32 = _known(p)
    fp32 = dataclasses.replace(fp32, request=dataclasses.replace(fp32.request, precision="fp32"))
    # fp32 training: the offloaded weights are fp32 (4 + 16 bytes per parameter)
    assert shard(fp32, 2, 1, "zero3_offload").cpu_bytes_per_node == int(p * 20 * 1.5)


def test_zero3_offload_plans_the_shipped_config():
    """The planner's zero3_offload is the config that ships: weights and optimizer on CPU."""
    from fitwhisper.memory.sharded import load_config

    zero = load_config("zero3_offload")["zero_optimization"]
    assert zero["offload_param"]["device"] == zero["offload_optimizer"]["device"] == "cpu"
    offload = shard(_known(10**9), 8, 1, "zero3_offload")
    assert set(offload.offloaded) == {"weights", "gradients", "optimizer"}
    table = offload.format_table()
    assert "  weights                0.00  bf16, offloaded to CPU" in table
    assert "DeepSpeed ZeRO-3, weights and optimizer offloaded to CPU:" in table
    assert (
        "  CPU RAM per node      44.70  the larger of its 8 ranks' model load copies and "
        "the offloaded states, x1.5 DeepSpeed's buffer factor"
    ) in table


@pytest.mark.deepspeed
def test_zero_model_states_match_deepspeeds_estimators_on_large_v3():
    """The installed DeepSpeed's estimators on large-v3's exact counts."""
    import deepspeed.runtime.zero.stage3 as z3
    import deepspeed.runtime.zero.stage_1_and_2 as z2

    single = predict_memory(
        MemoryRequest(model=LARGE_V3, precision="bf16", per_device_train_batch_size=1,
                      max_label_tokens=16)
    )  # fmt: skip
    trainable, frozen = single.trainable_params, single.params - single.trainable_params
    assert frozen == 1500 * 1280  # the encoder's fixed sinusoid table
    n = 8
    rel = 1e-3  # tensors are rounded to the allocator's 512-byte blocks
    _, gpu = z2.estimate_zero2_model_states_mem_needs(trainable, n, 1, cpu_offload=False)
    zero2 = shard(single, n, 1, "zero2")
    assert zero2.model_states_bytes == pytest.approx(gpu + 2 * frozen, rel=rel)

    _, gpu, largest = z3.estimate_zero3_model_states_mem_needs(
        trainable, LARGE_V3_LARGEST_LAYER, n, 1, cpu_offload=False
    )
    zero3 = shard(single, n, 1, "zero3")
    assert zero3.gathered_bytes == largest
    extra = 2 * trainable // n + 2 * frozen // n  # 16-bit gradient partition, frozen shard
    assert zero3.model_states_bytes + zero3.gathered_bytes == pytest.approx(gpu + extra, rel=rel)

    params = single.params
    cpu, _ = z2.estimate_zero2_model_states_mem_needs(params, n, 1, cpu_offload=False)
    assert zero2.cpu_bytes_per_node == zero3.cpu_bytes_per_node == pytest.approx(cpu, rel=rel)
    for gpus, nodes in ((8, 1), (4, 2), (2, 1)):
        # The estimator counts every parameter as trained: 18 bytes offloaded per parameter;
        # the frozen sinusoid table offloads its 16-bit weights only (2 bytes).
        cpu, gpu, _ = z3.estimate_zero3_model_states_mem_needs(
            params, LARGE_V3_LARGEST_LAYER, gpus, nodes, cpu_offload=True,
            cpu_offload_params=True, zero_init=False,
        )  # fmt: skip
        offload = shard(single, gpus, nodes, "zero3_offload")
        if gpus * nodes < 4.5:  # the offloaded states, not the load copies, decide
            cpu -= int(16 * frozen / nodes * 1.5)
        assert offload.cpu_bytes_per_node == pytest.approx(cpu, rel=rel)
        assert offload.weights_bytes + offload.gathered_bytes == gpu


@pytest.fixture(scope="module")
def small(small_config_dir) -> MemoryPrediction:
    return predict_memory(
        MemoryRequest(model=str(small_config_dir), precision="bf16", max_label_tokens=16,
                      per_device_train_batch_size=2)
    )  # fmt: skip


def test_one_gpu_is_the_single_process_prediction_exactly(small, small_config_dir, capsys):
    one = shard(small, 1, 1)
    for name in ("weights", "gradients", "optimizer", "activations", "optimizer_step",
                 "peak_tensor", "cuda_context", "allocator_slack", "total"):  # fmt: skip
        assert getattr(one, f"{name}_bytes") == getattr(small, f"{name}_bytes"), name
    assert one.format_table() == small.format_table()
    argv = ["plan", "--model", str(small_config_dir), "--max_label_tokens", "16", "--bf16"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--num_gpus", "1", "--num_nodes", "1"]) == 0
    assert capsys.readouterr().out == plain


def test_zero3_weights_shrink_with_the_world(small):
    zero2 = shard(small, 2, 1, "zero2")
    for n in (2, 4, 8):
        zero3 = shard(small, n, 1, "zero3")
        assert zero3.weights_bytes == pytest.approx(zero2.weights_bytes / n, rel=1e-3)
        assert zero3.gradients_bytes == pytest.approx(zero2.gradients_bytes * 2 / n, rel=1e-3)
        assert zero3.total_bytes < small.total_bytes
    # ZeRO-2 keeps every weight on every GPU: only gradients and states shrink.
    assert shard(small, 8, 1, "zero2").weights_bytes == zero2.weights_bytes


def test_ddp_holds_everything_and_a_bucket_copy_of_the_gradients(small):
    ddp = shard(small, 4, 1)
    assert ddp.strategy == "ddp"
    assert (ddp.weights_bytes, ddp.gradients_bytes, ddp.optimizer_bytes) == (
        small.weights_bytes, small.gradients_bytes, small.optimizer_bytes)  # fmt: skip
    # torch: gradient_as_bucket_view=True "saves the total gradients size"; it is off.
    assert ddp.peak_tensor_bytes == small.peak_tensor_bytes + small.gradients_bytes


def test_zero2_does_not_shard_frozen_weights_zero3_does(small_config_dir):
    lora = predict_memory(
        MemoryRequest(model=str(small_config_dir), precision="bf16", max_label_tokens=16,
                      training_method="lora")
    )  # fmt: skip
    two, eight = shard(lora, 2, 1, "zero2"), shard(lora, 8, 1, "zero2")
    assert two.weights_bytes == eight.weights_bytes == pytest.approx(lora.weights_bytes / 2)
    assert eight.gradients_bytes < two.gradients_bytes
    assert shard(lora, 8, 1, "zero3").weights_bytes == pytest.approx(
        lora.weights_bytes / 16, rel=1e-3
    )


def test_acceptance_plan_prints_the_per_gpu_breakdown_offline(monkeypatch, tmp_path, capsys):
    import fitwhisper.models.resolve as resolve

    def no_download(*a, **k):
        raise AssertionError("the planner tried to resolve a model")

    monkeypatch.setattr(resolve, "resolve_model", no_download)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    argv = ["plan", "--model", LARGE_V3, "--num_gpus", "8", "--deepspeed", "zero3"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "per GPU of 8 (8 GPUs), DeepSpeed ZeRO-3:" in out
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        for name in ("weights", "gradients", "optimizer states", "activations",
                     "communication", "total"):  # fmt: skip
            if line.startswith(f"  {name} "):
                rows[name] = (float(parts[len(name.split())]), line)
    assert set(rows) == {"weights", "gradients", "optimizer states", "activations",
                         "communication", "total"}  # fmt: skip
    for name in ("weights", "gradients", "optimizer states"):
        assert "sharded 1/8" in rows[name][1]
    assert "gathered largest layer (embed_tokens, 66.4M params)" in rows["communication"][1]
    single = float(out.split("one GPU without sharding would need ")[1].split()[0])
    assert rows["total"][0] < single
    assert "\n  assumptions: ZeRO-3 gathers one layer at a time" in out
    assert "CUDA context and allocator slack as for one GPU" in out
    assert "launch: torchrun --nproc_per_node 8 -m fitwhisper train ... --deepspeed zero3" in out
    assert not (tmp_path / "empty-hf").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--num_gpus", "0"], "--num_gpus must be in [1, 1024]"),
        (["--num_gpus", "2", "--num_nodes", "-1"], "must be at least 1"),
        (["--deepspeed", "zero3"], "with 1 GPU in all there is nothing to shard over"),
        (["--num_gpus", "2", "--deepspeed", "zero2", "--use_4bit"], "8-bit/4-bit"),
        (["--num_gpus", "2", "--deepspeed", "zero3_offload", "--optim", "adafactor"],
         "CPU Adam"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_without_a_traceback(small_config_dir, capsys, flags, message):
    assert main(["plan", "--model", str(small_config_dir), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert "\nhint: " in err


@pytest.mark.parametrize("stage", ["zero3", "zero3_offload"])
def test_a_quantised_base_under_zero3_is_refused_as_train_refuses_it(
    small_config_dir, capsys, stage
):
    """plan and train ask the same question (the method's `weight_sharding_refusal`,
    fitwhisper/method.py), so they give the same answer (train's side:
    tests/train/test_deepspeed.py)."""
    argv = ["plan", "--model", str(small_config_dir), "--num_gpus", "2", "--deepspeed", stage]
    assert main([*argv, "--use_8bit"]) == 1
    assert capsys.readouterr().err == (
        f"error: --use_8bit with --deepspeed {stage}: ZeRO-3 splits every weight across the "
        "processes, and fitwhisper's 8-bit/4-bit base (bitsandbytes, packed in integer "
        "tensors) is not supported split that way\n\n"
        "hint: train the quantised base with plain DDP (torchrun without --deepspeed), or "
        "with --deepspeed zero2 (weights whole on every GPU), or drop --use_8bit and shard "
        f"LoRA (--use_lora) or a full fine-tune with --deepspeed {stage}\n"
    )
    assert main([*argv, "--use_lora"]) == 0


def test_an_unknown_stage_is_refused(small_config_dir, capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", str(small_config_dir), "--num_gpus", "2", "--deepspeed", "z9"])
    assert e.value.code != 0
    assert "zero3_offload" in capsys.readouterr().err


def test_search_turns_to_zero_when_ddp_does_not_fit(small):
    base = dataclasses.replace(small.request, per_device_train_batch_size=1)
    kw = dict(effective_batch_size=8, margin=0.0, methods=("full",), optimizers=("adamw_torch",))
    ddp = search(base, 64 * GIB, num_gpus=4, **kw)
    assert ddp.recommended.strategy == "ddp"  # plenty of memory: plain DDP first
    smallest_ddp = min(c.predicted_bytes for c in (ddp.recommended, *ddp.rejected)
                       if c.strategy == "ddp")  # fmt: skip
    zero3 = shard(predict_memory(dataclasses.replace(base, gradient_checkpointing=True)),
                  4, 1, "zero3")  # fmt: skip
    assert zero3.total_bytes < smallest_ddp
    plan = search(base, smallest_ddp - 1, num_gpus=4, **kw)
    assert plan.recommended.strategy in ("zero2", "zero3")
    assert plan.recommended.predicted_bytes <= smallest_ddp - 1
    assert plan.train_command().startswith("torchrun --nproc_per_node 4 -m fitwhisper train ")
    assert plan.train_command().endswith(f"--deepspeed {plan.recommended.strategy}")
    assert any("DDP does not fit" in n for n in plan.notes)
    assert plan.recommended.per_device_train_batch_size * (
        plan.recommended.gradient_accumulation_steps
    ) * 4 == 8  # fmt: skip
    with pytest.raises(ConfigError, match="not a whole number of clips per GPU on 3 GPUs"):
        search(base, 64 * GIB, num_gpus=3, **kw)


def test_plan_fit_on_several_gpus_says_how_to_launch(small_config_dir, tmp_path, capsys):
    out_file = tmp_path / "plan.json"
    argv = ["plan", "--model", str(small_config_dir), "--max_label_tokens", "16", "--bf16",
            "--num_gpus", "2", "--gpu_memory", "64GB", "--allow_methods", "full",
            "--effective_batch_size", "4", "--output", str(out_file)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"recommended for {small_config_dir} on 2 GPUs of 64.00 GiB")
    assert "  effective batch = 2 x 1 x 2 GPUs = 4\n" in out
    assert "  train with: torchrun --nproc_per_node 2 -m fitwhisper train " in out
    assert "per GPU of 2 (2 GPUs), DDP:" in out
    assert f"torchrun --nproc_per_node 2 -m fitwhisper train --plan {out_file} ..." in out
    settings = json.loads(out_file.read_text())["settings"]
    assert (settings["num_gpus"], settings["num_nodes"], settings["deepspeed"]) == (2, 1, None)


def test_the_reduce_buckets_planned_are_the_shipped_configs():
    """ZeRO-2 allocates two buffers of reduce_bucket_size (2e8 in zero2.json) with
    overlap_comm, ZeRO-3 one of d_model**2 (HF's "auto"), in the 16-bit dtype under bf16."""
    p = 10**9
    zero2 = shard(_known(p), 8, 1, "zero2")
    assert zero2.communication_bytes == 2 * 200_000_000 * 2
    assert zero2.communication == "2 reduce buckets of 200M elements"
    zero3 = shard(_known(p), 8, 1, "zero3")
    assert zero3.communication_bytes - zero3.gathered_bytes == 1280 * 1280 * 2
