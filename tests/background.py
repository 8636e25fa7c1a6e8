"""Pure computation a slow test checks, started when collection ends in a process at the
lowest CPU priority: it runs on what the other tests leave idle (the two cores are busy about
78% of a run), and the test waits only for what is not done by the time it runs.

Only work with no timeouts and no shared state qualifies: a starved job is late, never wrong.
It is not free: the tests beside it slow down (the GPU check on CPU, the first test, 41 s ->
63-68 s), but the presets' 76 s became a 9 s wait, for about 40 s less over the first
300 tests (measured 2026-11-28).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    test: str  # the node id of the test that reads the result
    code: str  # Python run with the output file as sys.argv[1]


JOBS = (
    Job(
        "tests/memory/test_presets.py::test_the_docs_presets_match_the_planner",
        "import sys\n"
        "from fitwhisper.memory.presets import presets_markdown\n"
        "open(sys.argv[1], 'w', encoding='utf-8').write(presets_markdown())\n",
    ),
)


def _lowest_priority() -> None:
    """SCHED_IDLE: the process runs only on a core nothing else wants (nice 19 still takes a
    share of a busy core); its children inherit it."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: the lowest nice level
        os.nice(19)


class Started:
    """One job's process, its output file and its log."""

    def __init__(self, job: Job, folder: Path) -> None:
        self.job, self.out, self.log = job, folder / "out", folder / "log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p
        )
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", job.code, str(self.out)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_lowest_priority,
            )

    def result(self) -> str:
        """The job's output, once its process has ended; its log in the error if it failed."""
        rc = self.proc.wait()
        assert rc == 0, f"{self.job.test}'s background job exited {rc}:\n{self.log.read_text()}"
        return self.out.read_text(encoding="utf-8")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def start(node_ids: set[str]) -> dict[str, Started]:
    """Start the jobs whose tests were collected; keyed by the test's node id."""
    jobs = [j for j in JOBS if j.test in node_ids]
    if not jobs:
        return {}
    root = Path(tempfile.mkdtemp(prefix="fitwhisper-background-"))
    started = {}
    for i, job in enumerate(jobs):
        folder = root / str(i)
        folder.mkdir()
        started[job.test] = Started(job, folder)
    return started


def stop(started: dict[str, Started]) -> None:
    for s in started.values():
        s.stop()
    for s in started.values():
        shutil.rmtree(s.out.parent.parent, ignore_errors=True)
