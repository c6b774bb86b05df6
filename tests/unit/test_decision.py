"""The decision view (bench.report.decision), goodput under SLOs (bench.report.goodput, bench.config.slo) and the opening
lines of summary.md built by `bench report` from committed examples."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import main
from bench.config.profile import parse_profile
from bench.config.slo import Slo, parse_slo
from bench.core.errors import BenchError
from bench.report import decision as D
from bench.report.goodput import goodput, is_good, point_goodput
from bench.report.tables import POINT_COLUMNS
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[2]
ONE_LEASE = REPO / "reports" / "examples" / "kimi-rank-h200-one-lease" / "lease-1"
CPU_DEFAULT = REPO / "reports" / "examples" / "tiny-cpu-default"


def point(pid: str, k: int, tok_s: float, hw: float | None = 0.02, shape=(8, 1024, 256), **columns) -> dict:
    """An ok steady point of the points table at `shape` (concurrency, input, output), drafted by FLASHMLA/fp8."""
    c, i, o = shape
    base = dict.fromkeys(POINT_COLUMNS) | {
        "point_id": pid,
        "status": "ok",
        "num_speculative_tokens": k,
        "draft_attention_backend": "FLASHMLA" if k else None,
        "draft_kv_cache_dtype": "fp8" if k else None,
        "dcp_size": 1,
        "dcp_loopback": False,
        "concurrency": c,
        "input_len": i,
        "output_len": o,
        "load": f"{c}x{i}x{o}",
        "window": "steady",
        "output_throughput": tok_s,
        "throughput_halfwidth": hw,
        "steady_short": False,
        "acceptance_mode": "real",
        "target": "some/model",
        "weights": "real",
    }
    return base | columns


def rows_of(points: list[dict], **kw) -> list[D.DecisionRow]:
    return D.decision_rows(pd.DataFrame(points), **kw)


# --- intervals and verdicts -------------------------------------------------------------------------------------


def test_speedup_interval_combines_the_two_points_in_log_space():
    s = D.speedup_of(D.Estimate.from_halfwidth(130.0, 0.05), D.Estimate.from_halfwidth(100.0, 0.03))
    assert s.value == pytest.approx(1.3)
    # by hand: high = 1.3 exp(sqrt(ln(1.05)^2 + ln(1/0.97)^2)) = 1.3 exp(0.057517) = 1.376965 (the point's upper side
    # with the baseline's lower); low = 1.3 exp(-sqrt(ln(1/0.95)^2 + ln(1.03)^2)) = 1.3 exp(-0.059201) = 1.225273
    assert s.high == pytest.approx(1.376965, abs=1e-6) and s.low == pytest.approx(1.225273, abs=1e-6)
    assert s.low < 1.3 * (1 - math.hypot(0.05, 0.03)) + 0.01 and s.high > 1.3  # about the root sum of squares
    assert s.label == D.WITHIN_ONE_START and s.verdict == "faster"
    assert s.text() == f"1.30x [{s.low:.2f}, {s.high:.2f}] within one start"


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (1.0001, 1.2, "faster"),
        (1.0, 1.2, "inconclusive"),  # the interval touches 1: contains it
        (0.9, 1.1, "inconclusive"),
        (0.8, 1.0, "inconclusive"),
        (0.8, 0.9999, "slower"),
        (None, None, "inconclusive"),  # no precision
    ],
)
def test_verdict_boundaries(low, high, verdict):
    label = None if low is None else D.WITHIN_ONE_START
    s = D.Speedup(1.05 if low is None or low < 1 <= high else (low + high) / 2, low, high, label)
    assert s.verdict == verdict
    assert (s.why is None) == (verdict != "inconclusive")


def test_no_precision_is_inconclusive_even_when_far_from_one():
    s = D.speedup_of(D.Estimate(300.0), D.Estimate.from_halfwidth(100.0, 0.01))
    assert s.value == 3.0 and not s.stated and s.verdict == "inconclusive" and s.why == "no precision"


def test_between_start_labels_combine_to_the_fewer_starts():
    a = D.Estimate(120.0, 110.0, 130.0, D.between_starts(3))
    b = D.Estimate(100.0, 95.0, 105.0, D.between_starts(5))
    assert D.speedup_of(a, b).label == "between 3 starts"
    assert D.speedup_of(a, D.Estimate.from_halfwidth(100.0, 0.02)).label == D.WITHIN_ONE_START


# --- rows -------------------------------------------------------------------------------------------------------


def test_best_and_worst_per_shape_over_their_own_baseline():
    pts = [
        point("base", 0, 100.0),
        point("fast", 3, 140.0, draft_attention_backend="FLASHMLA"),
        point("mid", 2, 110.0),
        point("slow", 3, 40.0, draft_attention_backend="TRITON_MLA", mismatch="cudagraph_mode: ran PIECEWISE"),
        point("base1", 0, 50.0, shape=(1, 1024, 256)),
        point("one", 3, 45.0, shape=(1, 1024, 256)),
    ]
    rows = {r.shape: r for r in rows_of(pts)}
    assert list(rows) == ["1x1024x256", "8x1024x256"]  # by input, output, then concurrency
    r = rows["8x1024x256"]
    assert r.best.point_id == "fast" and r.best.config == "FLASHMLA/fp8 draft k=3"
    assert r.best.speedup.value == pytest.approx(1.4) and r.best.speedup.verdict == "faster"
    assert r.worst.point_id == "slow" and r.worst.speedup.verdict == "slower"
    assert "flagged: cudagraph_mode: ran PIECEWISE" in r.worst.notes
    assert r.configs == 4 and r.spec_configs == 3 and r.left_out == 0
    one = rows["1x1024x256"]
    assert one.best.point_id == "one" and one.worst is None  # one speculative configuration: no worst
    assert one.best.speedup.value == pytest.approx(0.9) and one.best.speedup.verdict == "slower"


def test_a_short_point_is_not_picked_best_while_another_states_a_precision():
    pts = [
        point("base", 0, 100.0),
        point("short", 3, 200.0, steady_short=True),  # fastest, but its steady span is short
        point("nohw", 2, 180.0, hw=None),  # no precision
        point("ok", 1, 120.0),
    ]
    (r,) = rows_of(pts)
    assert r.best.point_id == "ok" and r.left_out == 2
    assert r.worst is None  # one eligible point
    text = " ".join(D.sentences(D.DecisionView([r], [])))
    assert "Not ranked: 2 configurations without precision or with a short span" in text


def test_when_every_point_is_short_the_best_says_so():
    pts = [point("base", 0, 100.0), point("a", 3, 130.0, steady_short=True), point("b", 2, 90.0, hw=None)]
    (r,) = rows_of(pts)
    assert r.best.point_id == "a" and D.UNRANKED in r.best.notes and "short steady span" in r.best.notes
    assert not r.best.speedup.stated and r.best.speedup.verdict == "inconclusive"  # a short point states none
    view = D.build_view(pd.DataFrame(pts))
    assert "(inconclusive: no precision; short steady span; picked among points without" in view.sentences[1]
    assert D.table_frame(view).best.iloc[0] == "FLASHMLA/fp8 draft k=3 (short)"


def test_a_shape_without_baseline_states_no_speedup():
    view = D.build_view(pd.DataFrame([point("a", 3, 135.8, hw=0.017, shape=(1, 64, 32))]))
    (r,) = view.rows
    assert r.best is None and r.fastest.point_id == "a"
    assert view.sentences[0].endswith("no no-spec (k = 0) point ran, so no speedup is stated.")
    assert "135.8 output tok/s [133.5, 138.1] within one start" in view.sentences[1]
    assert D.table_frame(view).best_verdict.iloc[0] == "no baseline"


def test_a_whole_window_point_against_a_steady_baseline_divides_the_two_whole_window_figures():
    # the point has no steady span (its headline is its whole-window figure); the baseline's headline is steady
    pts = [
        point("base", 0, 100.0, output_throughput_whole=90.0),
        point("a", 3, 110.0, hw=None, window="whole", output_throughput_whole=110.0),
    ]
    (r,) = rows_of(pts)
    picked = r.best or r.fastest
    assert picked.point_id == "a"
    assert picked.speedup.value == pytest.approx(110.0 / 90.0)  # 1.2222, not the mixed-window 110 / 100
    assert not picked.speedup.stated  # a whole-window figure states no precision


def test_fed_estimates_replace_the_records_and_keep_their_label():
    pts = [point("base", 0, 100.0), point("a", 3, 130.0)]
    fed = {
        "base": D.Estimate(100.0, 90.0, 111.0, D.between_starts(3)),
        "a": D.Estimate(120.0, 100.0, 140.0, D.between_starts(3)),
    }
    view = D.build_view(pd.DataFrame(pts), estimates=fed)
    best = view.rows[0].best
    assert best.speedup.value == pytest.approx(1.2) and best.speedup.label == "between 3 starts"
    assert best.speedup.verdict == "inconclusive"  # [~0.94, ~1.53] contains 1
    assert any("intervals between 3 starts" in c.text for c in view.caveats)


def test_caveats_come_from_the_records():
    pts = [
        point("base", 0, 100.0, target="kimi-rank:tp=8,layers=61,experts=int4", weights="dummy"),
        point(
            "a",
            3,
            130.0,
            target="kimi-rank:tp=8,layers=61,experts=int4",
            weights="dummy",
            acceptance_mode="synthetic",
            mean_acceptance_length=2.3,
            dcp_size=8,
            dcp_loopback=True,
            steady_short=True,
            contamination="compile",
        ),
        point("b", 2, 90.0, mismatch="cudagraph_mode: ran PIECEWISE", weights="dummy", target="kimi-rank"),
    ]
    servers = pd.DataFrame({"starts": [1, 1, 1]})
    found = D.caveats(pd.DataFrame(pts), servers, "1 x NVIDIA H200", D.record_estimates(pd.DataFrame(pts)))
    text = "\n".join(c.text for c in found)
    shorts = [c.short for c in found]
    assert "no TP all-reduce between the 8 ranks of a TP8 deployment" in text
    assert shorts.count("one Kimi K2.6 TP8 rank") == 1  # two spellings of the same rank: one caveat
    assert "DCP 8 runs as one rank of a loopback group" in text
    assert "Dummy (random) weights" in text
    assert "Acceptance is synthetic" in text and "(mean acceptance length 2.30)" in text
    assert "3 engine configurations, one server start each: every interval is within one start" in text
    assert "1 point with a short steady span" in text
    assert "1 point ran otherwise than asked (FLASHMLA/fp8 draft k=2 at 8x1024x256)" in text
    assert "1 point with something else inside the window after re-measuring (compile)" in text
    assert "On CPU" not in text and "tiny" not in text
    cpu = D.caveats(pd.DataFrame([point("a", 3, 1.0, target="tiny")]), None, "CPU: AMD EPYC (2 cores)", {})
    assert [c.short for c in cpu] == ["tiny model", "on CPU", "server starts unknown"]


def test_goodput_names_the_configuration_with_most_good_requests_per_shape():
    pts = [point("base", 0, 100.0), point("a", 3, 130.0), point("b", 2, 120.0)]
    good = pd.DataFrame(
        {
            "point_id": ["base", "a", "b"],
            "goodput_requests_s": [2.0, 1.0, 2.5],
            "goodput_output_s": [90.0, 60.0, 110.0],
            "good_requests": [20, 10, 25],
            "counted_requests": [20, 30, 26],
            "goodput_window": ["steady"] * 3,
        }
    )
    slo = Slo(ttft="2s", tpot="50ms")
    view = D.build_view(pd.DataFrame(pts), goodput=good, slo=slo)
    g = view.rows[0].goodput
    assert (g.point_id, g.requests_s, g.good, g.counted) == ("b", 2.5, 25, 26)
    assert "Under TTFT <= 2 s, TPOT <= 50 ms, FLASHMLA/fp8 draft k=2 has the highest goodput" in view.sentences[1]
    assert list(D.table_frame(view).columns)[-1] == "goodput"
    none_good = good.assign(goodput_requests_s=0.0, goodput_output_s=0.0, good_requests=0)
    nothing = D.build_view(pd.DataFrame(pts), goodput=none_good, slo=slo)
    assert "no request at this shape met every target" in nothing.sentences[1]
    assert D.table_frame(nothing).goodput.iloc[0] == "no request met the targets"
    no_slo = D.build_view(pd.DataFrame(pts), goodput=good)  # no SLO: no goodput shown
    assert no_slo.rows[0].goodput is None and "goodput" not in D.table_frame(no_slo)


# --- goodput per request ----------------------------------------------------------------------------------------


def req(send: float, first: float, step: float, chunks: int, tokens: int = 1, status: str = "ok") -> dict:
    """A request sent at `send`, first chunk at `first`, then a chunk of `tokens` every `step` seconds."""
    times = [first + i * step for i in range(chunks)]
    return {
        "phase": "measure",
        "status": status,
        "send_time": send,
        "end_time": times[-1],
        "chunk_times": times,
        "chunk_tokens": [1] + [tokens] * (chunks - 1),
    }


def test_goodput_per_request_against_hand_computed_values():
    slo = Slo(ttft=500, tpot=60)  # ms
    fast = req(0.0, 0.2, 0.05, 11)  # TTFT 200 ms, TPOT 50 ms: good
    late = req(0.0, 0.8, 0.05, 11)  # TTFT 800 ms: bad
    slow = req(0.0, 0.1, 0.10, 11)  # TPOT 100 ms: bad
    failed = {**req(0.0, 0.1, 0.05, 3), "status": "error"}
    one = req(0.0, 0.3, 0.05, 1)  # a single chunk: no TPOT, meets the TPOT target
    assert [is_good(r, slo) for r in (fast, late, slow, failed, one)] == [True, False, False, False, True]
    assert not is_good(fast, Slo(e2el=600))  # E2E 0.7 s
    # whole window of 2 s: the good ones are `fast` (11 tokens) and `one` (1 token)
    g = goodput([fast, late, slow, failed, one], slo, None, 2.0)
    assert (g.good, g.counted, g.window) == (2, 4, "whole")
    assert g.requests_s == pytest.approx(1.0) and g.output_s == pytest.approx(6.0)
    # a steady span (0.4, 0.9]: `fast` ends at 0.7 (in), `late` at 1.3 (out), `slow` at 1.1 (out), `one` at 0.3 (out)
    g = goodput([fast, late, slow, one], slo, [[0.4, 0.9]], None)
    assert (g.good, g.counted, g.window) == (1, 1, "steady")
    assert g.requests_s == pytest.approx(1 / 0.5)
    fast_tokens = sum(1 for t in fast["chunk_times"] if 0.4 < t <= 0.9)  # 0.45, 0.5, ... 0.7: 6 chunks of 1
    assert fast_tokens == 6 and g.output_s == pytest.approx(6 / 0.5)


def test_with_every_request_good_goodput_is_the_output_rate():
    # a committed example under an SLO every request meets: goodput counts what the headline counts
    store = SweepStore(ONE_LEASE)
    lax = Slo(ttft="1000s", tpot="1000s", e2el="1000s")
    records = {pid: r for pid, r in store.records().items() if r.status == "ok"}
    assert records
    for pid, record in records.items():
        g = point_goodput(record, store.raw(pid), lax)
        assert g is not None and g.good == g.counted > 0
        assert g.output_s == pytest.approx(record.metrics.output_throughput, rel=1e-9)
        if record.metrics.window == "steady":
            assert g.requests_s == pytest.approx(record.metrics.request_throughput, rel=1e-9)


# --- targets ----------------------------------------------------------------------------------------------------


def test_slo_parsing_and_the_profile_field():
    assert parse_slo("ttft=2s,tpot=50ms").targets() == {"ttft": 2000.0, "tpot": 50.0}
    assert parse_slo("ttft:2000").targets() == {"ttft": 2000.0}  # vLLM's --goodput spelling, milliseconds
    for bad in ("ttft=2h", "foo=1s", "ttft=1s,ttft=2s", "", "tpot=0"):
        with pytest.raises(BenchError):
            parse_slo(bad)
    p = parse_profile({"name": "x", "report": {"slo": {"ttft": "2s", "e2el": 30000}}}, "cpu", "t.toml")
    assert p.report.slo is not None and p.report.slo.targets() == {"ttft": 2000.0, "e2el": 30000.0}
    assert parse_profile({"name": "x"}, "cpu", "t.toml").report.slo is None
    with pytest.raises(BenchError, match="report.slo"):
        parse_profile({"name": "x", "report": {"slo": {"itl": "1s"}}}, "cpu", "t.toml")


# --- end to end -------------------------------------------------------------------------------------------------


def test_bench_report_opens_summary_md_with_the_decision(tmp_path, capsys):
    assert main(["report", str(ONE_LEASE), "--out", str(tmp_path), "--slo", "ttft=1s,tpot=20ms"]) == 0
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[0] == "# Sweep `kimi-k2.6-rank-h200-steady`"
    assert lines[2].startswith("Across 1 shape (one Kimi K2.6 TP8 rank, dummy weights, synthetic acceptance, one ")
    assert lines[2].endswith("the best speculative configuration is faster than no-spec at 8x1024x256.")
    assert lines[4].startswith(
        "At 8x1024x256, FLASHMLA/fp8 draft k=3 is fastest: 1.26x no-spec [1.22, 1.31] within one start (faster). "
        "Slowest: TRITON_MLA/fp8 draft k=3, 0.35x no-spec [0.32, 0.38] within one start (slower; flagged: "
        "cudagraph_mode: asked FULL_AND_PIECEWISE, ran PIECEWISE"
    )
    assert "Under TTFT <= 1 s, TPOT <= 20 ms, " in lines[4]
    text = "\n".join(lines)
    assert text.index("Caveats that bound these figures:") < text.index("| shape | best |") < text.index("## Results")
    html = (tmp_path / "report.html").read_text()
    assert "Highest output throughput" not in html
    assert html.index('id="decision"') < html.index('id="results"') < html.index("<details><summary>Every point")


def test_the_default_cpu_sweep_opens_with_what_it_found(tmp_path):
    assert main(["report", str(CPU_DEFAULT), "--out", str(tmp_path)]) == 0
    first = (tmp_path / "summary.md").read_text().splitlines()[2]
    assert first == (
        "Across 2 shapes (tiny model, on CPU, zero-final-norm weights, one server start each), CPU_MLA/auto draft "
        "k=3 served 135.7-263.2 output tok/s; no no-spec (k = 0) point ran, so no speedup is stated."
    )


def test_estimates_over_starts_feed_the_view():
    summary = {
        "points": [
            {
                "point_id": "base",
                "starts": [1, 2, 3],
                "output_throughput": {"estimate": 100.0, "low": 95.0, "high": 105.0},
            },
            {
                "point_id": "a",
                "starts": [1, 2, 3],
                "output_throughput": {"estimate": 125.0, "low": 120.0, "high": 130.0},
            },
            {"point_id": "b", "starts": [1], "output_throughput": {"estimate": 90.0, "low": None, "high": None}},
        ]
    }
    found = D.starts_estimates(summary)
    assert found["a"] == D.Estimate(125.0, 120.0, 130.0, "between 3 starts") and not found["b"].stated
    pts = [point("base", 0, 101.0), point("a", 3, 124.0), point("b", 2, 91.0)]
    (row,) = D.decision_rows(pd.DataFrame(pts), found)
    assert row.best.point_id == "a" and row.best.speedup.label == "between 3 starts" and row.left_out == 1
    assert row.best.speedup.value == pytest.approx(1.25) and row.best.speedup.verdict == "faster"
