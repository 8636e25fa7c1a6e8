"""Length-grouped training order (`--group_by_duration`): groups sized in optimizer steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fitwhisper.data.batching import LengthGroupedTrainerMixin


class _Base:
    def _get_train_sampler(self, train_dataset=None):
        return "the default sampler"


class _Trainer(LengthGroupedTrainerMixin, _Base):
    group_by_length = True


@pytest.mark.parametrize(("batch", "accumulation", "world"), [(2, 2, 1), (2, 1, 2), (4, 3, 8)])
def test_groups_span_one_optimizer_step_of_the_whole_run(batch, accumulation, world) -> None:
    """The length-grouped order sorts megabatches of 50 of its batches: sized per optimizer step
    of all ranks, one process with N x the accumulation and N processes draw one order."""
    t = _Trainer()
    t.args = SimpleNamespace(train_batch_size=batch, gradient_accumulation_steps=accumulation,
                             world_size=world, seed=0)  # fmt: skip
    t.train_dataset = SimpleNamespace(lengths=[1.0 + 0.01 * i for i in range(10)])
    sampler = t._get_train_sampler()
    assert sampler.group_size == batch * accumulation * world
    assert sampler.lengths == [100 + i for i in range(10)]  # 10 ms frames, rounded up


def test_without_the_flag_or_durations_the_trainers_own_sampler_is_used() -> None:
    t = _Trainer()
    t.train_dataset = SimpleNamespace()  # no durations
    assert t._get_train_sampler() == "the default sampler"
    t.group_by_length = False
    t.train_dataset = SimpleNamespace(lengths=[1.0])
    assert t._get_train_sampler() == "the default sampler"
