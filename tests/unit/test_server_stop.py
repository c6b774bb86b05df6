"""A stop lets the API server shut its engine down before the rest of the group gets SIGTERM (the order whose
absence made vLLM log an EngineDeadError at every stop), still ends a hung server within its grace, and
`--resume` stops the servers a killed earlier run left before it runs anything. Stand-in servers, no vLLM."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bench.commands.sweep import SweepOptions, run_sweep
from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.engine.server import Server, ServerSpec, free_port, record_group
from tests.conftest import processes_using
from tests.unit.test_executor import PROFILE, scripted  # noqa: F401 - scripted: the fixture
from tests.unit.test_guard import FAKE_SERVER, wait_until

# An API server that takes 0.5 s to begin its shutdown, then stops its engine itself; the engine says whether
# its SIGTERM came from the API server's shutdown (the flag file exists) or before it.
ORDERED_SERVER = textwrap.dedent("""
    import http.server, os, signal, subprocess, sys, time
    flag = os.path.join(os.environ["TMPDIR"], "api-stopping")
    engine = subprocess.Popen([sys.executable, "-c", '''
    import os, signal, sys, time
    def on_term(*_):
        when = "by the API server" if os.path.exists(sys.argv[1]) else "BEFORE the API server stopped it"
        print("engine: SIGTERM " + when, flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(0.1)
    ''', flag])
    def on_term(*_):
        time.sleep(0.5)
        open(flag, "w").close()
        engine.terminate()
        engine.wait()
        print("api: stopped", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def started(tmp_path, code: str) -> Server:
    port = free_port()
    server = Server(
        ServerSpec(
            [sys.executable, "-c", code, str(port)], {**os.environ, "TMPDIR": str(tmp_path)}, tmp_path / "s.log", port
        )
    )
    server.start(60)
    assert wait_until(lambda: len(server.pids()) >= 3, 10)  # guard, API server, engine
    return server


def test_the_api_server_stops_its_engine_before_the_group_is_signalled(tmp_path):
    server = started(tmp_path, ORDERED_SERVER)
    t0 = time.monotonic()
    server.stop(grace_s=20)
    log = (tmp_path / "s.log").read_text()
    assert "engine: SIGTERM by the API server" in log and "api: stopped" in log, log
    assert "engine: SIGTERM BEFORE" not in log
    assert time.monotonic() - t0 < 5 and not processes_using(tmp_path)


def test_a_hung_api_server_is_still_stopped_within_the_grace(tmp_path):
    server = started(tmp_path, FAKE_SERVER)
    api = [p for p in server.pids() if p != server.proc.pid]
    for pid in api:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    server.stop(grace_s=2)
    assert time.monotonic() - t0 < 6
    assert wait_until(lambda: not processes_using(tmp_path), 5), processes_using(tmp_path)


@pytest.mark.slow  # real process groups waited out: seconds each (the fast loop leaves it to CI)
def test_resume_stops_what_a_killed_run_left_before_running(scripted, caplog):  # noqa: F811
    _, run, out = scripted
    run()
    log = out / "logs" / "server-left.log"
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={**os.environ, "BENCH_SERVER_LOG": str(log.resolve())},
        start_new_session=True,
    )
    try:
        record_group(log, orphan.pid)
        caplog.set_level(logging.WARNING)
        plan = make_plan(parse_profile(PROFILE, "cpu", "scripted.toml"), Machine("cpu"))  # the fixture's
        run_sweep(plan, out, SweepOptions(resume=True, quiet=True))
        assert orphan.wait(timeout=15) is not None
        assert f"stopping server process group {orphan.pid}" in caplog.text
        assert not log.with_suffix(".pgid").exists()
    finally:
        orphan.kill()


def test_one_driver_per_results_directory(scripted):  # noqa: F811
    script, run, out = scripted
    out.mkdir(parents=True)
    with open(out / ".driver.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BenchError, match="another bench process is running a sweep in"):
            run()
    run()  # released: runs
    assert len(script["servers"]) == 1
