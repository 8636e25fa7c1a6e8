"""Several processes (torchrun, accelerate launch): who does what, and waiting for the rest.

Under a launcher every process runs `fitwhisper train` whole; Trainer and accelerate share
the steps out (DDP, FSDP, DeepSpeed). Work that must happen once (the run folder, the data
check and its reports, the run record, final/ and its scoring) runs on the main process
while the others wait, and its result is sent to them. Without a launcher (WORLD_SIZE
unset or 1) every function here is the plain single-process call.

No wait lasts hours unless it waits for such work of the main process (MAIN_ALONE_TIMEOUT,
over a group of its own); every other collective gives up in COLLECTIVE_TIMEOUT.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

# Two waits, two timeouts. Every collective of training (DDP's all-reduces, the checkpoint
# barriers, evaluation's gathers) completes within minutes when every rank is alive: one that
# does not is a hang, and ends the run in COLLECTIVE_TIMEOUT, not in hours.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=15)
# The others wait while the main process works alone: a download or conversion, the check of
# every row (hours for a large set), the encoder cache, scoring the starting weights. Those
# waits go over a group of their own (gloo: a CPU wait, no GPU collective held open).
MAIN_ALONE_TIMEOUT = datetime.timedelta(hours=6)
_main_alone_group = None


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def rank() -> int:
    return int(os.environ.get("RANK", "0") or 0)


def is_main() -> bool:
    return rank() == 0


def start() -> None:
    """Join the launcher's process group (gloo on CPU, NCCL on GPUs), before anything loads;
    the other ranks log warnings only, so the console shows one copy of each message (with
    -v every rank logs: debug lines say what each process did)."""
    if world_size() <= 1:
        return
    import torch
    from accelerate import PartialState

    global _main_alone_group
    PartialState(cpu=not torch.cuda.is_available(), timeout=COLLECTIVE_TIMEOUT)
    _main_alone_group = torch.distributed.new_group(backend="gloo", timeout=MAIN_ALONE_TIMEOUT)
    logger = logging.getLogger("fitwhisper")
    if not is_main() and logger.getEffectiveLevel() > logging.DEBUG:
        logger.setLevel(logging.WARNING)
    elif fsdp_asked() and not torch.cuda.is_available():
        log.warning(
            "accelerate launch asked for FSDP, but accelerate shards with FSDP on GPUs (and "
            "other accelerators) only: on the CPU this run is plain DDP, every process holding "
            "the whole model"
        )


def finish() -> None:
    """Leave the process group at the end of a finished run, on every rank: left to the
    interpreter's exit, NCCL warned that it may leak resources (DeepSpeed, one process,
    on an H200)."""
    import torch.distributed as dist

    global _main_alone_group
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _main_alone_group = None  # destroyed only once nothing holds it: its threads end here


def end_process(code: int) -> int:
    """Under a launcher, end this process with `code` now, without the interpreter's
    shutdown; otherwise return `code`.

    A gloo thread still running when the interpreter shuts down aborts the process ("terminate
    called without an active exception", exit -6: the thread, taking the GIL to free a
    tensor, is ended by the shutdown from inside C++), and the launcher then fails a finished
    run. destroy_process_group does not end every such thread: a DistributedDataParallel
    model keeps its process group, threads and all, alive in C++ until the process ends
    (torch 2.13). So the exit handlers run (logging, trackers) and the process ends here.
    """
    if world_size() <= 1:
        return code
    import atexit
    import sys

    atexit._run_exitfuncs()  # what the interpreter's shutdown would run first
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fsdp_asked() -> bool:
    """Whether the launcher asked for FSDP (`accelerate launch --use_fsdp` or its config)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")


def alone_as_a_group() -> None:
    """One process without a launcher, described as a group of one: DeepSpeed finds its
    peers in torchrun's variables and, without them, looks for MPI (mpi4py) and fails.
    Under a launcher (RANK or WORLD_SIZE set) nothing changes."""
    if "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        return
    import socket

    with socket.socket() as s:  # a free port for the group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def wait_for_main(phase: str) -> None:
    """Every process waits here until the main one is done with `phase` (work it does alone),
    for up to MAIN_ALONE_TIMEOUT."""
    if world_size() <= 1:
        return
    import torch.distributed as dist

    with _named_wait(phase, MAIN_ALONE_TIMEOUT):
        dist.barrier(group=_main_alone_group)


@contextlib.contextmanager
def main_first(phase: str) -> Iterator[None]:
    """The main process runs the block first (a download, a conversion into the cache, the
    encoder cache), then the others, which find its result there."""
    if not is_main():
        wait_for_main(phase)
    yield
    if is_main():
        wait_for_main(phase)


def on_main(fn: Callable[[], T], phase: str) -> T:
    """`fn()` (`phase`, in the words of an error) on the main process only; every process
    gets its result.

    An error on the main process is raised there (it prints the message); the others exit
    with status 1 quietly instead of waiting for a result that never comes.
    """
    if world_size() <= 1:
        return fn()
    import torch.distributed as dist

    box: list = [None]
    failed: BaseException | None = None
    if is_main():
        try:
            box = [("ok", fn())]
        except BaseException as e:  # sent on, then raised here
            failed, box = e, [("failed", None)]
    with _named_wait(phase, MAIN_ALONE_TIMEOUT):
        dist.broadcast_object_list(box, src=0, group=_main_alone_group)
    if failed is not None:
        raise failed
    status, value = box[0]
    if status != "ok":
        raise SystemExit(1)
    return value


@contextlib.contextmanager
def _named_wait(phase: str, timeout: datetime.timedelta) -> Iterator[None]:
    """A wait that runs out says which process waited, for what and how long, instead of
    the process group's own error."""
    try:
        yield
    except RuntimeError as e:  # torch.distributed.DistBackendError is one
        if "timed out" not in str(e).lower() and "timeout" not in str(e).lower():
            raise
        from fitwhisper.errors import FitWhisperError

        raise FitWhisperError(
            f"process {rank()} of {world_size()} waited {timeout} for the others while "
            f"{phase}, and gave up",
            hint="one process stopped or hangs: its own log says where; the run can be "
            "resumed with --resume",
        ) from e


class EvalWithoutRepeatsMixin:
    """Evaluation outputs gathered from every process without the sampler's repeats.

    Seq2SeqTrainer.evaluate gathers with `accelerator.gather` ("we don't want to drop
    samples"), so on N processes an eval set that is not a multiple of N x the eval batch
    comes back with the clips accelerate repeated to even out the last batch: more
    hypotheses than references, and the loss counts those clips twice. `gather_for_metrics`
    drops the repeats; the order stays the eval set's (batches go to the ranks in turn).
    """

    def evaluation_loop(self, *args, **kwargs):
        self.gather_function = self.accelerator.gather_for_metrics  # type: ignore[attr-defined]
        return super().evaluation_loop(*args, **kwargs)  # type: ignore[misc]
