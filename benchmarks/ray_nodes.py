"""Benchmark: wall time of the same small CPU sweep (tests/data/e2e-cpu.toml: 2 engine configs x 2 points) run
locally, and with `--ray` on a local Ray cluster of one node and of two nodes (tests/helpers/ray_cluster.py).
On one machine the "nodes" share its cores: two servers start at once on the same CPUs, so this measures the
scheduling and the overhead of the Ray path, not what two real machines gain. Prints a JSON summary.

Usage: python benchmarks/ray_nodes.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.results.store import SweepStore  # noqa: E402
from tests.helpers.ray_cluster import RAY_ENV, start_cluster, stop_cluster  # noqa: E402

PROFILE = REPO / "tests" / "data" / "e2e-cpu.toml"


def sweep(out: Path, *extra: str) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "sweep", str(PROFILE), "--out", str(out), "--quiet", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, **RAY_ENV},
    )
    wall = time.monotonic() - t0
    points = list(SweepStore(out).records().values())
    ready = sorted({round(p.server.ready_s, 1) for p in points if p.status == "ok" and p.server.ready_s is not None})
    return {
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "ok": sum(p.status == "ok" for p in points),
        "ready_s": ready,
    }


def on_cluster(folder: Path, workers: int) -> dict:
    t0 = time.monotonic()
    address, nodes = start_cluster(folder, workers)
    started = time.monotonic() - t0
    try:
        result = sweep(folder / "results", "--ray", address)
    finally:
        stop_cluster(nodes)
    return {**result, "cluster_start_s": round(started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-rn-", dir="/tmp"))  # short: Unix socket paths live below it
    try:
        summary = {
            "cpu_count": os.cpu_count(),
            "local": sweep(base / "local"),
            "ray_1_node": on_cluster(base / "one", 0),
            "ray_2_nodes": on_cluster(base / "two", 1),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
