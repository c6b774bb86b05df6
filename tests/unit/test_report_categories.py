"""The per-category acceptance in the report: a table and a plot for sweeps with workloads (the committed CPU
example), nothing new in the reports of sweeps without them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.report.analysis import collect
from bench.report.build import build_report
from bench.report.figures import draw_all
from bench.report.html import render_html
from bench.report.markdown import summary_markdown
from bench.report.tables import points_table, provenance

REPO = Path(__file__).resolve().parents[2]
TEXT = REPO / "tests" / "data" / "results" / "tiny-text-cpu"  # copies of the examples of these names
RANDOM = REPO / "tests" / "data" / "results" / "tiny-gpu-h200"


def test_category_table_has_a_row_per_point_and_category():
    data = collect(TEXT)
    table = data.categories
    rows = {(r.load, r.category) for r in table.itertuples()}
    assert ("mt-bench t0-max24 c4", "roleplay") in rows and ("notes t1-max16 c3", "garden") in rows
    assert len(table) == 4 + 3 + 3 + 1 and set(table.series) == {"CPU_MLA/auto"}
    greedy = table[~table.load.str.contains("t1")]
    assert (greedy.mean_acceptance_length == 4.0).all() and (greedy[["pos1", "pos2", "pos3"]] == 1.0).all().all()
    assert set(table.acceptance_source) == {"per-request"}
    assert draw_all(data)["categories"][:8] == b"\x89PNG\r\n\x1a\n"
    page = render_html(data, draw_all(data))
    assert 'id="categories"' in page and 'href="#categories"' in page and "Acceptance per workload and category" in page


def test_summary_has_the_category_section_and_the_workload_column():
    text = summary_markdown(points_table(TEXT), provenance(TEXT))
    assert "## Acceptance per workload and category" in text
    assert "| CPU_MLA/auto | mt-bench t0-max24 c4 | math | 4 |" in text
    assert "| k | workload | conc. |" in text


def test_sweeps_without_workloads_get_no_category_section():
    data = collect(RANDOM)
    assert not len(data.categories) and "categories" not in draw_all(data)
    page = render_html(data, draw_all(data))
    assert 'id="categories"' not in page and "#categories" not in page
    assert "Acceptance per workload" not in summary_markdown(points_table(RANDOM), provenance(RANDOM))


def test_build_writes_categories_csv_for_workloads(tmp_path):
    paths = build_report(TEXT, tmp_path / "report")
    table = pd.read_csv(paths["categories_csv"])
    assert (
        len(table) == 11
        and "per_position_acceptance" in table
        and table.per_position_acceptance[0] == "1.0000/1.0000/1.0000"
    )
    assert "categories" not in pd.read_csv(paths["points_csv"]).columns
