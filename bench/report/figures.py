"""The report's figures: one function per plot, a table of bench.report.analysis in, PNG bytes out (None when the
table has nothing to draw; the HTML then says so instead of showing an empty chart).

Figures are drawn on bare matplotlib Figures with an Agg canvas, never through pyplot: no global state, no
display, and importing this module does not change the backend of a program that also uses pyplot.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from bench.profiling.plot import plot_range_breakdown
from bench.report.analysis import LATENCY_METRICS, ReportData
from bench.report.categories import plot_categories
from bench.report.figure_style import (
    dcp_rows,
    new_figure,
    png_bytes,
    series_lines,
    series_styles,
    shape_x,
    shared_legend,
    wrap,
)

ASKED_STYLE = {"color": "k", "linestyle": (0, (2, 2))}  # the asked synthetic acceptance, wherever it is drawn


def plot_throughput(series: pd.DataFrame) -> bytes | None:
    """Output tok/s and per-user output tok/s vs concurrency (vs batch shape when input/output lengths vary);
    one line per (draft backend, draft KV dtype): color = backend x KV dtype, style = KV dtype; one row of
    panels per DCP size when DCP varies."""
    if not len(series):
        return None
    styles = series_styles(series)
    shape = shape_x(series)
    series = series.assign(_x=shape.x)
    rows = dcp_rows(series)
    fig = new_figure(12, 3.4 * len(rows) + 1.2)
    axes = fig.subplots(len(rows), 2, squeeze=False, sharex=True)
    metrics = (
        ("output_throughput", "output tok/s (all requests)"),
        ("per_user_output_throughput", "output tok/s per user"),
    )
    for (prefix, dcp, grp), row_axes in zip(rows, axes):
        for ax, (metric, ylabel) in zip(row_axes, metrics):
            series_lines(ax, grp, metric, styles, dcp, linewidth=1.8)
            shape.draw(ax)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_title(
                prefix + ylabel.split(" (")[0] + " vs " + shape.title.split(" (")[0].split(":")[0], fontsize=10
            )
    for ax in np.ravel(axes[:-1]):
        ax.set_xlabel("")
    shared_legend(
        fig,
        axes,
        "draft backend / draft KV dtype"
        + (" / k" if series.num_speculative_tokens.nunique() > 1 else "")
        + (" / DCP" if len(rows) == 1 and series.dcp_size.nunique() > 1 else ""),
    )
    return png_bytes(fig)


def plot_latency(lat: pd.DataFrame) -> bytes | None:
    """TTFT, TPOT and ITL per point: p99 (light), p90 (medium) and p50 (dark) bars overlaid on one row."""
    if not len(lat) or lat.filter(like="_ms").isna().all().all():
        return None
    n = len(lat)
    fig = new_figure(13, 1.7 + 0.42 * n)
    axes = fig.subplots(1, 3, sharey=True)
    y = np.arange(n)[::-1]
    shades = {"p99": 0.35, "p90": 0.6, "p50": 1.0}
    for ax, (m, name) in zip(axes, LATENCY_METRICS.items()):
        for q, alpha in shades.items():
            vals = lat[f"{m}_{q}_ms"].to_numpy(float)
            ax.barh(y, np.nan_to_num(vals), height=0.7, color="C0", alpha=alpha, label=q)
        p50 = lat[f"{m}_p50_ms"].to_numpy(float)
        p99 = lat[f"{m}_p99_ms"].to_numpy(float)
        for yi, a, b in zip(y, p50, p99):
            if not math.isnan(b):
                ax.text(b, yi, f" {b:.3g}", va="center", fontsize=7, color="0.3")
            elif math.isnan(a):
                ax.text(0, yi, " n/a", va="center", fontsize=7, color="0.4")
        ax.set_title(f"{name} (ms): p50 / p90 / p99", fontsize=10)
        ax.set_xlabel("ms")
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.15)
    axes[0].set_yticks(y, lat.label)
    axes[0].set_ylim(-0.6, n - 0.4)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9)
    return png_bytes(fig)


def plot_pareto(par: pd.DataFrame) -> bytes | None:
    """Output tok/s vs per-user tok/s (both up is better) and vs TPOT p50 (left is better); Pareto-optimal
    points ringed in black and joined by the front; each point (only the optimal ones when there are more than
    24) annotated with its concurrency / batch shape."""
    if not len(par) or par.output_throughput.isna().all():
        return None
    styles = series_styles(par)
    fig = new_figure(12, 4.6)
    axes = fig.subplots(1, 2)
    for ax, x, flag, xlabel in (
        (axes[0], "per_user_output_throughput", "pareto_user", "output tok/s per user"),
        (axes[1], "tpot_p50_ms", "pareto_tpot", "TPOT p50 (ms)"),
    ):
        for name, s in par.groupby("series", sort=True):
            st = styles[name]
            ax.scatter(s[x], s.output_throughput, color=st["color"], marker=st["marker"], s=45, label=name, zorder=3)
        front = par[par[flag]].sort_values(x)
        if len(front):
            y = front.output_throughput
            ax.plot(front[x], y, color="k", linestyle="--", linewidth=1, zorder=2, label="Pareto front")
            ax.scatter(front[x], y, s=170, facecolors="none", edgecolors="k", linewidths=1.5, zorder=4)
        _annotate_shapes(ax, par, x, flag, styles)
        ax.set_xlabel(xlabel + ("  (better →)" if flag == "pareto_user" else "  (← better)"))
        ax.set_ylabel("output tok/s (better ↑)")
        ax.grid(alpha=0.3)
        ax.margins(0.12)
    axes[0].set_title("throughput vs per-user speed", fontsize=10)
    axes[1].set_title("throughput vs TPOT p50", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=9)
    return png_bytes(fig)


def _annotate_shapes(ax, par: pd.DataFrame, x: str, flag: str, styles: dict) -> None:
    """Each point's concurrency / batch shape next to it, offset per series so that labels of points at the
    same place do not overlap; with many points only the Pareto-optimal ones are named."""
    order = sorted(par.series.unique())
    offsets = [(11, -13), (11, 6), (-30, 6), (-30, -13)]  # clear of the Pareto ring
    for r in par.itertuples():
        if len(par) > 24 and not getattr(r, flag):
            continue
        xv = getattr(r, x)
        if xv == xv and r.output_throughput == r.output_throughput:
            ax.annotate(
                r.shape,
                (xv, r.output_throughput),
                textcoords="offset points",
                xytext=offsets[order.index(r.series) % len(offsets)],
                fontsize=8,
                color=styles[r.series]["color"],
            )


def plot_acceptance(acc: pd.DataFrame) -> bytes | None:
    """Acceptance rate and mean acceptance length vs concurrency (batch shape) per series, and per-position
    acceptance per point (the asked synthetic rates, when the sweep set them, dashed black); one row of panels
    per DCP size when DCP varies."""
    if not len(acc) or acc[["acceptance_rate", "mean_acceptance_length"]].isna().all().all():
        return None
    styles = series_styles(acc)
    asked = next((v for v in acc.asked_rates if isinstance(v, list)), None) if "asked_rates" in acc else None
    k_max = int(pd.to_numeric(acc.num_speculative_tokens, errors="coerce").max() or 1)
    shape = shape_x(acc)
    acc = acc.assign(_x=shape.x)
    pos_cols = [c for c in acc.columns if c.startswith("pos") and c[3:].isdigit()]
    rows = dcp_rows(acc)
    fig = new_figure(13, 3.6 * len(rows) + 1.0)
    axes = fig.subplots(len(rows), 3, squeeze=False)
    panels = (
        ("acceptance_rate", "acceptance rate (accepted / drafted)", (0, 1.02)),
        ("mean_acceptance_length", "mean acceptance length (tokens / step)", (1, k_max + 1.05)),
    )
    expected = (float(np.mean(asked)), 1 + float(np.sum(asked))) if asked else (None, None)
    for (prefix, dcp, grp), row_axes in zip(rows, axes):
        for ax, (metric, label, lim), exp in zip(row_axes, panels, expected):
            series_lines(ax, grp, metric, styles, dcp)
            if exp is not None:
                _asked_line(ax, exp)
            shape.draw(ax)
            ax.set_title(prefix + label, fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylim(*lim)
        _per_position_panel(row_axes[2], grp, pos_cols, styles, asked)
        row_axes[2].set_title(prefix + "per-position acceptance (one line per point)", fontsize=10)
    shared_legend(fig, axes)
    return png_bytes(fig)


def _asked_line(ax, expected: float) -> None:
    ax.axhline(expected, linewidth=1, **ASKED_STYLE)
    ax.annotate(
        f"asked: {expected:.3f}",
        (0.01, expected),
        xycoords=("axes fraction", "data"),
        xytext=(0, -12),
        textcoords="offset points",
        fontsize=8,
    )


def _per_position_panel(ax, grp: pd.DataFrame, pos_cols: list[str], styles: dict, asked: list | None) -> None:
    if pos_cols:
        xs = np.arange(1, len(pos_cols) + 1)
        for r in grp.itertuples():
            st = styles[r.series]
            ys = [getattr(r, c) for c in pos_cols]
            ax.plot(xs, ys, color=st["color"], linestyle=st["linestyle"], marker=st["marker"], alpha=0.6, markersize=5)
        if asked:
            ax.plot(np.arange(1, len(asked) + 1), asked, linewidth=1.2, label="asked (synthetic rates)", **ASKED_STYLE)
        ax.set_xticks(xs)
        ax.set_ylim(0, 1.05)
    else:
        ax.text(0.5, 0.5, "no per-position data", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("draft position")
    ax.grid(alpha=0.3)


def plot_heatmap(heat: pd.DataFrame) -> bytes | None:
    """Draft backend (rows) x draft KV dtype (columns), one panel per DCP size: the best output tok/s at the
    largest concurrency; cells without an ok point grey, with the reason written in."""
    if not len(heat):
        return None
    dcps = sorted(heat.dcp_size.unique())
    backends = sorted(heat.draft_attention_backend.astype(str).unique())
    kvs = sorted(heat.draft_kv_cache_dtype.astype(str).unique())
    w = max(2.6 * len(kvs), 4.0)
    fig = new_figure(min(w * len(dcps) + 1.5, 16), 1.4 + 1.25 * len(backends))
    axes = fig.subplots(1, len(dcps), squeeze=False)[0]
    vmax = heat.value.max()
    vmax = vmax if vmax == vmax and vmax > 0 else 1.0
    im = None
    for ax, dcp in zip(axes, dcps):
        im = _heatmap_panel(ax, heat[heat.dcp_size == dcp], backends, kvs, vmax)
        ax.set_title(f"DCP {dcp}: best output tok/s at concurrency {int(heat.concurrency.iloc[0])}", fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=list(axes), label="output tok/s", shrink=0.9)
    return png_bytes(fig)


def _heatmap_panel(ax, cells: pd.DataFrame, backends: list[str], kvs: list[str], vmax: float):
    """One DCP size's grid: the value written in each cell, or the reason it has none."""
    grid = np.full((len(backends), len(kvs)), np.nan)
    notes = {}
    for r in cells.itertuples():
        i, j = backends.index(str(r.draft_attention_backend)), kvs.index(str(r.draft_kv_cache_dtype))
        grid[i, j] = r.value
        notes[i, j] = r.note
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
    for i in range(len(backends)):
        for j in range(len(kvs)):
            v = grid[i, j]
            if v == v:
                color = "white" if v < 0.6 * vmax else "black"
                ax.text(j, i, f"{v:,.0f}\ntok/s", ha="center", va="center", fontsize=10, color=color, fontweight="bold")
            else:
                note = wrap(notes.get((i, j)) or "not in sweep", 24)
                ax.text(j, i, note, ha="center", va="center", fontsize=8, color="#7a0000")
    ax.set_xticks(range(len(kvs)), kvs)
    ax.set_yticks(range(len(backends)), backends)
    ax.set_xlabel("draft KV cache dtype")
    ax.set_ylabel("draft attention backend")
    return im


def plot_roofline(roof: pd.DataFrame) -> bytes | None:
    """Per point, log scale: the bandwidth-bound max decode tok/s (top-k experts; uniform routing) and the
    achieved output tok/s, with the achieved fraction of the top-k bound written next to it and, where the step
    was measured, the share of peak HBM bandwidth its modelled bytes took (bench.report.roofline_check) and, where
    the sweep measured it, of the copy ceiling (bench.bandwidth)."""
    if not len(roof):
        return None
    n = len(roof)
    fig = new_figure(12, 1.6 + 0.55 * n)
    ax = fig.subplots()
    y = np.arange(n)[::-1]
    h = 0.26
    ach = pd.to_numeric(roof.output_throughput, errors="coerce")
    for dy, values, color, label in (
        (h, roof.max_output_tok_s, "#c44e52", "max decode tok/s (top-k experts read)"),
        (0, roof.max_output_tok_s_uniform, "#dd8452", "max decode tok/s (uniform routing: expected distinct experts)"),
        (-h, ach.fillna(0), "#4c72b0", "achieved output tok/s"),
    ):
        ax.barh(y + dy, values, height=h, color=color, label=label)
    step_bw = pd.to_numeric(roof.get("achieved_fraction", pd.Series(np.nan, index=roof.index)), errors="coerce")
    nan = pd.Series(np.nan, index=roof.index)
    step_copy = pd.to_numeric(roof.get("achieved_fraction_measured", nan), errors="coerce")
    for yi, a, f, bw, copy in zip(y, ach, roof.fraction_of_max, step_bw, step_copy):
        if a == a and f is not None and f == f:
            step = f"; decode step at {bw:.0%} of peak HBM" if bw == bw else ""
            step += f" ({copy:.0%} of the measured copy ceiling)" if bw == bw and copy == copy else ""
            ax.text(a, yi - h, f"  {f:.2%} of max (top-k){step}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yticks(y, roof.label)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("tokens/s (log scale)")
    ax.set_title("Speed of light (bandwidth roofline MODEL) vs achieved", fontsize=10)
    ax.grid(axis="x", alpha=0.3, which="both")
    ax.margins(x=0.05)
    lo = min(ach[ach > 0].min() if (ach > 0).any() else roof.max_output_tok_s.min(), roof.max_output_tok_s.min())
    ax.set_xlim(left=lo / 3, right=roof.max_output_tok_s.max() * 3)
    fig.legend(loc="outside lower center", ncol=3, fontsize=8)
    return png_bytes(fig)


def plot_nvtx(summary: pd.DataFrame) -> bytes | None:
    """NVTX range breakdown (CPU time vs GPU busy time per range name): bench.profiling.plot's chart, which
    writes a file; it is read back so that this plot comes out as bytes like the others."""
    if not len(summary):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return plot_range_breakdown(summary, Path(tmp) / "nvtx.png").read_bytes()


def draw_all(data: ReportData) -> dict[str, bytes | None]:
    """Every figure of the report, by name (nvtx0, nvtx1, ... for profiling tables)."""
    out = {
        "throughput": plot_throughput(data.throughput),
        "latency": plot_latency(data.latency),
        "pareto": plot_pareto(data.pareto),
        "acceptance": plot_acceptance(data.acceptance),
        "heatmap": plot_heatmap(data.heatmap),
        "roofline": plot_roofline(data.roofline),
    }
    for i, (_, summary) in enumerate(data.nvtx):
        out[f"nvtx{i}"] = plot_nvtx(summary)
    if len(data.categories):  # sweeps with workloads only
        out["categories"] = plot_categories(data.categories)
    return out
