"""A measured column is declared once (bench/report/result_fields.py) and reaches summary.md and report.html."""

from pathlib import Path

import pandas as pd

from bench.core.fmt import NO_PRECISION
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
    assert shown.throughput_pm[1] == shown.tpot_pm[1] == NO_PRECISION  # no precision: said one way (bench.core.fmt)
    md, html = result_fields.markdown_columns(pd.DataFrame()), result_fields.html_columns(pd.DataFrame())
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


def test_the_summary_says_how_far_vllms_counters_and_the_client_agree():
    from bench.report.markdown import _served_line

    ok = pd.DataFrame(
        {
            "served_token_ratio": [1.0, 1.0, None],
            "tpot_client_over_vllm": [0.998, 1.002, None],
            "ttft_client_minus_vllm_ms": [2.5, 4.1, None],
        }
    )
    (line, blank) = _served_line(ok)
    assert "over each window (2 of 3 points)" in line and "the tokens the client received: equal at every point" in line
    assert "Mean TPOT, client / vLLM (`vllm:request_time_per_output_token_seconds`): 0.998-1.002" in line
    assert "+2.5 to +4.1 ms" in line and blank == ""
    off = ok.assign(served_token_ratio=[1.0, 1.3, None])
    assert "vLLM / client 1.000-1.300 (the flags name points off by more than 0.1%)" in _served_line(off)[0]
    assert _served_line(ok.assign(served_token_ratio=None)) == []  # records from before the cross-check
    assert _served_line(pd.DataFrame({"x": [1]})) == []
