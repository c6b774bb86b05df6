"""The report's figures: one function per plot, a table of bench.report.analysis in, PNG bytes out (None when the
table has nothing to draw; the HTML then says so instead of showing an empty chart).

Figures are drawn on bare matplotlib Figures with an Agg canvas, never through pyplot: no global state, no
display, and importing this module does not change the backend of a program that also uses pyplot.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from bench.core.fmt import fmt
from bench.profiling.plot import plot_range_breakdown
from bench.profiling.step_shares import CaptureShares
from bench.report.analysis import TEXT_LENGTHS, ReportData
from bench.report.categories import plot_categories
from bench.report.figure_style import (
    ShapeAxis,
    length_groups,
    new_figure,
    png_bytes,
    png_or_none,
    series_lines,
    series_styles,
    shape_x,
    shared_legend,
    wrap,
)
from bench.report.figures_load import plot_latency_cdf, plot_throughput, plot_timeline, relative_bars

ASKED_STYLE = {"color": "k", "linestyle": (0, (2, 2))}  # the asked synthetic acceptance, wherever it is drawn


def _length_axis(grp: pd.DataFrame, lengths: str) -> ShapeAxis:
    """The x axis of one input/output length's panels: its concurrencies (an emulated DCP rank's own input length,
    its share of the prompt, does not split the axis); a text workload's load labels."""
    return shape_x(grp if lengths == TEXT_LENGTHS else grp.assign(input_len=0, output_len=0))


def acceptance_figure(acc: pd.DataFrame, styles: dict | None = None) -> Figure | None:
    """Acceptance rate and mean acceptance length vs concurrency per series, and per-position acceptance per
    point (the asked synthetic rates, when the sweep set them, dashed black); one row of panels per input/output
    length, every DCP size in the same panels (marker = DCP size)."""
    acc = acc[acc[["acceptance_rate", "mean_acceptance_length"]].notna().any(axis=1)]  # no draft: nothing to draw
    if not len(acc):
        return None
    styles = styles or series_styles(acc)
    asked = next((v for v in acc.asked_rates if isinstance(v, list)), None) if "asked_rates" in acc else None
    k_max = int(pd.to_numeric(acc.num_speculative_tokens, errors="coerce").max() or 1)
    pos_cols = [c for c in acc.columns if c.startswith("pos") and c[3:].isdigit()]
    rows = length_groups(acc)
    fig = new_figure(13, 3.6 * len(rows) + 1.0)
    axes = fig.subplots(len(rows), 3, squeeze=False)
    panels = (
        ("acceptance_rate", "acceptance rate", (0, 1.02)),
        ("mean_acceptance_length", "mean acceptance length", (1, k_max + 1.05)),
    )
    expected = (float(np.mean(asked)), 1 + float(np.sum(asked))) if asked else (None, None)
    for (lengths, grp), row_axes in zip(rows, axes):
        shape = _length_axis(grp, lengths)
        grp = grp.assign(_x=shape.x)
        prefix = f"{lengths}: " if len(rows) > 1 else ""
        for ax, (metric, label, lim), exp in zip(row_axes, panels, expected):
            series_lines(ax, grp, metric, styles)
            if exp is not None:
                _asked_line(ax, exp)
            shape.draw(ax)
            ax.set_title(prefix + label, fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylim(*lim)
        _per_position_panel(row_axes[2], grp, pos_cols, styles, asked)
        row_axes[2].set_title(prefix + "per-position acceptance", fontsize=10)
        row_axes[0].set_ylabel("accepted / drafted")
        row_axes[1].set_ylabel("tokens per step")
        row_axes[2].set_ylabel("share accepted (one line per point)")
    shared_legend(fig, axes)
    return fig


def plot_acceptance(acc: pd.DataFrame, styles: dict | None = None) -> bytes | None:
    """acceptance_figure as PNG bytes."""
    return png_or_none(acceptance_figure(acc, styles))


def _asked_line(ax, expected: float) -> None:
    ax.axhline(expected, linewidth=1, **ASKED_STYLE)
    ax.annotate(
        f"asked: {fmt(expected, '.3f')}",
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
                ax.text(
                    j,
                    i,
                    f"{fmt(v, ',.0f')}\ntok/s",
                    ha="center",
                    va="center",
                    fontsize=10,
                    color=color,
                    fontweight="bold",
                )
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
    the sweep measured it, of the copy ceiling (bench.engine.bandwidth)."""
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
            step = f"; decode step at {fmt(bw, '.0%')} of peak HBM" if bw == bw else ""
            step += f" ({fmt(copy, '.0%')} of the measured copy ceiling)" if bw == bw and copy == copy else ""
            ax.text(a, yi - h, f"  {fmt(f, '.1%')} of max (top-k){step}", va="center", fontsize=8)
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


# A decode step's parts, each without the parts inside it (bench.profiling.step_shares.PARTS are inclusive: the
# metadata builds are inside the propose): (name, color, its median ms from a shares table row set `t` and column).
STEP_PARTS = (
    ("target forward", "#4c72b0", lambda t, c: t["bench.target.forward"][c]),
    (
        "draft propose (without its metadata builds)",
        "#dd8452",
        lambda t, c: t["bench.draft.propose"][c] - t["bench.draft.attn_metadata"][c],
    ),
    ("draft MLA metadata builds", "#c44e52", lambda t, c: t["bench.draft.attn_metadata"][c]),
    ("rejection sampling", "#8172b3", lambda t, c: t["bench.sample.rejection"][c]),
)
STEP_REST = ("rest of the step (step median − the parts' medians)", "#bbbbbb")


def step_segments(table: pd.DataFrame, column: str) -> list[tuple[str, str, float]]:
    """A shares table's decode step cut into non-overlapping parts (name, color, ms) for one column (cpu_ms or
    gpu_busy_ms); the rest of the step last. Each part is a median over the decode steps, so the parts need not
    add up to the step's median: a negative difference is drawn as 0."""
    t = table.set_index("part").to_dict("index")
    parts = [(name, color, max(float(get(t, column)), 0.0)) for name, color, get in STEP_PARTS]
    step = float(t["bench.engine.step"][column])
    return [*parts, (*STEP_REST, max(step - sum(v for _, _, v in parts), 0.0))]


def capture_label(folder: Path, points: pd.DataFrame) -> str:
    """A capture's engine configuration (its folder is capture-<engine id>.analysis), or the folder's name."""
    engine = folder.name.removeprefix("capture-").removesuffix(".analysis")
    series = points.loc[points.engine_id == engine, "series"] if "engine_id" in points else pd.Series([], dtype=object)
    return str(series.iloc[0]) if len(series) else folder.name


def step_breakdown_figure(shares: dict[Path, CaptureShares], points: pd.DataFrame) -> Figure | None:
    """Per profiled engine configuration, its median decode step as stacked bars, CPU time and GPU busy time: the
    target's forward, the draft's propose and metadata builds, rejection sampling and the rest, in ms."""
    captures = [(capture_label(folder, points), c.table) for folder, c in sorted(shares.items()) if c.table is not None]
    if not captures:
        return None
    bars = [
        (f"{label}\n{kind}", step_segments(t, col))
        for label, t in captures
        for kind, col in (("CPU", "cpu_ms"), ("GPU busy", "gpu_busy_ms"))
    ]
    fig = new_figure(12, 1.8 + 0.7 * len(bars))
    ax = fig.subplots()
    y = np.arange(len(bars))[::-1]
    top = max(sum(v for _, _, v in segs) for _, segs in bars) or 1.0
    for yi, (_, segs) in zip(y, bars):
        left = 0.0
        for name, color, v in segs:
            ax.barh(yi, v, left=left, height=0.6, color=color, label=name)
            if v > 0.07 * top:
                ax.text(left + v / 2, yi, fmt(v, ".2f"), ha="center", va="center", fontsize=8, color="white")
            left += v
        ax.text(left, yi, f"  {fmt(left, '.2f')} ms", va="center", fontsize=8)
    ax.set_yticks(y, [label for label, _ in bars], fontsize=8)
    ax.set_xlabel("ms per decode step (medians over the capture's decode steps)")
    ax.set_title("Where a decode step's time goes (NVTX ranges)", fontsize=10)
    ax.set_xlim(0, top * 1.15)
    ax.grid(axis="x", alpha=0.3)
    shared_legend(fig, [ax], ncol=3)
    return fig


def plot_step_breakdown(shares: dict[Path, CaptureShares], points: pd.DataFrame) -> bytes | None:
    """step breakdown_figure as PNG bytes."""
    return png_or_none(step_breakdown_figure(shares, points))


def _millions(tokens: float) -> str:
    return f"{fmt(tokens / 1e6, '.2f')}M"


def dcp_tick(rows: pd.DataFrame) -> str:
    """Under a DCP size: the KV tokens its group holds and the largest batch that fits at each length."""
    kv = pd.to_numeric(rows.kv_cache_tokens, errors="coerce").dropna()
    lines = [f"DCP {int(rows.dcp_size.iloc[0])}", f"KV {_millions(kv.max())} tok" if len(kv) else "KV ?"]
    fits = rows.dropna(subset=["largest_batch"]).drop_duplicates(["input_len", "output_len"])
    for r in fits.itertuples():
        what = f" at {fmt(r.input_len, '.0f')}+{fmt(r.output_len, '.0f')}" if len(fits) > 1 else ""
        lines.append(f"fits batch {fmt(r.largest_batch, ',.0f')}{what}")
    return "\n".join(lines)


def dcp_figure(dcp: pd.DataFrame) -> Figure | None:
    """Output tok/s against DCP size on one y axis, one color per measured shape: measured (solid, the stated 95%
    precision as error bars) beside the same scaled by the modelled communication (dashed, bench.models.dcp_comm); under
    each size the KV capacity it buys and the largest batch that fits (not measured at that batch)."""
    dcp = dcp[pd.to_numeric(dcp.output_throughput, errors="coerce").notna()] if len(dcp) else dcp
    if not len(dcp) or dcp.dcp_size.nunique() < 2:
        return None
    sizes = sorted(int(d) for d in dcp.dcp_size.unique())
    pos = {d: i for i, d in enumerate(sizes)}
    fig = new_figure(10, 5.6)
    ax = fig.subplots()
    for i, (load, grp) in enumerate(dcp.groupby("load", sort=True)):
        grp = grp.sort_values("dcp_size")
        x = grp.dcp_size.map(pos).to_numpy(float)
        y = pd.to_numeric(grp.output_throughput, errors="coerce")
        color = f"C{i % 10}"
        ax.errorbar(
            x,
            y,
            yerr=relative_bars(y, grp.throughput_halfwidth),
            color=color,
            marker="o",
            capsize=4,
            linewidth=1.8,
            label=f"{load}: measured (one GPU)",
        )
        comm = pd.to_numeric(grp.throughput_with_comm, errors="coerce")
        if comm.notna().any():
            ax.plot(
                x,
                comm,
                color=color,
                marker="o",
                markerfacecolor="white",
                linestyle="--",
                linewidth=1.4,
                label=f"{load}: with modelled communication",
            )
        for xi, yi, h in zip(x, y, grp.throughput_halfwidth):
            text = fmt(yi, ",.1f") + ("" if isinstance(h, float) and h == h else " (no precision)")
            ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8, color=color)
    ax.set_xticks(range(len(sizes)), [dcp_tick(dcp[dcp.dcp_size == d]) for d in sizes], fontsize=8)
    ax.set_xlim(-0.4, len(sizes) - 0.6)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("output tok/s")
    ax.set_title(
        "output tok/s vs DCP size at each measured batch\n"
        "under each size: the KV tokens of its group and the largest batch that fits (capacity, not measured)",
        fontsize=10,
    )
    ax.grid(alpha=0.3)
    shared_legend(fig, [ax], ncol=2)
    return fig


def plot_dcp(dcp: pd.DataFrame) -> bytes | None:
    """dcp_figure as PNG bytes."""
    return png_or_none(dcp_figure(dcp))


def draw_all(data: ReportData) -> dict[str, bytes | None]:
    """Every figure of the report, by name (nvtx0, nvtx1, ... for profiling tables)."""
    styles = series_styles(data.points[data.points.status == "ok"])  # a configuration looks the same in each figure
    out = {
        "throughput": plot_throughput(data.throughput, styles),
        "latency": plot_latency_cdf(data.latency, data.samples, styles),
        "timeline": plot_timeline(data.points, data.timelines),
        "acceptance": plot_acceptance(data.acceptance, styles),
        "heatmap": plot_heatmap(data.heatmap),
        "roofline": plot_roofline(data.roofline),
        "dcp": plot_dcp(data.dcp),
        "steps": plot_step_breakdown(data.step_shares, data.points),
    }
    for i, (_, summary) in enumerate(data.nvtx):
        out[f"nvtx{i}"] = plot_nvtx(summary)
    if len(data.categories):  # sweeps with workloads only
        out["categories"] = plot_categories(data.categories)
    return out
