"""benchmarks/steady_drift.py on a committed H200 point: the sub-window figures that
reports/examples/kimi-rank-h200-3pct/README.md quotes come back from the raw rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.benchmark_module import load_benchmark

REPO = Path(__file__).resolve().parents[2]
POINT = REPO / "reports" / "examples" / "kimi-rank-h200-3pct" / "sweep"


@pytest.fixture(scope="module")
def sd():
    return load_benchmark("steady_drift")


def test_committed_32_user_point(sd, capsys):
    assert sd.main([str(POINT), "8b47cf550bba"]) == 0
    out = capsys.readouterr().out
    # the nine sub-windows (five cycles of 32 completions each, the last with the rest) and the outside-stall rates
    assert out.count("\n| ") == 9  # the data rows (the header is the first line)
    assert "| 2-27 | 1600.8 | 69% | 5240 |" in out and "| 207-234 | 1801.6 | 70% | 6049 |" in out
    assert "CV 0.068, lag-1 autocorrelation 0.39, correlation with stall share -0.79" in out


def test_no_steady_span_is_an_error(sd):
    rows = [{"send_time": 0.0, "chunk_times": [0.1, 0.2], "chunk_tokens": [1, 1], "end_time": 0.2}]
    with pytest.raises(SystemExit, match="no steady span"):
        sd.drift(rows, 4, 10.0)
