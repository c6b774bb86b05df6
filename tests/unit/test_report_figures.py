"""The report's figures, inspected as matplotlib Figures on constructed tables: which panels, which lines, that no
line joins two input lengths, that the stated precision becomes error bars, no legend entry without data; the
raw-record views against the figures their records state; one report built from a committed DCP example."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.image import imread

from bench.profiling.step_shares import CaptureShares
from bench.report import analysis as A
from bench.report.build import build_report
from bench.report.figures import acceptance_figure, dcp_figure, step_breakdown_figure, step_segments
from bench.report.figures_load import (
    latency_cdf_figure,
    relative_bars,
    throughput_figure,
    timeline_figure,
    timeline_points,
)
from bench.report.request_views import MAX_TIMELINES, latency_samples, read_raw, timelines
from bench.report.tables import POINT_COLUMNS
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[2]
DCP_EXAMPLE = REPO / "reports" / "examples" / "kimi-rank-h200-dcp" / "sweep"  # steady spans, DCP 1-8
WHOLE_EXAMPLE = REPO / "reports" / "examples" / "kimi-rank-h200" / "results"  # whole-window records, emulated DCP


def point(pid, backend, kv, k, conc, inp, out, tok_s, per_user, hw=None, tpot_hw=None, emulated=None, full=None):
    return {
        "point_id": pid,
        "engine_id": f"e-{backend}-{kv}-{k}-{emulated}",
        "status": "ok",
        "draft_attention_backend": backend,
        "draft_kv_cache_dtype": kv,
        "dcp_size": 1,
        "dcp_emulated": emulated,
        "num_speculative_tokens": k,
        "concurrency": conc,
        "input_len": inp,
        "output_len": out,
        "output_throughput": tok_s,
        "per_user_output_throughput": per_user,
        "throughput_halfwidth": hw,
        "tpot_halfwidth": tpot_hw,
        "acceptance_rate": 0.5 if k else None,
        "mean_acceptance_length": 2.5 if k else None,
        "per_position_acceptance": [0.7, 0.5, 0.3] if k else None,
        "acceptance_mode": "real",
        "full_input_len": full,
    }


def enriched(rows: list[dict]) -> pd.DataFrame:
    points = pd.DataFrame(rows).reindex(columns=[*POINT_COLUMNS, "full_input_len"])
    extras = points[["point_id", "full_input_len"]]
    return A.enrich(points.drop(columns=["full_input_len"]), extras)


@pytest.fixture(scope="module")
def two_lengths() -> pd.DataFrame:
    """FLASHMLA/fp8 k3 and no-spec at 1k and 8k inputs (two concurrencies each), an emulated DCP-8 rank whose own
    input is 1024 tokens of an 8192-token prompt, and a configuration without a per-user figure."""
    rows = [
        point("a1", "FLASHMLA", "fp8", 3, 1, 1024, 256, 200.0, 190.0, 0.05, 0.04),
        point("a8", "FLASHMLA", "fp8", 3, 8, 1024, 256, 900.0, 110.0, 0.10, 0.08),
        point("b1", "FLASHMLA", "fp8", 3, 1, 8192, 256, 150.0, 140.0, 0.02, None),
        point("b8", "FLASHMLA", "fp8", 3, 8, 8192, 256, 600.0, 70.0),
        point("n1", "FLASHMLA", "fp8", 0, 1, 1024, 256, 130.0, 128.0, 0.03, 0.03),
        point("n8", "FLASHMLA", "fp8", 0, 8, 1024, 256, 700.0, 90.0, 0.03, 0.03),
        point("m1", "FLASHMLA", "fp8", 0, 1, 8192, 256, 110.0, 105.0),
        point("e1", "FLASHMLA", "fp8", 3, 1, 1024, 256, 170.0, 200.0, emulated=8, full=8192),
        point("e8", "FLASHMLA", "fp8", 3, 8, 1024, 256, 380.0, 150.0, emulated=8, full=8192),
        point("z1", "TRITON_MLA", "auto", 3, 1, 1024, 256, 50.0, None),
    ]
    return enriched(rows)


def _errorbars(ax) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_throughput_one_panel_per_length_and_no_line_across_two(two_lengths):
    thr = A.throughput_series(two_lengths)
    fig = throughput_figure(thr)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["in 1024 / out 256", "in 8192 / out 256"]
    per_gpu = {(r.lengths, round(r.output_throughput_per_gpu, 6)) for r in thr.itertuples()}
    labels_per_axis = []
    for ax in axes:
        length = ax.get_title()
        bars = _errorbars(ax)
        labels_per_axis.append(sorted(c.get_label() for c in bars))
        for c in bars:
            ys = c.lines[0].get_ydata()
            assert all((length, round(float(y), 6)) in per_gpu for y in ys), "a line holds a point of another length"
    # the emulated rank (1024 of 8192 tokens) sits with the 8192 points; TRITON_MLA has no per-user figure: no line
    assert labels_per_axis == [
        ["FLASHMLA/fp8 k3", "no-spec k0"],
        ["FLASHMLA/fp8 dcp8-emulated k3", "FLASHMLA/fp8 k3", "no-spec k0"],
    ]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert sorted(legend) == ["FLASHMLA/fp8 dcp8-emulated k3", "FLASHMLA/fp8 k3", "no-spec k0"]
    emulated = next(c for c in _errorbars(axes[1]) if "emulated" in c.get_label())
    plain = next(c for c in _errorbars(axes[1]) if c.get_label() == "FLASHMLA/fp8 k3")
    assert emulated.lines[0].get_marker() == "X" and plain.lines[0].get_marker() != "X"
    assert emulated.lines[0].get_color() != plain.lines[0].get_color()


def test_throughput_error_bars_are_the_stated_precision(two_lengths):
    thr = A.throughput_series(two_lengths)
    fig = throughput_figure(thr)
    spec = next(c for c in _errorbars(fig.axes[0]) if c.get_label() == "FLASHMLA/fp8 k3")
    assert spec.has_yerr and spec.has_xerr
    xs, ys = spec.lines[0].get_xdata(), spec.lines[0].get_ydata()
    assert list(xs) == [190.0, 110.0] and list(ys) == [200.0, 900.0]  # c1, c8 in concurrency order
    ybars, xbars = spec.lines[2][1], spec.lines[2][0]  # barlinecols: x first, then y
    heights = [seg[1][1] - seg[0][1] for seg in ybars.get_segments()]
    assert heights == pytest.approx([2 * 200.0 * 0.05, 2 * 900.0 * 0.10])
    # per-user = 1000 / mean TPOT: the TPOT interval [m(1-h), m(1+h)] maps to [x/(1+h), x/(1-h)]
    lo, hi = xbars.get_segments()[0][:, 0]
    assert (lo, hi) == pytest.approx((190.0 / 1.04, 190.0 / 0.96))
    # no precision stated: no bar, and the panel says so
    b8 = next(c for c in _errorbars(fig.axes[1]) if c.get_label() == "FLASHMLA/fp8 k3")
    assert [seg[1][1] - seg[0][1] for seg in b8.lines[2][1].get_segments()] == pytest.approx([2 * 150 * 0.02, 0])
    assert any("no precision stated" in t.get_text() for t in fig.axes[1].texts)


def test_relative_bars_without_precision_are_zero():
    bars = relative_bars(pd.Series([100.0, 50.0, np.nan]), pd.Series([0.1, None, 0.2]))
    assert bars.tolist() == [[10.0, 0.0, 0.0], [10.0, 0.0, 0.0]]


def test_pareto_is_among_points_of_one_length(two_lengths):
    par = A.pareto_table(two_lengths).set_index("label")
    # 8x8192 (70 tok/s/user, 600 tok/s) is dominated by 8x1024 (110, 900) of the other length, but not within its own
    assert set(par.index[par.pareto_user & (par.lengths == "in 8192 / out 256")]) == {
        "FLASHMLA/fp8 k3 8x8192x256",
        "FLASHMLA/fp8 dcp8-emulated k3 1x1024x256",
        "FLASHMLA/fp8 dcp8-emulated k3 8x1024x256",
    }
    assert par.loc["FLASHMLA/fp8 k3 8x1024x256", "pareto_user"]
    assert not par.loc["no-spec k0 1x8192x256", "pareto_user"]


def test_acceptance_lines_stay_within_one_length(two_lengths):
    acc = A.acceptance_table(two_lengths)
    fig = acceptance_figure(acc)
    assert len(fig.axes) == 6  # two lengths x (rate, mean length, per position)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0].startswith("in 1024 / out 256") and titles[3].startswith("in 8192 / out 256")
    for ax in fig.axes[:2]:
        # the 1k row: FLASHMLA/fp8 k3 and TRITON_MLA; no-spec has no acceptance and no line
        assert sorted(line.get_label() for line in ax.lines) == ["FLASHMLA/fp8 k3", "TRITON_MLA/auto k3"]
        assert all(len(line.get_xdata()) <= 2 for line in ax.lines)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any(name.startswith("no-spec") for name in legend)


def test_latency_cdf_rows_per_shape_lines_per_configuration(two_lengths):
    lat = A.latency_table(two_lengths)
    rng = np.random.default_rng(0)
    samples = pd.DataFrame(
        {
            "point_id": lat.point_id,
            "window": "steady",
            "tpot_ms": [rng.uniform(5, 10, 20) for _ in range(len(lat))],
            "itl_ms": [np.concatenate([[0.0], rng.uniform(1, 50, 3000)]) for _ in range(len(lat))],
        }
    )
    fig = latency_cdf_figure(lat, samples)
    shapes = lat.groupby(["lengths", "concurrency"]).ngroups
    assert len(fig.axes) == 2 * shapes == 8
    assert fig.axes[0].get_title().startswith("c1, in 1024 / out 256: TPOT")
    for ax in fig.axes:
        title = ax.get_title()
        expect = lat[(lat.lengths + ", c" + lat.concurrency.astype(str)).isin([_shape(title)])]
        assert len(ax.lines) == len(expect)
        for line in ax.lines:
            y = line.get_ydata()
            assert y[0] == 0 and y[-1] == pytest.approx(1) and np.all(np.diff(y) >= 0)
    assert fig.axes[1].get_xscale() == "log" and fig.axes[0].get_xscale() == "linear"


def _shape(title: str) -> str:
    head = title.split(":")[0]  # "c1, in 1024 / out 256"
    c, lengths = head.split(", ", 1)
    return f"{lengths}, {c}"


def test_latency_samples_are_the_records_own_distributions():
    """The CDF's samples, re-derived from the raw records, give the percentiles the records state: over the
    steady span (kimi-rank-h200-dcp) and over the whole window (kimi-rank-h200)."""
    for root, window in ((DCP_EXAMPLE, "steady"), (WHOLE_EXAMPLE, "whole")):
        records = SweepStore(root).records()
        samples = latency_samples(records, read_raw(root, records)).set_index("point_id")
        assert len(samples) == sum(r.status == "ok" for r in records.values())
        for pid, s in samples.iterrows():
            m = records[pid].metrics
            assert s.window == window == m.window
            assert np.percentile(s.tpot_ms, 50) == pytest.approx(m.tpot_ms.p50)
            assert np.percentile(s.itl_ms, 99) == pytest.approx(m.itl_ms.p99)
            assert len(s.tpot_ms) == m.tpot_ms.n


def test_timelines_hold_every_token_and_the_recorded_span():
    records = SweepStore(DCP_EXAMPLE).records()
    raw = read_raw(DCP_EXAMPLE, records)
    tl = timelines(records, raw).set_index("point_id")
    for pid, r in tl.iterrows():
        rows = [x for x in raw[pid] if x["phase"] == "measure"]
        tokens = sum(sum(x["chunk_tokens"] or []) for x in rows)
        width = r.duration_s / len(r.t)
        assert float(np.sum(r.tok_s) * width) == pytest.approx(tokens)  # one run per point here
        (a, b) = r.spans[0]
        t0 = min(x["send_time"] for x in rows)
        (sa, sb) = records[pid].metrics.steady.spans[0]
        assert (a, b) == pytest.approx((sa - t0, sb - t0))
        assert all(a <= e <= b for e in r.edges)
    # a point with fewer than three whole cycles in its span: no edges (and no stated precision)
    assert tl.loc["240101ec23c6", "edges"] == [] and records["240101ec23c6"].metrics.precision.sub_windows == 0


def test_timeline_figure_marks_span_edges_and_headline():
    data = A.collect(DCP_EXAMPLE)
    fig = timeline_figure(data.points, data.timelines)
    shown = timeline_points(data.points, data.timelines)
    assert len(fig.axes) == len(shown) == 8 <= MAX_TIMELINES
    for ax, r in zip(fig.axes, shown.itertuples()):
        assert ax.get_title().startswith(r.label)
        spans = [p for p in ax.patches if p.get_label() == "steady span"]
        edges = [ln for ln in ax.lines if _vertical(ln)]
        assert len(spans) == 1 and len(edges) == len(r.edges)
        headline = [ln for ln in ax.lines if str(ln.get_label()).startswith("headline")]
        assert headline and headline[0].get_ydata()[0] == pytest.approx(r.output_throughput)
        band = [p for p in ax.patches if p.get_label() == "stated 95% interval"]
        assert bool(band) == (r.throughput_halfwidth == r.throughput_halfwidth and r.throughput_halfwidth is not None)


def _vertical(line) -> bool:
    """An axvline (a cycle edge): two points at one x."""
    x = line.get_xdata()
    return len(x) == 2 and x[0] == x[1]


def test_timelines_are_capped_to_the_largest_concurrency_of_each_configuration():
    points = pd.DataFrame(
        {
            "point_id": [f"p{i}" for i in range(20)],
            "lengths": ["in 1 / out 1"] * 20,
            "series": [f"s{i // 4}" for i in range(20)],
            "concurrency": [1, 2, 4, 8] * 5,
        }
    )
    shown = timeline_points(points, pd.DataFrame({"point_id": points.point_id}))
    assert len(shown) == MAX_TIMELINES
    assert set(shown[shown.concurrency == 8].series) == {f"s{i}" for i in range(5)}


def _shares(step_cpu: float, parts: dict[str, float]) -> pd.DataFrame:
    rows = [{"part": "bench.engine.step", "cpu_ms": step_cpu, "gpu_busy_ms": step_cpu / 2}]
    rows += [{"part": p, "cpu_ms": v, "gpu_busy_ms": v / 2} for p, v in parts.items()]
    return pd.DataFrame(rows)


def test_step_breakdown_stacks_parts_that_do_not_overlap(tmp_path):
    table = _shares(
        10.0,
        {
            "bench.target.forward": 3.0,
            "bench.draft.propose": 4.0,  # includes the metadata builds
            "bench.draft.attn_metadata": 1.0,
            "bench.sample.rejection": 0.5,
        },
    )
    segments = step_segments(table, "cpu_ms")
    assert [v for _, _, v in segments] == [3.0, 3.0, 1.0, 0.5, 2.5]  # propose without the builds; the rest
    assert sum(v for _, _, v in segments) == pytest.approx(10.0)
    # medians that add to more than the step's: the rest is 0, never negative
    over = step_segments(_shares(4.0, dict(zip(table.part[1:], table.cpu_ms[1:]))), "cpu_ms")
    assert over[-1][2] == 0.0
    folder = tmp_path / "profile" / "capture-eng1.analysis"
    shares = {
        folder: CaptureShares(folder, 12, 10, table, None),
        tmp_path / "x": CaptureShares(tmp_path, 3, 0, None, "none"),
    }
    points = pd.DataFrame({"engine_id": ["eng1"], "series": ["FLASHMLA/fp8"]})
    fig = step_breakdown_figure(shares, points)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["FLASHMLA/fp8\nCPU", "FLASHMLA/fp8\nGPU busy"]
    assert len(ax.patches) == 2 * 5
    widths = [p.get_width() for p in ax.patches]
    assert sum(widths[:5]) == pytest.approx(10.0) and sum(widths[5:]) == pytest.approx(5.0)
    assert step_breakdown_figure({}, points) is None


def test_dcp_view_one_axis_measured_beside_modelled_with_capacity():
    data = A.collect(DCP_EXAMPLE)
    fig = dcp_figure(data.dcp)
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0].startswith("DCP 1\nKV 1.32M tok\nfits batch 155")
    assert ticks[-1].startswith("DCP 8\nKV 10.54M tok\nfits batch 1,247")
    measured = _errorbars(ax)
    assert sorted(c.get_label() for c in measured) == [
        "1x8192x256: measured (one GPU)",
        "8x8192x256: measured (one GPU)",
    ]
    c8 = next(c for c in measured if c.get_label().startswith("8x"))
    assert c8.lines[0].get_ydata() == pytest.approx([308.008427, 163.260200, 113.577591, 111.457612])  # whole cycles
    modelled = [ln for ln in ax.lines if "modelled" in str(ln.get_label())]
    assert len(modelled) == 2 and all(ln.get_linestyle() == "--" for ln in modelled)
    # DCP 4 at 8 users states no precision: no bar there, and its label says so
    heights = [seg[1][1] - seg[0][1] for seg in c8.lines[2][0].get_segments()]
    assert heights[2] == 0 and all(h > 0 for i, h in enumerate(heights) if i != 2)
    assert any(t.get_text() == "113.6 (no precision)" for t in ax.texts)
    assert dcp_figure(data.dcp[data.dcp.dcp_size == 1]) is None  # one size: nothing to compare


def test_report_of_the_dcp_example_has_every_figure(tmp_path):
    paths = build_report(DCP_EXAMPLE, tmp_path / "report")
    names = {k.removeprefix("plot_") for k in paths if k.startswith("plot_")}
    assert names == {"throughput", "latency", "timeline", "acceptance", "heatmap", "roofline", "dcp"}
    for name in names:
        image = imread(paths[f"plot_{name}"])
        assert image.shape[0] > 200 and image.shape[1] > 500
    html = paths["html"].read_text()
    assert 'data-plot="dcp"' in html and "pareto" not in {p.stem for p in (tmp_path / "report" / "plots").iterdir()}


def test_timeline_marks_the_records_whole_cycle_window_and_a_short_headline():
    """A record with the headline's whole-cycle window (metrics.steady.cycle_windows) and `short` set: the window
    is drawn, relative to the run's first send, and the panel says why no precision is stated."""
    records = SweepStore(DCP_EXAMPLE).records()
    raw = read_raw(DCP_EXAMPLE, records)
    pid = "56544dd04b41"
    rec = records[pid]
    (a, b) = rec.metrics.steady.spans[0]
    steady = rec.metrics.steady.model_copy(update={"cycle_windows": [[a + 1, b - 1]], "short": True})
    rec = rec.model_copy(update={"metrics": rec.metrics.model_copy(update={"steady": steady})})
    tl = timelines({pid: rec}, {pid: raw[pid]})
    t0 = min(x["send_time"] for x in raw[pid] if x["phase"] == "measure")
    assert tl.cycle_windows[0] == [pytest.approx((a + 1 - t0, b - 1 - t0))] and bool(tl.short[0])
    points = A.collect(DCP_EXAMPLE).points
    points = points[points.point_id == pid].assign(throughput_halfwidth=None)
    ax = timeline_figure(points, tl).axes[0]
    assert [p.get_label() for p in ax.patches].count("headline's whole cycles") == 1
    assert any(t.get_text() == "short: < 3 whole cycles, no precision stated" for t in ax.texts)
