"""`python -m bench.distributed.node_runner ROOT`: one engine configuration on this node, in a process of its own
between the Ray worker and the server's guard (bench.distributed.worker starts it).

Why a process of its own: a Ray worker that exits (its raylet lost, its job's driver dead) SIGKILLs its direct
children. Were the guard one of them, it would die before stopping its server group, and the server would
outlive the sweep. Here this runner is the worker's child and the guard the runner's: when Ray kills the runner,
the guard's lifeline reads EOF and it stops the group. When the worker dies without killing it, this runner's
stdin (a pipe from the worker) reads EOF and it exits, with the same effect.

It runs the local executor unchanged into ROOT (job.pkl there says what) and prints one JSON event per line on
stdout: the phase (loading, running point i), each point saved, and at the end any error and the captures.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bench.executor import Progress, SweepContext, run_engine
from bench.plan import Point
from bench.store import SweepStore

if TYPE_CHECKING:
    from bench.distributed.worker import EngineJob

JOB_FILE = "run/job.pkl"  # under run/: scratch, never sent to the driver


def emit(out: TextIO, event: dict) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


class EventProgress(Progress):
    """The executor's progress calls, as phase events."""

    def __init__(self, total: int, out: TextIO):
        super().__init__(total, quiet=False)
        self.out, self.index = out, 0

    def say(self, text: str) -> None:
        pass

    def point(self, point: Point, what: str) -> None:
        if what.startswith("starting server"):
            emit(self.out, {"event": "phase", "phase": "loading", "point": None})
        elif what.startswith("running"):
            self.index += 1
            emit(self.out, {"event": "phase", "phase": "running", "point": point.id, "index": self.index})

    def finished(self, point: Point, status: str, summary: str = "") -> None:
        self.done += 1


class EventStore(SweepStore):
    """The node's results directory; a saved point record is the moment its files go to the driver."""

    def __init__(self, root: Path, out: TextIO):
        super().__init__(root)
        self.out = out

    def save_point(self, record: dict) -> None:
        super().save_point(record)
        emit(self.out, {"event": "point", "point": record["point_id"], "status": record["status"]})


def context(job: EngineJob, root: Path, out: TextIO) -> SweepContext:
    capture = None
    if job.capture:
        from bench.profiling.session import Capture

        capture = Capture(root / "profile", job.nsys)
    return SweepContext(
        store=EventStore(root, out),
        progress=EventProgress(len(job.points), out),
        plan=job.plan,
        draft_keys=job.draft_keys,
        extra_env=job.extra_env,
        capture=capture,
        server_args=job.server_args,
    )


def _exit_with_the_worker() -> None:
    """stdin is a pipe from the Ray worker: EOF means the worker is gone, and so must this runner be (its guard
    then stops the server)."""
    sys.stdin.buffer.read()
    os._exit(1)


def main(argv: list[str]) -> int:
    root = Path(argv[1])
    job: EngineJob = pickle.loads((root / JOB_FILE).read_bytes())
    out = os.fdopen(os.dup(1), "w")  # the event channel; a stray print goes to stderr, not into it
    os.dup2(2, 1)
    threading.Thread(target=_exit_with_the_worker, daemon=True).start()
    ctx = context(job, root, out)
    error = None
    try:
        run_engine(ctx, job.engine, job.points)
    except Exception as exc:  # reported; the driver fails the points left with it
        error = f"{type(exc).__name__}: {exc}"
    captures = ctx.capture.outputs if ctx.capture else []
    emit(out, {"event": "done", "error": error, "captures": json.loads(json.dumps(captures, default=str))})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
