"""The guard stops a server's whole process group when the driver dies without stopping it (SIGKILL), and a
resumed run stops groups that outlived their guard. The server here is a stand-in (a /health answering process
with a child): the real vLLM path is tests/integration/test_sweep_cpu.py's driver-kill test."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from bench.engine.server import Server, ServerFailed, ServerSpec, free_port, record_group, stop_leftover_servers
from tests.conftest import processes_using

FAKE_SERVER = textwrap.dedent("""
    import http.server, subprocess, sys
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # an engine-core-like child
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")

DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from bench.engine.server import Server, ServerSpec
    folder, port, code = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    env = {**os.environ, "TMPDIR": str(folder)}
    server = Server(ServerSpec([sys.executable, "-c", code, str(port)], env, folder / "logs" / "s.log", port))
    server.start(60)
    print("ready", flush=True)
    time.sleep(600)
""")


def wait_until(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


@pytest.mark.slow  # real process groups waited out: seconds each (the fast loop leaves it to CI)
def test_sigkill_of_the_driver_stops_the_whole_server_group(tmp_path):
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(free_port()), FAKE_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert driver.stdout.readline().strip() == "ready"
        assert wait_until(lambda: len(processes_using(tmp_path)) >= 3, 10)  # guard, server, its child
        assert (tmp_path / "logs" / "s.pgid").exists()
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        assert wait_until(lambda: not processes_using(tmp_path), 15), processes_using(tmp_path)
        assert "driver gone" in (tmp_path / "logs" / "s.log").read_text()
    finally:
        driver.kill()
        for pid in processes_using(tmp_path):
            os.kill(pid, signal.SIGKILL)


def test_a_clean_stop_leaves_nothing_and_keeps_the_exit_code(tmp_path):
    port = free_port()
    server = Server(
        ServerSpec(
            [sys.executable, "-c", FAKE_SERVER, str(port)],
            {**os.environ, "TMPDIR": str(tmp_path)},
            tmp_path / "logs" / "s.log",
            port,
        )
    )
    server.start(60)
    assert server.pids() and server.health()
    server.stop(grace_s=5)
    assert wait_until(lambda: not processes_using(tmp_path), 5)
    assert not (tmp_path / "logs" / "s.pgid").exists()
    crash = Server(
        ServerSpec(
            [sys.executable, "-c", "import sys; sys.exit(3)"],
            dict(os.environ),
            tmp_path / "logs" / "c.log",
            free_port(),
        )
    )
    with pytest.raises(ServerFailed, match="exited with code 3"):
        crash.start(30)


@pytest.mark.slow  # real process groups waited out: seconds each (the fast loop leaves it to CI)
def test_resume_stops_groups_that_outlived_their_guard(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "server-x.log"
    mark = {**os.environ, "BENCH_SERVER_LOG": str(log.resolve())}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=mark, start_new_session=True)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        record_group(log, orphan.pid)
        record_group(logs / "server-y.log", stranger.pid)  # a pid that is not ours: left alone
        assert stop_leftover_servers(logs) == [orphan.pid]
        assert orphan.wait(timeout=15) is not None and stranger.poll() is None
        assert not list(logs.glob("*.pgid"))
    finally:
        orphan.kill()
        stranger.kill()


def test_a_deep_results_directory_still_gets_socket_paths_that_fit(tmp_path):
    """AF_UNIX paths hold 107 bytes and vLLM appends '/<uuid4>' to VLLM_RPC_BASE_PATH; a deep --out made every
    point crash. The env points at a short link into the run's own folder instead."""
    import socket
    import uuid

    from bench.engine.server import server_env

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    env = server_env(deep)
    base = Path(env["VLLM_RPC_BASE_PATH"])
    try:
        assert len(str(base)) + 37 < 107 and base.resolve() == (deep / "rpc").resolve()
        path = f"{base}/{uuid.uuid4()}"
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path)  # fails with "AF_UNIX path too long" on the deep path itself
        assert list((deep / "rpc").iterdir())  # the socket lives in the run's folder
        assert server_env(deep)["VLLM_RPC_BASE_PATH"] == str(base)  # idempotent
    finally:
        base.unlink(missing_ok=True)  # a link named by the folder: each run's tmp_path would leave a new one
    short = Path(tempfile.mkdtemp(prefix="b", dir="/tmp"))
    try:
        assert server_env(short)["VLLM_RPC_BASE_PATH"] == str((short / "rpc").resolve())  # short enough: as is
    finally:
        shutil.rmtree(short)


def test_model_inspections_are_shared_through_the_suite_cache(tmp_path, monkeypatch):
    """Every server's VLLM_CACHE_ROOT/modelinfos links to one folder in the suite's cache (vLLM's inspections of a
    model class, keyed by its module's bytes, then cost one process per machine rather than per start); a
    modelinfos that exists (a persistent BENCH_VLLM_CACHE's) is kept; a cache that cannot hold the folder leaves
    the start as it was."""
    from bench.engine.server import SHARED_INSPECTIONS, server_env, share_model_inspections

    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "suite"))
    shared = tmp_path / "suite" / SHARED_INSPECTIONS
    env_a, env_b = server_env(tmp_path / "a"), server_env(tmp_path / "b")
    for env in (env_a, env_b):
        link = Path(env["VLLM_CACHE_ROOT"]) / "modelinfos"
        assert link.is_symlink() and link.resolve() == shared.resolve()
    (Path(env_a["VLLM_CACHE_ROOT"]) / "modelinfos" / "x.json").write_text("{}")
    assert (Path(env_b["VLLM_CACHE_ROOT"]) / "modelinfos" / "x.json").read_text() == "{}"  # one folder
    assert share_model_inspections(Path(env_a["VLLM_CACHE_ROOT"])) is None  # already linked: left as is
    own = tmp_path / "persistent"
    (own / "modelinfos").mkdir(parents=True)
    assert share_model_inspections(own) is None and not (own / "modelinfos").is_symlink()
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "c").mkdir()
    assert share_model_inspections(tmp_path / "c") is None and not (tmp_path / "c" / "modelinfos").exists()
