"""`tune` on a GPU that runs out of memory outside the training step: an OOM in a trial's
first optimizer step, its evaluation or its checkpoint save (torch.OutOfMemoryError,
injected here on the CPU) prunes that trial, its model is let go before the next one, and
the study goes on; `tune --deepspeed` is refused before any trial."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from tests.tune.test_tune import _args, _study, manifests  # noqa: F401 (a fixture)

from fitwhisper.errors import ConfigError, FitWhisperError
from fitwhisper.tune.trials import out_of_memory

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.slow
def test_an_oom_outside_the_training_step_prunes_the_trial_and_the_study_goes_on(
    tiny_whisper_dir,
    manifests,  # noqa: F811 (test_tune's fixture)
    tmp_path,
    monkeypatch,
) -> None:
    import accelerate.optimizer
    import transformers

    from fitwhisper.cli import main
    from fitwhisper.train import setup
    from fitwhisper.tune.trials import Objective

    # Trial by trial (this process's calls): where the GPU runs out.
    faults = {1: "optimizer step", 2: "evaluation", 3: "save"}
    now: dict = {"fault": None}
    models: list[weakref.ref] = []
    alive_at_start: list[int] = []

    call = Objective.__call__

    def trial(self, t):
        gc.collect()
        alive_at_start.append(sum(ref() is not None for ref in models))
        now["fault"] = faults.get(self.calls + 1)
        return call(self, t)

    def failing(where: str, original):
        def run(*args, **kwargs):
            if now["fault"] == where:
                now["fault"] = None
                raise torch.OutOfMemoryError(OOM)
            return original(*args, **kwargs)

        return run

    load = setup.model

    def noting(*args, **kwargs):
        loaded, language = load(*args, **kwargs)
        models.append(weakref.ref(loaded))
        return loaded, language

    monkeypatch.setattr(Objective, "__call__", trial)
    monkeypatch.setattr(setup, "model", noting)
    optimizer = accelerate.optimizer.AcceleratedOptimizer
    monkeypatch.setattr(optimizer, "step", failing("optimizer step", optimizer.step))
    trainer = transformers.Seq2SeqTrainer
    monkeypatch.setattr(trainer, "evaluate", failing("evaluation", trainer.evaluate))
    base = transformers.Trainer
    monkeypatch.setattr(base, "_save_checkpoint", failing("save", base._save_checkpoint))

    out = tmp_path / "study"
    args = _args(tiny_whisper_dir, manifests, out, "--n_trials", "3", "--max_steps", "2")
    assert main(args) == 1  # no trial finished: each was pruned, none ended the study
    trials = _study(out).get_trials()
    assert [t.state.name for t in trials] == ["PRUNED", "PRUNED", "PRUNED"]
    assert now["fault"] is None and len(models) == 3
    # Each pruned trial's model was gone before the next trial began.
    assert alive_at_start == [0, 0, 0]


def test_what_counts_as_out_of_memory() -> None:
    assert out_of_memory(torch.OutOfMemoryError(OOM)) == OOM
    assert out_of_memory(RuntimeError("cuDNN error: out of memory")) is not None
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = torch.OutOfMemoryError(OOM)
    assert out_of_memory(wrapped) == OOM
    assert out_of_memory(ValueError("a bad row")) is None
    assert out_of_memory(FitWhisperError("something else")) is None


def test_tune_refuses_deepspeed_before_any_trial(
    tiny_whisper_dir,
    manifests,  # noqa: F811 (test_tune's fixture)
    tmp_path,
) -> None:
    from fitwhisper.config import DataConfig, ModelConfig, TrainConfig
    from fitwhisper.tune.run import _check
    from fitwhisper.tune_config import TuneConfig

    train, held_out = manifests
    cfg = TrainConfig(
        train_manifest=str(train),
        eval_manifest=str(held_out),
        output_dir=str(tmp_path / "s"),
        deepspeed="zero2",
    )
    with pytest.raises(ConfigError) as e:
        _check(ModelConfig(model=str(tiny_whisper_dir)), DataConfig(), cfg, TuneConfig(), 1)
    assert e.value.message.startswith("tune --deepspeed zero2: tune runs its trials")
    assert "train best_config.yaml with --deepspeed" in e.value.hint
