"""The Ray driver's bookkeeping with a scripted stand-in for Ray, so Ray need not be installed (the real cluster runs
in tests/integration/test_ray_cpu.py): files streamed by a task land in the results directory, a lost node fails the
unfinished points as node-lost and re-runs them once elsewhere, the suite's own error is not re-run, and a config
the cluster cannot hold is skipped with the reason while the others run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.hardware import Machine
from bench.distributed import cluster as C
from bench.distributed import driver
from bench.distributed.placement import Cluster, Node
from bench.results.records import new_point
from bench.results.store import SCHEMA_VERSION, SweepStore
from bench.run.executor import SweepContext
from bench.run.progress import Progress, base_record


class Lost(Exception):
    """Stands in for ray.exceptions.NodeDiedError."""


def plan_for(tp: int = 1):
    profile = {
        "name": "scripted",
        "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
        "server": {"tensor_parallel_size": tp},
        "axes": {
            "draft_attention_backend": ["CPU_MLA"],
            "num_speculative_tokens": [2, 3],
            "shapes": ["1x8x4", "2x8x4"],
        },
    }
    return make_plan(parse_profile(profile, "cpu", "scripted.toml"), Machine("cpu"))


class FakeGen:
    def __init__(self, events: list):
        self.events = list(events)

    def __next__(self):
        if not self.events:
            raise StopIteration
        return self.events.pop(0)


class FakeRay:
    """remote / wait / get / cancel / shutdown as the driver uses them; `script(engine_label, attempt, node)`
    gives the events of each task (an exception instance: ray.get raises it)."""

    def __init__(self, script, nodes):
        self.script, self.nodes, self.submitted, self.cancelled, self.tasks = script, nodes, [], [], []

    def remote(self, **_):
        return lambda fn: SimpleNamespace(options=self._options)

    def _options(self, **opts):
        return SimpleNamespace(remote=lambda task: self._start(task))

    def _start(self, task):
        node = self.nodes[len(self.submitted) % len(self.nodes)] if task.attempt == 0 else self.nodes[0]
        self.submitted.append((task.engine.label(), task.attempt, node, [p.id for p in task.points]))
        self.tasks.append(task)
        return FakeGen(self.script(task, node))

    def wait(self, gens, num_returns=1, timeout=None):
        return gens[:1], gens[1:]

    def get(self, ref):
        if isinstance(ref, Exception):
            raise ref
        return ref

    def cancel(self, gen, force=False):
        self.cancelled.append(gen)

    def shutdown(self):
        pass


def events_ok(task, node):
    out = [{"event": "node", "node_id": node, "host": node}, {"event": "phase", "phase": "loading", "point": None}]
    for i, point in enumerate(task.points, 1):
        record = {
            "schema_version": SCHEMA_VERSION,
            **base_record(point),
            "status": "ok",
            "metrics": {},
            "raw": f"raw/{point.id}.parquet",
        }
        out.append({"event": "phase", "phase": "running", "point": point.id, "index": i})
        files = [(f"raw/{point.id}.parquet", b"rows"), (f"points/{point.id}.json", json.dumps(record).encode())]
        out.append({"event": "point", "point": point.id, "status": "ok", "files": files, "appends": []})
    log = [(f"logs/server-{task.engine.id}.log", f"served on {node}\n".encode())]
    return [*out, {"event": "sync", "files": [], "appends": log}, {"event": "end", "error": None, "captures": []}]


@pytest.fixture
def scripted(monkeypatch):
    """Installs the scripted Ray (cluster.read_cluster then lists the nodes without n2); returns (fake, the
    avoid_node of each reservation); `pinned` collects each reservation's on_node."""

    def install(script, nodes=("n1", "n2"), slots=1, pinned=None):
        cluster = Cluster(tuple(Node(n, n, slots) for n in nodes), "bench_gpu", "cpu", "addr")
        fake = FakeRay(script, list(nodes))
        reserved = []

        def reserve(placement, resource, avoid=None, on_node=None):
            reserved.append(avoid)
            if pinned is not None:
                pinned.append(on_node)
            return object()

        monkeypatch.setattr(C, "import_ray", lambda: fake)
        monkeypatch.setattr(C, "connect", lambda address: cluster)
        monkeypatch.setattr(C, "read_cluster", lambda address=None: cluster.without("n2"))
        monkeypatch.setattr(C, "reserve", reserve)
        monkeypatch.setattr(C, "release", lambda pg: None)
        monkeypatch.setattr(C, "in_group", lambda pg: ("in group", pg))
        monkeypatch.setattr(C, "is_lost", lambda exc: isinstance(exc, Lost))
        return fake, reserved

    return install


@pytest.fixture
def run(scripted, tmp_path):
    def go(plan, script, nodes=("n1", "n2"), slots=1, pins=None, pinned=None):
        fake, reserved = scripted(script, nodes, slots, pinned)
        store = SweepStore(tmp_path / "results")
        ctx = SweepContext(store=store, progress=Progress(0, quiet=True), plan=plan)
        driver.run_on_ray(ctx, [(e, pts) for e, pts in plan.groups], "addr", pins)
        ledger = json.loads((store.root / driver.LEDGER).read_text())
        return store, fake, reserved, ledger["runs"][-1]["attempts"]

    return go


def test_a_lost_node_fails_its_unfinished_points_and_they_run_once_more_elsewhere(run):
    plan = plan_for()

    def script(task, node):
        events = events_ok(task, node)
        if node == "n2" and task.attempt == 0:  # lost after its first point
            return [*events[:4], Lost("node n2 died")]
        return events

    store, fake, reserved, attempts = run(plan, script)
    lost_engine = next(e for e, _ in plan.groups if e.label().endswith("k3"))
    first, second = (p.id for p in dict(plan.groups)[lost_engine])
    assert [s[1:] for s in fake.submitted if s[0] == lost_engine.label()] == [
        (0, "n2", [first, second]),
        (1, "n1", [second]),
    ]
    assert reserved == [None, None, "n2"], "the re-run avoids the node it was lost on"
    points = store.records()
    assert {p.status for p in points.values()} == {"ok"}, "the re-run's records replace the node-lost ones"
    assert [(a["node"], a["outcome"], a["points_lost"]) for a in attempts] == [
        ("n1/n1", "ok", []),  # a node is shown as name/id
        ("n2/n2", "node-lost", [second]),
        ("n1/n1", "ok", []),
    ]
    log = store.log_path(lost_engine.id).read_text()
    assert "# bench: node n2/n2 lost (Lost: node n2 died); 1 points not run" in log and "served on n1" in log
    assert (store.root / f"raw/{first}.parquet").read_bytes() == b"rows"


def test_lost_twice_stays_failed_and_an_error_of_the_suite_is_not_rerun(run):
    plan = plan_for()

    def script(task, node):
        if task.engine.label().endswith("k2"):
            return [{"event": "node", "node_id": node, "host": node}, {"event": "end", "error": "bug", "captures": []}]
        return [{"event": "node", "node_id": node, "host": node}, Lost("gone")]

    store, fake, _, attempts = run(plan, script)
    records = store.records().values()
    assert (
        sorted((p.reason, p.phase) for p in records)
        == [("bench-error", "startup")] * 2 + [("node-lost", "startup")] * 2
    )
    assert [a["outcome"] for a in attempts] == ["bench-error", "node-lost", "node-lost"]
    assert len(fake.submitted) == 3


def test_a_config_the_cluster_cannot_hold_is_skipped_and_the_others_run(run):
    small, big = plan_for(tp=1), plan_for(tp=2)
    mixed = make_plan(small.profile, Machine("cpu"))
    mixed.groups = [small.groups[0], big.groups[0]]
    store, fake, _, _ = run(mixed, events_ok)
    statuses = {p.engine_id: (p.status, p.reason) for p in store.records().values()}
    assert statuses[small.groups[0][0].id] == ("ok", None)
    status, reason = statuses[big.groups[0][0].id]
    assert status == "skipped" and reason.startswith("cluster: needs 2 bench_gpu across nodes")
    assert len(fake.submitted) == 1


def test_a_failure_on_record_is_not_overwritten_by_a_skip(run, tmp_path):
    """Found in review: `--rerun-failed` on a cluster that cannot place the config now replaced the earlier failed
    record (its reason, detail and raw rows) with a skip, which a plain --resume then runs again."""
    small, big = plan_for(tp=1), plan_for(tp=2)
    mixed = make_plan(small.profile, Machine("cpu"))
    mixed.groups = [small.groups[0], big.groups[0]]
    store = SweepStore(tmp_path / "results")
    failed = big.groups[0][1][0]
    failure = {**base_record(failed), "status": "failed", "reason": "engine-dead", "detail": "EngineCore died"}
    store.save_point(new_point(failure))
    store, _, _, _ = run(mixed, events_ok)
    kept = store.records()[failed.id]
    assert (kept.status, kept.reason, kept.detail) == ("failed", "engine-dead", "EngineCore died")
    others = [p for p in big.groups[0][1] if p.id != failed.id]
    assert all(store.records()[p.id].status == "skipped" for p in others)


def test_a_new_start_of_an_engine_clears_the_engine_records_of_an_earlier_one(run, tmp_path):
    """Found in review: the node's own clear ran in its temporary folder, so after a node-lost retry or a Ray resume
    effective/<engine>/ held the records of two starts, and the report summarised whichever had the lower pid."""
    plan = plan_for()
    engine = plan.groups[0][0]
    old = tmp_path / "results" / "effective" / engine.id / "effective-rank0-pid1.json"
    old.parent.mkdir(parents=True)
    old.write_text("{}")

    def script(task, node):
        events = events_ok(task, node)
        new = (f"effective/{task.engine.id}/effective-rank0-pid{100 + task.attempt}.json", b"{}")
        return [events[0], {"event": "sync", "files": [new], "appends": []}, *events[1:]]

    run(plan, script)
    assert sorted(p.name for p in old.parent.iterdir()) == ["effective-rank0-pid100.json"]
