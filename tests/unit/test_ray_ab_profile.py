"""`ab --ray`, `profile --ray` and `sweep --ray-same-nodes` against the scripted Ray of test_ray_driver: the pins a
round's second side gets, a pinned node lost before its config started, a profiled point's files landing in the
driver's results directory, the node table under an A/B comparison, and the argument plumbing of the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.commands import ab
from bench.commands import sweep as sweep_module
from bench.commands.profile_point import ProfileJob, run_profile
from bench.config.plan import Plan
from bench.core.errors import BenchError
from bench.distributed import ab_rounds, driver
from bench.distributed.ledger import engine_nodes, same_nodes_as
from bench.distributed.placement import NSYS_ON_NODE
from tests.unit import test_ray_driver as scripted_ray
from tests.unit.test_ray_driver import events_ok, plan_for

run, scripted = scripted_ray.run, scripted_ray.scripted  # the scripted Ray's fixtures


def test_same_nodes_pins_each_engine_to_its_node_while_that_node_is_alive(run):
    plan = plan_for()
    (first, _), (second, _) = plan.groups
    pinned: list = []
    _, _, _, attempts = run(plan, events_ok, pins={first.id: "n2", second.id: "n9"}, pinned=pinned)
    assert pinned == ["n2", None], "n9 is no node of the cluster: that config runs anywhere"
    assert {a["engine_id"]: a["pinned"] for a in attempts} == {first.id: "n2", second.id: None}


def test_a_pinned_config_whose_node_is_gone_before_it_started_runs_once_more_anywhere(run, monkeypatch):
    monkeypatch.setattr(driver, "CHECK_S", -1.0)  # check queued work after every step
    plan = plan_for()
    (first, _), (second, _) = plan.groups
    pinned: list = []
    # The scripted Ray steps the first task in flight; the second (pinned to n2, which read_cluster no longer
    # lists) is still queued when the check runs.
    store, fake, _, attempts = run(plan, events_ok, pins={second.id: "n2"}, pinned=pinned)
    assert pinned == [None, "n2", None], "the re-run has no pin"
    assert [(a["engine_id"], a["outcome"], a["pinned"]) for a in attempts] == [
        (second.id, "node-lost", "n2"),
        (first.id, "ok", None),
        (second.id, "ok", None),
    ]
    assert len(fake.cancelled) == 1
    assert {p.status for p in store.records().values()} == {"ok"}
    log = store.log_path(second.id).read_text()
    assert "its --ray-same-nodes node is gone" in log


def no_local_server(*args, **kwargs):
    raise AssertionError("a --ray run started a server on the driver's machine")


def profiled_events(task, node):
    """A node that ran its points with a timing capture: the timing files come with the point, the analysis
    with the last sync, the capture result (paths relative to the node's results directory) with the end."""
    events = events_ok(task, node)
    events[0]["python"] = "/node/python"
    base = f"profile/capture-{task.engine.id}"
    for event in events:
        if event["event"] == "point":
            event["files"].insert(0, (f"{base}.timing/timing-pid7.jsonl", b'{"range": "bench.step"}\n'))
    events[-2]["files"] = [(f"{base}.analysis/summary.parquet", b"PAR1")]
    capture = {"engine_id": task.engine.id, "mode": "timing", "bench_ranges": 3}
    events[-1]["captures"] = [{**capture, "tables": {"summary": f"{base}.analysis/summary.parquet"}}]
    return events


def test_profile_on_ray_runs_the_point_on_a_node_and_its_files_land_in_the_drivers_folder(
    scripted, tmp_path, monkeypatch
):
    monkeypatch.setattr(sweep_module, "run_engine", no_local_server)
    plan = plan_for()
    engine, points = plan.groups[0]
    single = Plan(plan.profile, plan.machine, [(engine, points[:1])], [])
    job = ProfileJob(single, points[0], tmp_path / "prof", NSYS_ON_NODE, True, "addr")
    fake, _ = scripted(profiled_events)
    outcome = run_profile(job)
    (task,) = fake.tasks
    assert [p.id for p in task.points] == [points[0].id]
    assert task.capture and task.nsys == NSYS_ON_NODE and task.python == sys.executable
    assert outcome.point_error is None and outcome.capture_error is None
    root = (tmp_path / "prof").resolve()
    base = root / "profile" / f"capture-{engine.id}"
    assert (base.with_suffix(".timing") / "timing-pid7.jsonl").read_bytes() == b'{"range": "bench.step"}\n'
    assert (base.with_suffix(".analysis") / "summary.parquet").read_bytes() == b"PAR1"
    assert outcome.captures == [
        {
            "engine_id": engine.id,
            "mode": "timing",
            "bench_ranges": 3,
            "tables": {"summary": f"{base}.analysis/summary.parquet"},
        }
    ]
    assert json.loads((root / "profile" / "captures.json").read_text()) == outcome.captures
    attempts = json.loads((root / "cluster.json").read_text())["runs"][-1]["attempts"]
    assert [(a["python"], a["outcome"]) for a in attempts] == [("/node/python", "ok")]


# --- ab --ray ---------------------------------------------------------------------------------------------------

NODES = {"n-head": ("head/n-head", "H200"), "n-w1": ("w1/n-w1", "H200"), "n-w2": ("w2/n-w2", "H100")}


def write_ledger(root: Path, node_id: str, python: str = "/envs/side/bin/python", ran: str | None = None) -> None:
    nodes = [{"node_id": n, "name": name.split("/")[0], "slots": 8, "kind": kind} for n, (name, kind) in NODES.items()]
    attempt = {"engine_id": "e1", "attempt": 0, "node_id": node_id, "node": NODES[node_id][0], "outcome": "ok"}
    attempt |= {"points_recorded": ["p1"], "points_lost": [], "pinned": None, "python": ran or python}
    root.mkdir(parents=True, exist_ok=True)
    (root / "cluster.json").write_text(
        json.dumps({"runs": [{"python": python, "nodes": nodes, "attempts": [attempt]}]})
    )


@pytest.fixture
def ab_on_ray(monkeypatch, tmp_path):
    """run_ab with the sweeps replaced: each writes the ledger a --ray sweep would (round 3's candidate lands on an
    H100 node, the rest on n-head) and records its argv; the comparison itself is stubbed."""
    import bench.verdicts.compare as compare

    calls: list[list[str]] = []

    def fake_run(env, args):
        calls.append(args)
        if args[0] == "sweep":
            out = Path(args[args.index("--out") + 1])
            write_ledger(out, "n-w2" if out.parts[-2:] == ("candidate", "round-3") else "n-head")
        return 0

    monkeypatch.setattr(ab, "_run", fake_run)
    monkeypatch.setattr(compare, "compare_dirs", lambda a, b, **_: {"dirs": (a, b)})
    monkeypatch.setattr(compare, "compare_markdown", lambda result, relative_to=None: "# compare\n")
    monkeypatch.setattr(compare, "outcome", lambda result: (0, "no regression"))
    return calls, tmp_path / "ab"


def test_ab_on_ray_runs_each_rounds_second_side_on_the_first_sides_nodes_and_tables_them(ab_on_ray, capsys):
    calls, out = ab_on_ray
    env = ab.Env("/envs/side/bin/python", None)
    assert ab.run_ab("tiny", env, env, rounds=4, out=out, ray="10.0.0.1:6379", correction="none") == 0
    sweeps = [c for c in calls if c[0] == "sweep"]
    assert len(sweeps) == 8 and all(c[c.index("--ray") + 1] == "10.0.0.1:6379" for c in sweeps)
    pins = [
        (c[c.index("--out") + 1], c[c.index("--ray-same-nodes") + 1] if "--ray-same-nodes" in c else None)
        for c in sweeps
    ]
    rel = [(str(Path(o).relative_to(out)), p and str(Path(p).relative_to(out))) for o, p in pins]
    assert rel == [
        ("baseline/round-0", None),
        ("candidate/round-0", "baseline/round-0"),
        ("candidate/round-1", None),
        ("baseline/round-1", "candidate/round-1"),
        ("baseline/round-2", None),
        ("candidate/round-2", "baseline/round-2"),
        ("candidate/round-3", None),
        ("baseline/round-3", "candidate/round-3"),
    ]
    text = (out / "compare.md").read_text()
    assert text.startswith("# compare\n\n## Nodes (ab --ray)")
    assert "| 0 | e1 | head/n-head (H200) | head/n-head (H200) | same node |" in text
    assert "| 3 | e1 | head/n-head (H200) | w2/n-w2 (H100) | OTHER NODE TYPE (H200 vs H100) |" in text
    assert "3 of 4 round pairs ran on the same node; 1 on another node type." in text
    assert capsys.readouterr().out.rstrip("\n") == text.rstrip("\n")


def test_ab_on_ray_refuses_a_patch_suffix_and_a_side_that_ran_another_python(ab_on_ray, monkeypatch):
    calls, out = ab_on_ray
    env = ab.Env("/envs/side/bin/python", None)
    with pytest.raises(BenchError, match="sets the patch state of this machine's vLLM only"):
        ab.run_ab(
            "tiny", ab.Env("/envs/a/bin/python", "patched"), env, rounds=4, out=out, ray="auto", correction="none"
        )
    assert calls == [], "refused before anything ran"
    write_ledger(out / "baseline" / "round-0", "n-w1", ran="/usr/bin/python3")
    with pytest.raises(BenchError, match=r"baseline round 0 did not run its environment .*/usr/bin/python3 on w1/n-w1"):
        ab_rounds.check_side(out, "baseline", 0)


def test_the_ledger_gives_the_last_node_that_recorded_points(tmp_path):
    with pytest.raises(BenchError, match="no cluster.json"):
        same_nodes_as(tmp_path)
    lost = {"engine_id": "e1", "node_id": "n-w1", "node": "w1", "points_recorded": [], "python": "/p"}
    ran = {"engine_id": "e1", "node_id": "n-head", "node": "head", "points_recorded": ["p1"], "python": "/p"}
    runs = [{"nodes": [{"node_id": "n-head", "kind": "H200"}], "attempts": [ran, lost]}]
    (tmp_path / "cluster.json").write_text(json.dumps({"runs": runs}))
    assert engine_nodes(tmp_path) == {"e1": {"node_id": "n-head", "node": "head", "kind": "H200", "python": "/p"}}
    assert same_nodes_as(tmp_path) == {"e1": "n-head"}


def test_same_nodes_needs_ray():
    from bench.commands.sweep import SweepRequest, sweep

    with pytest.raises(BenchError, match="--ray-same-nodes needs --ray"):
        sweep(SweepRequest(profile="tiny", ray_same_nodes=Path("x")))


def test_cli_passes_ray_to_ab_profile_and_sweep(monkeypatch, tmp_path):
    from bench.cli import main
    from bench.commands import profile_point as point_module

    seen: dict = {}
    monkeypatch.setattr(ab, "run_ab", lambda *args, **kw: seen.setdefault("ab", kw) and 0)
    monkeypatch.setattr(ab, "parse_env", lambda spec, extra=None: spec)
    assert main(["ab", "tiny", "--baseline", "a", "--candidate", "b", "--rounds", "4", "--ray", "h:1"]) == 0
    assert seen["ab"]["ray"] == "h:1" and seen["ab"]["rounds"] == 4

    def stop(request):
        seen["profile"] = request
        raise BenchError("stop here")

    monkeypatch.setattr(point_module, "prepare_profile", stop)
    assert main(["profile", "tiny", "--no-nsys", "--ray"]) == 1
    assert seen["profile"].ray == "auto" and seen["profile"].no_nsys

    def fake_sweep(request):
        seen["sweep"] = request
        raise BenchError("stop here")

    monkeypatch.setattr(sweep_module, "sweep", fake_sweep)
    assert main(["sweep", "tiny", "--ray", "h:1", "--ray-same-nodes", str(tmp_path)]) == 1
    assert (seen["sweep"].ray, seen["sweep"].ray_same_nodes) == ("h:1", tmp_path)


def test_sweep_hands_the_same_nodes_of_an_earlier_directory_to_the_ray_driver(monkeypatch, tmp_path):
    from bench.commands.sweep import SweepRequest, sweep
    from bench.distributed import planning

    write_ledger(tmp_path / "first", "n-w1")
    seen: dict = {}
    monkeypatch.setattr(planning, "ray_plan", lambda *args, **kw: plan_for())
    monkeypatch.setattr(driver, "run_on_ray", lambda ctx, todo, address, pins=None: seen.update(pins=pins))
    monkeypatch.setattr(sweep_module, "build_report_safely", lambda root: None)
    request = SweepRequest(profile="tiny", out=tmp_path / "second", ray="h:1", ray_same_nodes=tmp_path / "first")
    sweep(request)
    assert seen["pins"] == {"e1": "n-w1"}


def test_an_engine_whose_points_ran_on_two_nodes_is_not_called_same_node(tmp_path):
    """Found in review: only the last node that recorded an engine's points was kept, so a baseline whose early
    points ran on A and later ones on B (a node-lost retry) read "same node" beside a candidate pinned to B."""
    from bench.distributed.ledger import engine_node_sets

    first = {"engine_id": "e1", "node_id": "n-head", "node": "head/n-head", "points_recorded": ["p1"], "python": "/p"}
    retry = {**first, "node_id": "n-w2", "node": "w2/n-w2", "points_recorded": ["p2"]}
    nodes = [{"node_id": "n-head", "kind": "H200"}, {"node_id": "n-w2", "kind": "H100"}]
    base = tmp_path / "baseline" / "round-0"
    base.mkdir(parents=True)
    (base / "cluster.json").write_text(json.dumps({"runs": [{"nodes": nodes, "attempts": [first, retry]}]}))
    write_ledger(tmp_path / "candidate" / "round-0", "n-w2")
    assert [n["node_id"] for n in engine_node_sets(base)["e1"]] == ["n-head", "n-w2"]
    text = ab_rounds.nodes_markdown(tmp_path, 1)
    assert "| SPLIT over several nodes; OTHER NODE TYPE (H200 vs H100) |" in text
    assert "0 of 1 round pairs ran on the same node; 1 on another node type." in text
