"""The report's server table (bench.report.servers) from real H200 server logs of tests/data."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.report.build import build_report
from bench.report.servers import server_table
from bench.store import SweepStore

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "results" / "tiny-gpu-h200"


def test_one_row_per_engine_with_vllms_own_startup_lines():
    table = server_table(EXAMPLE, SweepStore(EXAMPLE).records()).set_index("engine_id")
    assert set(table.index) == {p.name[len("server-") : -len(".log")] for p in (EXAMPLE / "logs").glob("*.log")}
    row = table.loc["3397f50986de"]
    assert (row.model_gib, row.kv_tokens, row.init_s, row.starts) == ("0.3", "12,805,664", "46.22", 1)
    assert row.ready_s is not None and float(row.ready_s) > 0


def test_a_log_with_two_starts_shows_each_starts_value_and_a_missing_log_no_row(tmp_path):
    root = Path(shutil.copytree(EXAMPLE, tmp_path / "r"))
    log = root / "logs" / "server-3397f50986de.log"
    log.write_text(
        log.read_text()
        + "INFO GPU KV cache size: 1,000 tokens\nINFO init engine (profile) took 9.5 s (compilation: 1 s)\n"
    )
    (root / "logs" / "server-7d1628a1b6a9.log").unlink()
    table = server_table(root, SweepStore(root).records()).set_index("engine_id")
    assert "7d1628a1b6a9" not in table.index
    row = table.loc["3397f50986de"]
    assert (row.kv_tokens, row.init_s, row.starts) == ("12,805,664/1,000", "46.22/9.5", 2)
    paths = build_report(root, tmp_path / "report")
    assert (
        "## Servers" in paths["summary"].read_text() and paths["servers_csv"].read_text().count("\n") == len(table) + 1
    )
