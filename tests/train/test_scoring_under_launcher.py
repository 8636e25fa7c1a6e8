"""Scoring by the main process alone under a launcher never waits on the other ranks.

The held-out clips before and after training and the regression set are scored by rank 0
alone (train/run.py) while the others start DDP or are done. Under CUDA's distributed state
a Trainer made for that scoring sharded the clips and waited on gathers the others never
joined: a hang until the process group's timeout. Here two processes run over gloo with
accelerate's state made as CUDA makes it (cuda_like_state.py); the run must end, with every
clip scored on rank 0.
"""

from __future__ import annotations

import json

import pytest
from tests.train.test_multiprocess import HERE, _ok, _torchrun, _train_args, clips  # noqa: F401

pytestmark = pytest.mark.slow


def test_main_only_scoring_under_cuda_like_state_completes_with_every_clip(
    tiny_whisper_dir,
    clips,  # noqa: F811 (the fixture imported above)
    tmp_path,
) -> None:
    out = tmp_path / "run"
    held_out = clips.with_name("eval.jsonl")
    scoring = ("--eval_manifest", str(held_out), "--regression_manifest", str(held_out),
               "--score_before", "--per_device_eval_batch_size", "2",
               "--generation_max_length", "8")  # fmt: skip
    args = _train_args(tiny_whisper_dir, clips, out, *scoring)
    args[args.index("--max_steps") + 1] = "2"
    log = _ok(_torchrun(str(HERE / "cuda_like_state.py"), *args))
    # The patch took: evaluation arguments made on rank 0 alone see both processes.
    assert "evaluation arguments on rank 0 alone see 2 processes" in log
    for scored in ("eval/before/metrics.json", "eval/metrics.json"):
        metrics = json.loads((out / scored).read_text())
        assert metrics["n_utterances"] == 3, scored  # all 3 held-out clips, none sharded away
    regression = json.loads((out / "eval" / "regression.json").read_text())
    assert regression["n_utterances"] == 3
    assert len((out / "eval/regression/after/predictions.jsonl").read_text().splitlines()) == 3
    assert (out / "final" / "model.safetensors").is_file()
