"""A measured column is declared once (bench/report/result_fields.py) and reaches summary.md and report.html."""

from pathlib import Path

import pandas as pd

from bench.report import analysis as A
from bench.report import result_fields
from bench.report.html import render_html
from bench.report.markdown import summary_markdown
from bench.report.tables import points_table, provenance

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "results" / "tiny-gpu-h200"


def test_one_declaration_reaches_both_reports(monkeypatch):
    added = result_fields.ResultField("e2e_p99_ms", "E2E p99 (added)", 1)
    monkeypatch.setattr(result_fields, "RESULT_FIELDS", (*result_fields.RESULT_FIELDS, added))
    md = summary_markdown(points_table(EXAMPLE), provenance(EXAMPLE))
    assert "| E2E p99 (added) |" in md
    page = render_html(A.collect(EXAMPLE), {})
    assert "E2E p99 (added)" in page


def test_precision_columns_follow_their_figures():
    points = pd.DataFrame({"throughput_halfwidth": [0.0312, None], "tpot_halfwidth": [0.004, float("nan")]})
    shown = result_fields.with_precision(points)
    assert shown.throughput_pm[0] == "3.1%" and shown.tpot_pm[0] == "0.4%"
    assert pd.isna(shown.throughput_pm[1]) and pd.isna(shown.tpot_pm[1])  # no precision: shown as missing
    md, html = result_fields.markdown_columns(), result_fields.html_columns(pd.DataFrame())
    for figure, pm in (("output_throughput", "throughput_pm"), ("tpot_p50_ms", "tpot_pm")):
        for columns in (md, html):
            keys = list(columns)
            assert keys.index(pm) == keys.index(figure) + 1  # the +- sits right after what it qualifies


def test_an_optional_column_shows_only_where_a_point_has_it():
    """vLLM's own token count against the client's (`served_token_ratio`) is in no record from before it: report.html
    leaves the column out for such a sweep instead of a column of dashes."""
    column = "served_token_ratio"
    assert column not in result_fields.html_columns(pd.DataFrame({column: [None, float("nan")]}))
    assert column not in result_fields.html_columns(pd.DataFrame({"x": [1]}))
    assert column in result_fields.html_columns(pd.DataFrame({column: [None, 1.0]}))
