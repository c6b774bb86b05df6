from pathlib import Path

import pandas as pd

from bench.report.build import build_report
from bench.report.markdown import md_table
from bench.report.tables import points_table

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "reports" / "examples" / "tiny-gpu-h200"


def test_summary_of_committed_h200_results_matches_golden(tmp_path):
    paths = build_report(EXAMPLE, tmp_path)
    golden = (REPO / "tests" / "data" / "golden" / "tiny-gpu-h200-summary.md").read_text()
    assert paths["summary"].read_text() == golden
    df = pd.read_csv(paths["points_csv"])
    assert len(df) == 12 and (df.status == "ok").sum() == 6
    assert set(df[df.status == "failed"].reason) == {"invalid-backend-combination"}


def test_points_table_values_from_records():
    df = points_table(EXAMPLE)
    ok = df[df.status == "ok"]
    # Synthetic acceptance 0.65/0.40/0.25 was asked: the measured per-position rates come close.
    for rates in ok.per_position_acceptance:
        assert abs(rates[0] - 0.65) < 0.03 and abs(rates[1] - 0.40) < 0.03 and abs(rates[2] - 0.25) < 0.03
    assert (ok.mean_acceptance_length - (1 + ok.per_position_acceptance.map(sum))).abs().max() < 1e-9
    assert set(ok.target_attention_backend_ran) == {"FLASH_ATTN_MLA"}


def test_md_table_renders_missing_as_dash():
    df = pd.DataFrame([{"a": None, "b": 1234.5678, "c": [0.5, 0.25]}])
    assert md_table(df, {"a": ("A", 0), "b": ("B", 1), "c": ("C", 2)}) == (
        "| A | B | C |\n|---|---|---|\n| - | 1,234.6 | 0.50/0.25 |"
    )


def test_report_of_a_sweep_with_only_skipped_points(tmp_path):
    from bench.store import SweepStore

    store = SweepStore(tmp_path / "s")
    store.write_manifest(
        {
            "created": "t",
            "profile": {"name": "x"},
            "plan": [],
            "counts": {},
            "environment": {
                "machine": {"platform": "cpu", "cpu": "c", "cpu_count": 2},
                "bench_version": "0",
                "suite_git": None,
                "python": "3",
                "vllm": {"problem": "no vllm"},
            },
        }
    )
    engine = {
        "draft_attention_backend": "CPU_MLA",
        "draft_kv_cache_dtype": "fp8",
        "dcp_size": 1,
        "num_speculative_tokens": 3,
        "acceptance": {"mode": "real"},
    }
    store.save_point(
        {
            "point_id": "a",
            "engine_id": "e",
            "status": "skipped",
            "reason": "CPU has no fp8 KV cache",
            "config": {"engine": engine, "shape": {"concurrency": 1, "input_len": 8, "output_len": 8}},
            "label": {"engine": "x", "shape": "1x8x8"},
        }
    )
    text = build_report(store.root)["summary"].read_text()
    assert "0 ok, 0 failed, 1 skipped." in text and "| CPU has no fp8 KV cache | - |" in text
