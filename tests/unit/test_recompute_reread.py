"""`bench report DIR --recompute` reads again what a results directory keeps besides its raw rows: a failed point's
reason from its server log (signatures learned since), an ok point's effective configuration (fields learned
since, e.g. the KV cache size). On a copy of the H200 DCP example's records (reports/examples/kimi-rank-h200-dcp: its
patched sweep and its FULL-graphs run, reports left out) kept under tests/data, so the example can grow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.measure.recompute import recompute

DATA = Path(__file__).resolve().parents[1] / "data" / "results" / "kimi-rank-dcp-h200"


def test_a_failed_point_is_classified_again_from_its_log(tmp_path):
    run = shutil.copytree(DATA / "full-graphs-dcp", tmp_path / "dcp")
    path = next((run / "points").glob("*.json"))
    record = json.loads(path.read_text())
    assert record["reason"] == "dcp-spec-full-cudagraph" and record["reason_recorded"] == "engine-dead"
    record["reason"], record["detail"] = record.pop("reason_recorded"), "as first recorded"  # as the run wrote it
    path.write_text(json.dumps(record))
    assert record["point_id"] in recompute(run)
    again = json.loads(path.read_text())
    assert again["reason"] == "dcp-spec-full-cudagraph" and again["reason_recorded"] == "engine-dead"
    assert "reorder_batch_threshold" in again["detail"] and again["recomputed"]["at"]
    assert record["point_id"] not in recompute(run)  # nothing new to learn the second time


def test_an_ok_point_gets_the_kv_cache_size_from_its_log(tmp_path):
    run = shutil.copytree(DATA / "sweep", tmp_path / "sweep")
    for path in (run / "points").glob("*.json"):
        record = json.loads(path.read_text())
        record["effective"].pop("kv_cache_tokens")
        path.write_text(json.dumps(record))
    recompute(run)
    tokens = {
        json.loads(p.read_text())["config"]["engine"]["dcp_size"]: json.loads(p.read_text())["effective"][
            "kv_cache_tokens"
        ]
        for p in (run / "points").glob("*.json")
    }
    assert tokens == {1: 1_317_696, 4: 5_304_064}


def test_the_executors_flags_survive_a_recompute(tmp_path):
    """`mismatch` holds the effective configuration's differences and the executor's flags (queueing, prefix-cache
    hits...): a recompute derives the first again and keeps the second (it dropped them before 2026-12-07)."""
    run = shutil.copytree(DATA / "sweep", tmp_path / "sweep")
    path = next((run / "points").glob("*.json"))
    record = json.loads(path.read_text())
    flag = "contaminated: queueing (a scripted flag)"
    record["mismatch"] = [*record.get("mismatch", []), flag]
    path.write_text(json.dumps(record))
    recompute(run)
    again = json.loads(path.read_text())
    assert flag in again["mismatch"] and again["mismatch"].count(flag) == 1
