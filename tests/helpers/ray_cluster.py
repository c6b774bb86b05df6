"""A local Ray cluster for tests and benchmarks: `ray start --block` processes on loopback, one per node, each
leading a process group of its own (raylet, agents and the parent of its Ray workers), its temp dirs under one
folder, and a custom resource `bench_gpu` standing for the node's GPUs. Killing a node's group is a lost node."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.engine.server import group_alive

RAY = Path(sys.executable).with_name("ray")
HOST = "127.0.0.2"  # loopback; Ray turns 127.0.0.1 into the machine's outside address
# Every Ray process (nodes, drivers): no usage stats; no token (loopback only; a token file in ~/.ray would
# otherwise turn it on for some processes and not others).
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_node(name: str, folder: Path, *args: str, slots: int = 1) -> subprocess.Popen:
    """One node named `name`, its TMPDIR and Ray temp dir under folder/name; returns once Ray says it runs."""
    base = folder / name
    (base / "tmp").mkdir(parents=True)
    env = {**os.environ, **RAY_ENV, "TMPDIR": str(base / "tmp")}
    argv = [str(RAY), "start", "--block", "--node-ip-address", HOST, "--node-name", name, "--num-cpus", "2"]
    argv += ["--temp-dir", str(base / "ray"), "--resources", json.dumps({"bench_gpu": slots}), *args]
    log_path = base / "ray-start.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while b"Ray runtime started" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_node(proc)
            raise RuntimeError(f"ray node {name} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    return proc


def start_cluster(folder: Path, workers: int = 1) -> tuple[str, dict[str, subprocess.Popen]]:
    """A head and `workers` worker nodes; (address, {name: its `ray start` process})."""
    port = free_port()
    nodes = {"head": start_node("head", folder, "--head", "--port", str(port), "--include-dashboard", "false")}
    try:
        for i in range(workers):
            name = "worker" if workers == 1 else f"worker{i}"
            nodes[name] = start_node(name, folder, "--address", f"{HOST}:{port}")
    except BaseException:
        stop_cluster(nodes)
        raise
    return f"{HOST}:{port}", nodes


def stop_node(proc: subprocess.Popen) -> None:
    """SIGTERM the node's group, then SIGKILL what is left (by its group id: only what this node started)."""
    for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        # poll() reaps the node's own process: unreaped, it keeps the group alive for killpg until the deadline
        while time.monotonic() < deadline and (proc.poll() is None or group_alive(proc.pid)):
            time.sleep(0.2)
    proc.wait(timeout=30)


def stop_cluster(nodes: dict[str, subprocess.Popen]) -> None:
    for proc in reversed(list(nodes.values())):
        stop_node(proc)
