"""Waits between processes: hours only for the main process's work alone, minutes otherwise.

Two real processes over gloo, with the two timeouts of ranks.py made short. Rank 0 works
alone for longer than the collective timeout (as checking the data does), and rank 1's wait
for it holds; a collective that rank 0 never joins gives up in the collective timeout; a
wait for work of rank 0 that never ends gives up naming the process and the phase.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

COLLECTIVE_S = 2
MAIN_ALONE_S = 6
MAIN_WORKS_S = 4  # longer than a collective may wait, shorter than a wait for the main one


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    import torch.distributed as dist

    from fitwhisper.errors import FitWhisperError
    from fitwhisper.train import ranks

    ranks.COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=COLLECTIVE_S)
    ranks.MAIN_ALONE_TIMEOUT = datetime.timedelta(seconds=MAIN_ALONE_S)
    ranks.start()
    done = Path(out) / "rank1.json"

    def check_the_data() -> str:
        time.sleep(MAIN_WORKS_S)
        return "checked"

    value = ranks.on_main(check_the_data, "checking the data")
    if rank == 0:  # alive, joining nothing more, until rank 1 has seen both waits give up
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        return
    result: dict = {"value": value}
    start = time.monotonic()
    try:
        dist.barrier()  # a collective of training that rank 0 never joins
    except RuntimeError as e:
        result["collective"] = [time.monotonic() - start, str(e)[:300]]
    start = time.monotonic()
    try:
        ranks.wait_for_main("scoring the starting weights")
    except FitWhisperError as e:
        result["main_alone"] = [time.monotonic() - start, str(e)]
    done.write_text(json.dumps(result))


@pytest.mark.slow
def test_waits_for_the_main_process_outlast_collectives_and_name_what_they_waited_for(
    tmp_path: Path,
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, str(tmp_path)), nprocs=2, join=True)
    result = json.loads((tmp_path / "rank1.json").read_text())
    assert result["value"] == "checked"  # waited MAIN_WORKS_S > COLLECTIVE_S, and got it
    waited, _ = result["collective"]
    assert COLLECTIVE_S - 1 < waited < MAIN_ALONE_S
    waited, message = result["main_alone"]
    assert MAIN_ALONE_S - 1 < waited < MAIN_ALONE_S + 10
    assert "process 1 of 2 waited 0:00:06 for the others while scoring the starting weights" in (
        message
    )
