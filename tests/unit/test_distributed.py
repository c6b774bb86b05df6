"""The parts of `sweep --ray` that need no cluster: where each engine config goes (one node, several, none), the
dry-run text, which records a resume runs again, the ETA with a scripted clock, what a node sends back, and the
CLI flag. The cluster itself runs in tests/integration/test_ray_cpu.py."""

from __future__ import annotations

import io
import time

import pytest

from bench.cli import build_parser
from bench.commands.sweep import _needs_run
from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.hardware import Machine
from bench.distributed.placement import (
    CLUSTER_SKIP,
    Cluster,
    Node,
    describe_placements,
    described_cluster,
    engine_gpus,
    is_cluster_outcome,
    place,
    skip_reason,
)
from bench.distributed.worker import _FileSync
from bench.run.progress import PlainView, Tracker


def kimi_like(tp: int, pp: int = 1, dcp: list[int] | None = None):
    return parse_profile(
        {
            "name": "kimi-like",
            "hardware": {"platform": "gpu", "gpus": 8, "arch": "sm90"},
            "model": {"target": "/models/t", "draft": "/models/d", "weights": "real"},
            "server": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp},
            "axes": {
                "draft_attention_backend": ["TRITON_MLA"],
                "draft_kv_cache_dtype": ["auto"],
                "dcp_size": dcp or [1],
                "num_speculative_tokens": [3],
                "shapes": ["1x64x16", "8x64x16"],
            },
        },
        "gpu",
        "kimi-like.toml",
    )


def gpu_cluster(*slots: int) -> Cluster:
    return Cluster(tuple(Node(f"id{i}", f"n{i}", s) for i, s in enumerate(slots)), "GPU", "gpu", "addr")


def engine(tp: int, pp: int = 1):
    plan = make_plan(kimi_like(tp, pp), Machine("gpu", 64, "sm90"))
    return plan.groups[0][0]


def test_one_node_when_it_fits_else_the_fewest_nodes():
    assert engine_gpus(engine(8, 2)) == 16
    assert place(engine(8), gpu_cluster(8, 8)) == place(engine(8), gpu_cluster(8))
    assert (place(engine(8), gpu_cluster(8, 8)).nodes, place(engine(8), gpu_cluster(8, 8)).multi_node) == (1, False)
    spanning = place(engine(8, 2), gpu_cluster(8, 4, 8))
    assert (spanning.gpus, spanning.nodes, spanning.multi_node, spanning.problem) == (16, 2, True, None)
    assert place(engine(8, 2), gpu_cluster(4, 4, 4, 4)).nodes == 4


def test_a_cluster_too_small_is_a_reason_not_an_error():
    too_small = place(engine(8, 2), gpu_cluster(8))
    assert too_small.problem == "needs 16 GPU, the cluster has 1 nodes with GPU (n0/id0 x8)"
    assert skip_reason(too_small).startswith(CLUSTER_SKIP)
    cpu = Cluster((Node("a", "a", 0),), "bench_gpu", "cpu")
    assert "start nodes with --resources" in str(place(engine(1), cpu).problem)
    cpu2 = Cluster((Node("a", "a", 1), Node("b", "b", 1)), "bench_gpu", "cpu")
    assert "vLLM's Ray executor needs GPUs" in str(place(engine(2), cpu2).problem)


def test_described_cluster_and_dry_run_text():
    assert described_cluster("ray://head:10001", "gpu") is None
    two = described_cluster("2x8", "gpu")
    assert two is not None and (two.total, two.largest, two.resource, two.address) == (16, 8, "GPU", None)
    assert described_cluster("3x1", "cpu").resource == "bench_gpu"  # type: ignore[union-attr]
    plan = make_plan(kimi_like(8, 2), Machine("gpu", 16, "sm90"))
    text = describe_placements(plan, two)
    assert "16 GPU on 2 nodes, vLLM's Ray executor  MULTI-NODE" in text
    assert "1 of 1 engine configs need more than one node" in text and "(described, not connected)" in text
    plan = make_plan(kimi_like(8, dcp=[1, 2, 4, 8]), Machine("gpu", 16, "sm90"))
    assert "0 of 4 engine configs need more than one node" in describe_placements(plan, two)


@pytest.mark.parametrize(
    ("record", "runs_again"),
    [
        (None, True),
        ({"status": "ok"}, False),
        ({"status": "skipped", "reason": "CPU has no fp8 KV cache"}, False),
        ({"status": "skipped", "reason": CLUSTER_SKIP + "needs 16 GPU"}, True),
        ({"status": "failed", "reason": "node-lost"}, True),
        ({"status": "failed", "reason": "crash"}, False),
    ],
)
def test_resume_runs_again_what_the_cluster_stopped(record, runs_again):
    from bench.results.records import new_point

    typed = None
    if record is not None:
        base = {"point_id": "p", "engine_id": "e", "config": {"engine": {}}}
        typed = new_point({**base, **record, **({"metrics": {}} if record["status"] == "ok" else {})})
    assert _needs_run(typed, rerun_failed=False) is runs_again
    assert typed is None or is_cluster_outcome(typed) is runs_again


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_eta_from_measured_startup_and_point_times():
    clock = Clock()
    tracker = Tracker(total=6, lanes_max=2, clock=clock)
    for key in ("a", "b", "c"):
        tracker.add(key, key.upper(), 2)
    tracker.phase("a", "loading")
    assert tracker.eta_s() is None and tracker.headline() == "0/6 points, ETA ?"
    clock.t = 100.0
    tracker.phase("a", "running", 1)  # start-up measured: 100 s
    clock.t = 110.0
    tracker.point_done("a")  # one point: 10 s
    tracker.phase("a", "running", 2)
    # a: 1 point left (10 s); b and c queued: 100 + 2 x 10 each -> (10 + 120 + 120) / 2 lanes = 125 s
    assert tracker.eta_s() == pytest.approx(125.0)
    tracker.phase("b", "loading")
    clock.t = 150.0  # b has loaded for 40 s: 60 s of start-up left
    assert tracker.eta_s() == pytest.approx(120.0), "c alone: 100 s start-up + 2 points of 10 s"
    tracker.end("c", lost_points=0, requeued=0)
    tracker.total -= 2
    assert tracker.eta_s() == pytest.approx(80.0), "never less than the longest lane"
    out = io.StringIO()
    PlainView(tracker, out).changed("a", "point x ok")
    assert out.getvalue() == "[ray 1/4 points, ETA 1.3 min] - A: running point 2 of 2 point x ok\n"


def test_node_sends_changed_files_with_the_point_record_last_and_log_increments(tmp_path):
    for rel, data in [
        ("raw/p1.parquet", b"raw"),
        ("points/p1.json", b"{}"),
        ("effective/e/effective-rank0.json", b"{}"),
        ("run/e/rpc/socket", b"scratch"),
        ("logs/server-e.pgid", b"123"),
        ("points/.p2.json.x.tmp", b"partial"),
        ("profile/captures.json", b"[]"),
        ("logs/server-e.log", b"line 1\n"),
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    sync = _FileSync(tmp_path)
    first = sync.collect()
    assert [rel for rel, _ in first["files"]] == [
        "effective/e/effective-rank0.json",
        "raw/p1.parquet",
        "points/p1.json",
    ]
    assert first["appends"] == [("logs/server-e.log", b"line 1\n")]
    with open(tmp_path / "logs/server-e.log", "ab") as fh:
        fh.write(b"line 2\n")
    time.sleep(0.01)
    (tmp_path / "raw/p1.parquet").write_bytes(b"raw, rewritten")
    assert sync.collect(logs_only=True) == {"files": [], "appends": [("logs/server-e.log", b"line 2\n")]}
    assert sync.collect() == {"files": [("raw/p1.parquet", b"raw, rewritten")], "appends": []}


def test_cli_ray_flag():
    parse = build_parser().parse_args
    assert parse(["sweep", "tiny"]).ray is None
    assert parse(["sweep", "tiny", "--ray"]).ray == "auto"
    assert parse(["sweep", "tiny", "--ray", "10.0.0.1:6379"]).ray == "10.0.0.1:6379"


def test_a_runner_killed_by_a_signal_is_a_lost_worker_one_that_failed_is_an_error(tmp_path):
    from bench.distributed.worker import RUNNER_LOG, _end

    (tmp_path / RUNNER_LOG).parent.mkdir(parents=True)
    (tmp_path / RUNNER_LOG).write_text("Traceback ...\nMemoryError\n")
    killed = _end(tmp_path, None, -9)
    assert killed["lost"] is True and "code -9" in killed["error"] and "MemoryError" in killed["error"]
    failed = _end(tmp_path, None, 1)
    assert failed["lost"] is False and "code 1" in failed["error"]
    root = str(tmp_path)
    done = {"error": None, "captures": [{"tables": {"summary": f"{root}/profile/capture-e.analysis/s.parquet"}}]}
    finished = _end(tmp_path, done, 0)
    assert finished == {
        "event": "end",
        "error": None,
        "lost": False,
        "captures": [{"tables": {"summary": "profile/capture-e.analysis/s.parquet"}}],
    }


def test_the_ledger_keeps_earlier_runs(tmp_path):
    from bench.core.errors import BenchError
    from bench.distributed.ledger import read_ledger as _read_ledger

    assert _read_ledger(tmp_path / "cluster.json") == {"runs": []}
    (tmp_path / "cluster.json").write_text('{"runs": [{"attempts": []}]}')
    assert _read_ledger(tmp_path / "cluster.json") == {"runs": [{"attempts": []}]}
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(BenchError, match="move it away"):
        _read_ledger(tmp_path / "cluster.json")


def test_rich_view_draws_one_row_per_engine_config_in_flight():
    from bench.run.progress import RichView, make_view

    tracker = Tracker(total=4, lanes_max=2, clock=Clock())
    tracker.add("a", "CPU_MLA/auto dcp1 k2", 2)
    tracker.node("a", "head/abc123")
    tracker.phase("a", "capturing")
    out = io.StringIO()
    view = RichView(tracker, out)
    view.changed("a")
    view.close()
    text = out.getvalue()
    assert "ray: 0/4 points, ETA ?" in text and "head/abc123" in text and "capturing" in text
    assert type(make_view(tracker, quiet=False, stream=io.StringIO())) is PlainView  # not a terminal


def test_a_ray_address_nothing_answers_is_a_user_error_at_once():
    from bench.core.errors import BenchError
    from bench.distributed.cluster import _check_reachable

    t0 = time.monotonic()
    with pytest.raises(BenchError, match="no Ray head answers there"):
        _check_reachable("127.0.0.2:1")
    assert time.monotonic() - t0 < 5
    _check_reachable("auto")  # resolved by Ray itself


def test_the_gpu_arch_comes_from_the_nodes_accelerator_types():
    from bench.distributed.cluster import accelerator_arch

    def of(*kinds: str) -> str | None:
        return accelerator_arch(Cluster(tuple(Node(k, k, 8, k) for k in kinds), "GPU", "gpu"))

    assert of("H200", "H100") == "sm90" and of("B200") == "sm100"
    assert of("H200", "B200") is None and of("", "") is None and of("X9") is None
