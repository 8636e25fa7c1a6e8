"""Several GPUs and no launcher: one GPU, and the torchrun command, instead of DataParallel.
No machine here has several GPUs; Trainer's decision rests on `args.n_gpu`, which is what
is checked (TrainingArguments sets it from torch.cuda.device_count())."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from fitwhisper.train.trainer import one_gpu_without_launcher


def _args(gpus: int) -> SimpleNamespace:
    args = SimpleNamespace(_n_gpu=gpus)
    args.n_gpu = gpus  # TrainingArguments.n_gpu reads _n_gpu; set once, as Trainer reads it
    return args


def test_four_gpus_without_a_launcher_train_on_one_and_say_how_to_use_all(
    monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    args = _args(4)
    with caplog.at_level(logging.WARNING, logger="fitwhisper"):
        one_gpu_without_launcher(args)
    assert args._n_gpu == 1
    assert "torchrun --nproc_per_node 4 -m fitwhisper train" in caplog.text


@pytest.mark.parametrize(("gpus", "world"), [(1, "1"), (4, "4"), (0, "1")])
def test_one_gpu_or_a_launcher_is_left_alone(monkeypatch, caplog, gpus, world) -> None:
    monkeypatch.setenv("WORLD_SIZE", world)
    args = _args(gpus)
    one_gpu_without_launcher(args)
    assert args._n_gpu == gpus and not caplog.text


def test_real_training_arguments_read_the_field_it_sets() -> None:
    """The private field is the one TrainingArguments.n_gpu reads (as Trainer itself uses
    it for model-parallel models): a transformers upgrade that renames it fails here."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to="none")
    args._n_gpu = 3
    assert args.n_gpu == 3


@pytest.mark.parametrize("skips_layers", [False, True])
def test_ddp_searches_for_unused_parameters_only_when_layerdrop_skips_layers(
    skips_layers, tmp_path
) -> None:
    """Trainer would have DDP search for unused parameters after every backward of a
    PeftModel, and of a full model without checkpointing (on an H200 DDP then warned that it
    found none). Every trainable parameter is used unless LayerDrop skips a layer;
    test_multiprocess.py runs full and LoRA on two processes with the search off."""
    from fitwhisper.config import TrainConfig
    from fitwhisper.train.trainer import training_arguments

    cfg = TrainConfig(output_dir=str(tmp_path / "run"))
    args = training_arguments(
        cfg, "fp32", optim=cfg.optim, has_eval=False, skips_layers=skips_layers
    )
    assert args.ddp_find_unused_parameters is skips_layers


def test_a_finished_run_leaves_its_process_group() -> None:
    """`fitwhisper train` leaves the group on every rank when it is done (NCCL warned at
    exit, on an H200, that an undestroyed group may leak resources)."""
    import torch.distributed as dist

    from fitwhisper.train import ranks

    if dist.is_initialized():
        pytest.skip("a process group of an earlier test is still open in this process")
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    ranks.finish()
    assert not dist.is_initialized()
    ranks.finish()  # no group: nothing to do


@pytest.mark.slow
def test_a_process_ending_while_a_gloo_thread_works_exits_cleanly() -> None:
    """The interpreter's shutdown aborted such a process ("terminate called without an
    active exception", exit -6) in about 1 run of 3 here, and torchrun failed the run;
    ending it with ranks.end_process skips that shutdown."""
    from tests.train.test_multiprocess import HERE, _run, _torchrun

    done = _run(_torchrun(str(HERE / "busy_at_exit.py")), hang_after_s=120)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "terminate called" not in done.stdout


def test_end_process_without_a_launcher_returns_the_code(monkeypatch) -> None:
    from fitwhisper.train import ranks

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert ranks.end_process(3) == 3
