from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.core.fmt import fmt, human_bytes
from bench.report.build import build_report
from bench.report.markdown import md_table
from bench.report.tables import points_table
from tests.helpers import golden_summaries

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "data" / "results" / "tiny-gpu-h200"  # a copy of reports/examples/tiny-gpu-h200


def test_report_of_committed_h200_results_matches_golden(tmp_path):
    paths = build_report(EXAMPLE, tmp_path)
    assert paths["summary"].read_text() == golden_summaries.golden_path("tiny-gpu-h200").read_text()
    df = pd.read_csv(paths["points_csv"])
    assert len(df) == 12 and (df.status == "ok").sum() == 6
    assert set(df[df.status == "failed"].reason) == {"invalid-backend-combination"}


@pytest.mark.parametrize("name", sorted(golden_summaries.RESULTS))
def test_summary_matches_its_golden(name):
    """A few small results directories of tests/data and the summary.md each makes, so that a change of the report
    shows here as a diff of a small file (rewrite them with `python -m tests.helpers.golden_summaries`). The
    committed examples under reports/examples are checked by `bench report --check reports/examples`, a CI step of
    its own."""
    assert golden_summaries.rebuild(name) == golden_summaries.golden_path(name).read_text()


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
        "| A | B | C |\n|---|---|---|\n| - | 1,235 | 0.50/0.25 |"
    )


def test_md_table_formats_floats_and_keeps_integers_as_recorded():
    df = pd.DataFrame([{"n": 1024, "x": 2.0, "s": "a|b"}]).astype({"n": object})
    assert md_table(df, {"n": ("N", 1), "x": ("X", 0), "s": ("S", 2)}).endswith("| 1024 | 2 | a|b |")


@pytest.mark.parametrize(
    ("value", "spec", "missing", "text"),
    [
        (None, ".3f", "-", "-"),
        (float("nan"), ".3f", "n/a", "n/a"),
        (np.float64("nan"), None, "–", "–"),
        (pd.NA, ",.1f", "-", "-"),
        (1234.5678, ",.1f", "-", "1,235"),  # at most 4 significant digits (bench.core.fmt.SIGNIFICANT)
        (123.45678, ",.1f", "-", "123.5"),
        (np.float64(0.123456), ".1%", "-", "12.3%"),
        (3, ".3f", "-", "3.000"),
        (np.int64(7), None, "-", "7"),
        (True, ".3f", "-", "True"),
        ("TRITON_MLA", ".3f", "-", "TRITON_MLA"),
        ([0.5, None, 0.25], ".2f", "-", "0.50/-/0.25"),
        ([], ".2f", "–", "–"),
        ({"a": 1, "b": "x"}, None, "-", "a=1, b=x"),
        (1234, "bytes", "-", "1.23 KB"),
        (0.000123456, ".3g", "-", "0.000123"),
    ],
)
def test_fmt(value, spec, missing, text):
    assert fmt(value, spec, missing=missing) == text


def test_human_bytes_units():
    assert [human_bytes(n) for n in (999, 1000, 2.5e9, 7e15)] == ["999 B", "1.00 KB", "2.50 GB", "7,000 TB"]
    assert human_bytes(265_328_736) == "265.3 MB"


def test_report_of_a_sweep_with_only_skipped_points(tmp_path):
    from bench.results.records import new_point
    from bench.results.store import SweepStore

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
        new_point(
            {
                "point_id": "a",
                "engine_id": "e",
                "status": "skipped",
                "reason": "CPU has no fp8 KV cache",
                "config": {"engine": engine, "shape": {"concurrency": 1, "input_len": 8, "output_len": 8}},
                "label": {"engine": "x", "shape": "1x8x8"},
            }
        )
    )
    text = build_report(store.root)["summary"].read_text()
    assert "0 ok, 0 failed, 1 skipped." in text and "| CPU has no fp8 KV cache | - |" in text
