"""The driver of a sweep on a Ray cluster: one Ray task per engine configuration, each in a placement group that
holds the accelerators its server needs, and this process the single writer of the results directory.

bench.commands.sweep.run_sweep decides what runs (resume, rerun, skipped points) exactly as for a local sweep and hands the
engine configurations here instead of running them one after another. Each task (bench.distributed.worker)
streams back its points' files as they finish; they are written here with the suite's atomic writer, so a driver
killed at any moment keeps every finished point and `--resume` continues.

Faults: a task whose node is lost or whose worker is killed fails its unfinished points with reason `node-lost`
and runs them once more, on another node when there is one. An engine configuration that the cluster cannot hold
is skipped with the reason. Multi-node configurations run after the others, one at a time, on a cluster that is
otherwise idle: their placement group reserves the GPUs and is handed over to vLLM's own Ray executor, which
creates its own (vLLM cannot join a group made by another process).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.config.plan import EngineConfig, Point
from bench.core.clock import now
from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes, atomic_write_json
from bench.distributed import cluster as C
from bench.distributed.ledger import LEDGER, read_ledger
from bench.distributed.placement import NODE_LOST, Cluster, Placement, place, skip_reason
from bench.distributed.worker import EngineJob, run_job
from bench.measure.effective import clear_records
from bench.results.records import new_point
from bench.run.executor import SweepContext
from bench.run.progress import PlainView, Tracker, base_record, make_view

log = logging.getLogger(__name__)
WAIT_S = 1.0
CHECK_S = 10.0  # how often queued work is checked against the nodes still alive


@dataclass(eq=False)
class _Job:
    engine: EngineConfig
    points: list[Point]
    placement: Placement
    attempt: int = 0
    avoid: str | None = None  # node id it was lost on
    pin: str | None = None  # the only node it may run on (sweep --ray-same-nodes), while that node is alive
    pg: Any = None
    gen: Any = None
    node: str = ""
    node_name: str = "-"
    python: str = ""  # the interpreter the node ran it with
    phase: str = "queued"
    done: set[str] = field(default_factory=set)
    ended: bool = False

    @property
    def key(self) -> str:
        return f"{self.engine.id}#{self.attempt}"


class RayRunner:
    def __init__(self, ctx: SweepContext, cluster: Cluster, view: PlainView, tracker: Tracker, pins: Mapping[str, str]):
        self.ctx, self.cluster, self.view, self.tracker, self.pins = ctx, cluster, view, tracker, pins
        self.running: list[_Job] = []
        nodes = [{"node_id": n.node_id, "name": n.name, "slots": n.slots, "kind": n.kind} for n in cluster.nodes]
        self.attempts: list[dict] = []  # this run's; earlier runs (before a --resume) stay in the ledger
        run = {"started": now(), "address": cluster.address, "resource": cluster.resource, "nodes": nodes}
        run["python"] = sys.executable  # what the nodes run when they have it (bench.distributed.worker)
        self.ledger = read_ledger(ctx.store.root / LEDGER)
        self.ledger["runs"].append({**run, "attempts": self.attempts})
        self.last_check = time.monotonic()

    def run(self, todo: list[tuple[EngineConfig, list[Point]]]) -> None:
        single: list[_Job] = []
        multi: list[_Job] = []
        for engine, points in todo:
            placement = place(engine, self.cluster)
            if placement.problem:
                self._skip(engine, points, placement)
            else:
                job = _Job(engine, points, placement, pin=self._pin(engine, placement))
                (multi if placement.multi_node else single).append(job)
        for job in single:
            self._submit(job)
        self._drain()
        for job in multi:
            self._submit(job)
            self._drain()

    def _pin(self, engine: EngineConfig, placement: Placement) -> str | None:
        """The node `engine` must run on (--ray-same-nodes), when that node is alive and can hold it alone."""
        node_id = self.pins.get(engine.id)
        if node_id is None:
            return None
        node = next((n for n in self.cluster.nodes if n.node_id == node_id), None)
        if node is None or placement.multi_node or node.slots < placement.gpus:
            self.view.say(f"{engine.id}: node {node_id[:6]} of --ray-same-nodes cannot run it now; runs anywhere")
            return None
        return node_id

    def stop(self) -> None:
        """Cancel what still runs (its worker dies, and bench.engine.guard stops its server) and free the reservations."""
        ray = C.import_ray()
        for job in self.running:
            if job.gen is not None:
                try:
                    ray.cancel(job.gen, force=True)
                except Exception as exc:
                    log.debug("cancel %s: %s", job.key, exc)
            C.release(job.pg)
        self.running.clear()
        self._write_ledger()

    # --- submitting ---------------------------------------------------------------------------------------

    def _submit(self, job: _Job) -> None:
        ray = C.import_ray()
        self.tracker.add(job.key, job.engine.label(), len(job.points))
        self.view.changed(job.key, f"(attempt {job.attempt + 1})" if job.attempt else "")
        clear_records(self.ctx.store.root, job.engine.id)  # an earlier start's (a retry, a resume), as a local sweep
        task = EngineJob(
            plan=self.ctx.plan,
            engine=job.engine,
            points=job.points,
            draft_keys=self.ctx.draft_keys,
            extra_env=dict(self.ctx.extra_env),
            capture=self.ctx.capture is not None,
            nsys=self.ctx.capture.nsys if self.ctx.capture else None,
            attempt=job.attempt,
            python=sys.executable,
            salt=self.ctx.salt,
        )
        remote = ray.remote(max_retries=0, num_cpus=0)(run_job)  # the driver re-queues, once, itself
        if job.placement.multi_node:
            job.gen = self._submit_multi(job, task, remote)
        else:
            job.pg = C.reserve(job.placement, self.cluster.resource, job.avoid, job.pin)
            strategy = C.in_group(job.pg)
            job.gen = remote.options(scheduling_strategy=strategy, **self._holding(job.placement.gpus)).remote(task)
        self.running.append(job)

    def _holding(self, gpus: int) -> dict[str, Any]:
        if self.cluster.resource == "GPU":  # Ray then sets CUDA_VISIBLE_DEVICES, which the server inherits
            return {"num_gpus": gpus}
        return {"resources": {self.cluster.resource: gpus}}

    def _submit_multi(self, job: _Job, task: EngineJob, remote: Any) -> Any:
        """Wait until the GPUs are free (our placement group is ready), hand them to vLLM (its Ray executor makes
        its own group of one GPU per worker, PACK), and run the server on the group's first node."""
        ray = C.import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pg = C.reserve(job.placement, self.cluster.resource)
        while not ray.wait([pg.ready()], timeout=WAIT_S)[0]:
            self.view.tick()
        head = C.bundle_nodes(pg)[0]
        C.release(pg)
        gcs = ray.get_runtime_context().gcs_address
        task = EngineJob(**{**task.__dict__, "server_args": ("--distributed-executor-backend", "ray")})
        task.extra_env["RAY_ADDRESS"] = gcs
        return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote(task)

    def _skip(self, engine: EngineConfig, points: list[Point], placement: Placement) -> None:
        for point in points:
            stored = self.ctx.store.point(point.id)
            if stored is not None and stored.status == "failed":
                continue  # --rerun-failed on a cluster that cannot place it now: the failure stays on record
            skipped = {**base_record(point), "status": "skipped", "reason": skip_reason(placement)}
            self.ctx.store.save_point(new_point(skipped))
        self.tracker.total -= len(points)
        self.view.say(f"skipped {engine.id} [{engine.label()}]: {skip_reason(placement)}")

    # --- receiving ----------------------------------------------------------------------------------------

    def _drain(self) -> None:
        ray = C.import_ray()
        while self.running:
            ready, _ = ray.wait([j.gen for j in self.running], num_returns=1, timeout=WAIT_S)
            for gen in ready:
                job = next(j for j in self.running if j.gen is gen)
                self._step(job)
            self.view.tick()
            if time.monotonic() - self.last_check > CHECK_S:
                self._check_queued()

    def _step(self, job: _Job) -> None:
        ray = C.import_ray()
        try:
            ref = next(job.gen)
        except StopIteration:
            return self._finish(job, None)
        try:
            event = ray.get(ref)
        except Exception as exc:
            if C.is_lost(exc):
                return self._lost(job, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            return self._finish(job, f"{type(exc).__name__}: {exc}")
        self._handle(job, event)

    def _handle(self, job: _Job, event: dict) -> None:
        kind = event["event"]
        self._write(event)
        if kind == "node":
            job.node = event["node_id"]
            job.node_name = next((n.short for n in self.cluster.nodes if n.node_id == job.node), event["host"])
            self.tracker.node(job.key, job.node_name)
            job.python = event.get("python", "")
            if job.python and job.python != sys.executable:
                self.view.say(f"{job.node_name} has no {sys.executable}: {job.engine.id} runs with {job.python}")
        elif kind == "phase":
            job.phase = event["phase"]
            self.tracker.phase(job.key, event["phase"], event.get("index", 0), event.get("profiled", False))
            self.view.changed(job.key)
        elif kind == "point":
            job.done.add(event["point"])
            self.tracker.point_done(job.key)
            self.view.changed(job.key, f"point {event['point']} {event['status']}")
        elif kind == "end":
            if self.ctx.capture is not None and event["captures"]:
                self._captures(event["captures"])
            if event["error"] and event.get("lost"):
                self._lost(job, event["error"])
            elif event["error"]:
                self._finish(job, event["error"])

    def _write(self, event: dict) -> None:
        root = self.ctx.store.root
        for rel, data in event.get("files", []):
            atomic_write_bytes(_inside(root, rel), data)
        for rel, data in event.get("appends", []):
            with open(_inside(root, rel), "ab") as fh:  # a server log grows here as it does in a local sweep
                fh.write(data)

    def _captures(self, outputs: list[dict]) -> None:
        assert self.ctx.capture is not None
        root = str(self.ctx.store.root.resolve()) + "/"
        for item in outputs:  # the timing mode's tables, and each nsys report's: relative on the node, ours here
            for holder in [item, *item.get("reports", [])]:
                if holder.get("tables"):
                    holder["tables"] = {k: root + v for k, v in holder["tables"].items()}
        self.ctx.capture.outputs.extend(outputs)
        atomic_write_json(self.ctx.store.root / "profile" / "captures.json", self.ctx.capture.outputs)

    # --- ends ---------------------------------------------------------------------------------------------

    def _finish(self, job: _Job, error: str | None) -> None:
        """The task ended; points it did not record fail with the suite's error (a bug, not the cluster)."""
        if job.ended:
            return
        left = [p for p in job.points if p.id not in job.done]
        for point in left:
            self._fail(point, "bench-error", error or "the engine's task ended without a record", job)
        self._close(job, "ok" if not left else "bench-error", lost=len(left))

    def _lost(self, job: _Job, detail: str) -> None:
        left = [p for p in job.points if p.id not in job.done]
        where = f"node {job.node_name} lost" if job.node else "lost before it started"
        self._append_log(job, f"# bench: {where} ({detail}); {len(left)} points not run\n")
        for point in left:
            self._fail(point, NODE_LOST, f"{where}: {detail}", job)
        retry = job.attempt == 0 and bool(left)
        self._close(job, NODE_LOST, lost=len(left), requeued=len(left) if retry else 0)
        if retry:
            self._requeue(job, left)

    def _requeue(self, job: _Job, points: list[Point]) -> None:
        self.cluster = C.read_cluster(self.cluster.address)
        others = self.cluster.without(job.node)
        avoid = job.node if job.node and place(job.engine, others).problem is None else None
        placement = place(job.engine, self.cluster)
        if placement.problem:
            self.view.say(f"{job.engine.id}: not re-run, {placement.problem}")
            self.tracker.total -= len(points)
            return
        self._submit(_Job(job.engine, points, placement, attempt=job.attempt + 1, avoid=avoid))

    def _close(self, job: _Job, outcome: str, lost: int = 0, requeued: int = 0) -> None:
        job.ended = True
        C.release(job.pg)
        if job in self.running:
            self.running.remove(job)
        self.tracker.end(job.key, lost_points=lost, requeued=requeued)
        self.attempts.append(
            {
                "engine_id": job.engine.id,
                "attempt": job.attempt,
                "node_id": job.node or None,
                "node": job.node_name,
                "outcome": outcome,
                "pinned": job.pin,
                "python": job.python or None,
                "points_recorded": sorted(job.done),
                "points_lost": sorted(p.id for p in job.points if p.id not in job.done) if lost else [],
                "finished": now(),
            }
        )
        self._write_ledger()
        self.view.say(f"[ray {self.tracker.headline()}] {job.node_name} {job.engine.label()}: {outcome}")

    def _check_queued(self) -> None:
        """Queued work that no alive node can hold any more (its nodes were lost) fails as node-lost."""
        self.last_check = time.monotonic()
        self.cluster = C.read_cluster(self.cluster.address)
        alive = {n.node_id for n in self.cluster.nodes}
        for job in list(self.running):
            if job.node:
                continue
            pin_gone = job.pin is not None and job.pin not in alive
            if pin_gone or place(job.engine, self.cluster).problem:
                C.import_ray().cancel(job.gen, force=True)
                self._lost(job, "its --ray-same-nodes node is gone" if pin_gone else "no alive node can hold it")

    def _fail(self, point: Point, reason: str, detail: str, job: _Job) -> None:
        store = self.ctx.store
        self.ctx.store.save_point(
            new_point(
                {
                    **base_record(point),
                    "status": "failed",
                    "reason": reason,
                    "detail": detail,
                    "phase": "startup" if job.phase in ("queued", "loading", "capturing") else "load",
                    "finished": now(),
                    "server": {"log": str(store.log_path(point.engine.id).relative_to(store.root))},
                }
            )
        )

    def _append_log(self, job: _Job, text: str) -> None:
        path = self.ctx.store.log_path(job.engine.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as fh:
            fh.write(text)

    def _write_ledger(self) -> None:
        atomic_write_json(self.ctx.store.root / LEDGER, self.ledger)


def _inside(root: Path, rel: str) -> Path:
    path = root / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute():
        raise BenchError(f"a worker sent a file outside the results directory: {rel}")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def run_on_ray(
    ctx: SweepContext,
    todo: list[tuple[EngineConfig, list[Point]]],
    address: str,
    pins: Mapping[str, str] | None = None,
) -> None:
    """Run the engine configurations of `todo` on the cluster at `address`; every point ends with a record.
    `pins`: engine id -> the node id it runs on while that node is alive (sweep --ray-same-nodes)."""
    cluster = C.connect(address)
    tracker = Tracker(sum(len(p) for _, p in todo), max(1, len(cluster.nodes)))
    view = make_view(tracker, ctx.progress.quiet)
    view.say(f"ray: {cluster.describe()}")
    runner = RayRunner(ctx, cluster, view, tracker, pins or {})
    try:
        runner.run(todo)
    finally:
        runner.stop()
        view.close()
        C.import_ray().shutdown()
