"""`python -m bench.distributed.node_runner ROOT`: one engine configuration on this node, in a process of its own
between the Ray worker and the server's guard (bench.distributed.worker starts it).

Why a process of its own: a Ray worker that exits (its raylet lost, its job's driver dead) SIGKILLs its direct
children. Were the guard one of them, it would die before stopping its server group, and the server would
outlive the sweep. Here this runner is the worker's child and the guard the runner's: when Ray kills the runner,
the guard's lifeline reads EOF and it stops the group. When the worker dies without killing it, this runner's
stdin (a pipe from the worker) reads EOF and it exits, with the same effect.

It runs the local executor unchanged into ROOT (job.pkl there says what) and prints one JSON event per line on
stdout: the phase (loading, running point i, profiled when a capture is attached, exporting the capture after the
server stopped), each point saved, and at the end any error and the captures.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bench.config.plan import Point
from bench.distributed.placement import JOB_FILE, NSYS_ON_NODE
from bench.profiling.session import Capture, find_nsys
from bench.results.records import PointRecord
from bench.results.store import SweepStore
from bench.run.executor import SweepContext, run_engine
from bench.run.progress import Progress

if TYPE_CHECKING:
    from bench.distributed.worker import EngineJob


def emit(out: TextIO, event: dict) -> None:
    out.write(json.dumps(event) + "\n")
    out.flush()


class EventProgress(Progress):
    """The executor's progress calls, as phase events."""

    def __init__(self, total: int, out: TextIO, profiled: bool = False):
        super().__init__(total, quiet=True)  # no lines: the worker turns the events into the live view
        self.out, self.index, self.profiled = out, 0, profiled

    def starting(self, point: Point, command: str, points: int | None = None) -> None:
        emit(self.out, {"event": "phase", "phase": "loading", "point": None})

    def running(self, point: Point) -> None:
        self.index += 1
        event = {"event": "phase", "phase": "running", "point": point.id, "index": self.index}
        emit(self.out, {**event, "profiled": self.profiled})


class EventStore(SweepStore):
    """The node's results directory; a saved point record is the moment its files go to the driver."""

    def __init__(self, root: Path, out: TextIO):
        super().__init__(root)
        self.out = out

    def save_point(self, record: PointRecord) -> None:
        super().save_point(record)
        emit(self.out, {"event": "point", "point": record.point_id, "status": record.status})


class EventCapture(Capture):
    """The capture of this node's server; its export after the server stopped (nsys: minutes for a long trace) is
    a phase of its own, so the live view does not show the last point running all that time."""

    def __init__(self, out_dir: Path, nsys: str | None, out: TextIO):
        super().__init__(out_dir, nsys)
        self.events = out

    def finalize(self, engine_id: str, server_log: str = "") -> dict:
        emit(self.events, {"event": "phase", "phase": "exporting", "point": None})
        return super().finalize(engine_id, server_log)


def context(job: EngineJob, root: Path, out: TextIO) -> SweepContext:
    capture = None
    if job.capture:  # nsys as found on this node, or the path the driver was given (checked here, where it runs)
        capture = EventCapture(root / "profile", find_nsys(None if job.nsys == NSYS_ON_NODE else job.nsys), out)
    return SweepContext(
        store=EventStore(root, out),
        progress=EventProgress(len(job.points), out, profiled=capture is not None),
        plan=job.plan,
        draft_keys=job.draft_keys,
        extra_env=job.extra_env,
        capture=capture,
        server_args=job.server_args,
        salt=job.salt,
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
    error, captures = None, []
    try:
        ctx = context(job, root, out)  # inside: an --nsys path this node lacks is the error the driver records
        captures = ctx.capture.outputs if ctx.capture else []
        run_engine(ctx, job.engine, job.points)
    except Exception as exc:  # reported; the driver fails the points left with it
        error = f"{type(exc).__name__}: {exc}"
    emit(out, {"event": "done", "error": error, "captures": json.loads(json.dumps(captures, default=str))})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
