"""The report's figures of the load itself: throughput per GPU against per-user speed (one panel per input/output
length, with the stated precision as error bars), the TPOT and ITL distributions (CDFs from the raw request
records), and output tok/s over the measured window with the steady span and its whole cycles.

Tables in (bench.report.analysis, bench.report.request_views), PNG bytes out; None when there is nothing to draw.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from bench.core.fmt import fmt
from bench.report.figure_style import (
    length_groups,
    new_figure,
    panel_grid,
    png_or_none,
    series_styles,
    shared_legend,
)
from bench.report.request_views import MAX_TIMELINES

CDF_POINTS = 400  # a CDF is drawn through this many quantiles: enough to see its shape, cheap for 100k samples
NO_PRECISION = "no error bar: no precision stated"


def relative_bars(values: pd.Series, halfwidth: pd.Series, inverse: bool = False) -> np.ndarray:
    """(2, n) error bar lengths below and above each value from its relative 95% half-width; 0 where none is
    stated. `inverse`: the value is 1 / the measured quantity (per-user tok/s = 1000 / mean TPOT), whose interval
    [m (1 - h), m (1 + h)] maps to [v / (1 + h), v / (1 - h)]."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(float)
    h = pd.to_numeric(halfwidth, errors="coerce").to_numpy(float)
    h = np.where(np.isfinite(h) & np.isfinite(v), h, 0.0)
    if inverse:
        lo = v - v / (1 + h)
        hi = np.where(h < 1, v / np.where(h < 1, 1 - h, 1) - v, np.inf)
    else:
        lo = hi = v * h
    return np.vstack([np.nan_to_num(lo), np.nan_to_num(hi)])


def throughput_figure(thr: pd.DataFrame, styles: dict | None = None) -> Figure | None:
    """Output tok/s per GPU (up) against output tok/s per user (right), one panel per input/output length, one
    line per engine configuration through its concurrencies (each point labelled c<N>); error bars: the stated
    95% precision of each figure (none drawn where none is stated). Up and right is better: a configuration whose
    line lies above and right of another's serves more per GPU at the same per-user speed."""
    thr = thr[thr.output_throughput_per_gpu.notna() & thr.per_user_output_throughput.notna()]
    if not len(thr):
        return None
    styles = styles or series_styles(thr)
    groups = length_groups(thr)
    ncols = 2 if len(groups) > 1 else 1
    fig = new_figure(6.2 * ncols, 4.2 * math.ceil(len(groups) / ncols) + 1.2)
    axes = panel_grid(fig, len(groups), ncols)
    for ax, (lengths, grp) in zip(axes, groups):
        bare = 0
        for name, s in grp.groupby("series", sort=True):
            s = s.sort_values("concurrency")
            st = styles[name]
            x, y = s.per_user_output_throughput, s.output_throughput_per_gpu
            ax.errorbar(
                x,
                y,
                xerr=relative_bars(x, s.tpot_halfwidth, inverse=True),
                yerr=relative_bars(y, s.throughput_halfwidth),
                label=name,
                color=st["color"],
                linestyle=st["linestyle"],
                marker=st["marker"],
                markersize=6,
                capsize=3,
                linewidth=1.6,
            )
            bare += int(s.throughput_halfwidth.isna().sum())
            for xi, yi, c in zip(x, y, s.concurrency):
                ax.annotate(
                    f"c{fmt(c, '.0f')}", (xi, yi), textcoords="offset points", xytext=(5, 4), fontsize=7, color="0.3"
                )
        ax.set_title(lengths, fontsize=10)
        ax.set_xlabel("output tok/s per user (1000 / mean TPOT)  →")
        ax.set_ylabel("output tok/s per GPU  ↑")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.margins(0.12)
        ax.grid(alpha=0.3)
        if bare:
            ax.text(0.99, 0.01, f"{bare} point(s): {NO_PRECISION}", transform=ax.transAxes, ha="right", fontsize=7)
    shared_legend(fig, axes, "engine configuration", ncol=3)
    return fig


def plot_throughput(thr: pd.DataFrame, styles: dict | None = None) -> bytes | None:
    """throughput_figure as PNG bytes."""
    return png_or_none(throughput_figure(thr, styles))


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) through at most CDF_POINTS quantiles of the samples."""
    v = np.sort(values[np.isfinite(values)])
    if v.size > CDF_POINTS:
        q = np.linspace(0, 1, CDF_POINTS)
        return np.quantile(v, q), q
    return np.concatenate(([v[0]], v)), np.arange(0, v.size + 1) / v.size  # from 0 at the smallest sample


def latency_groups(lat: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The points of each shape (input/output length, then concurrency), in that order."""
    out = []
    for lengths, grp in length_groups(lat):
        for c, sub in grp.groupby("concurrency", sort=True, dropna=False):
            out.append((f"c{fmt(c, '.0f', missing='?')}, {lengths}", sub))
    return out


def latency_cdf_figure(lat: pd.DataFrame, samples: pd.DataFrame, styles: dict | None = None) -> Figure | None:
    """Per shape (one row of panels each), the CDF of per-request TPOT (left) and of the token-accurate ITL
    (right) of every configuration, from each point's raw request records over its headline window."""
    if not len(samples):
        return None
    df = lat.merge(samples, on="point_id", how="inner")
    df = df[[len(t) > 0 or len(i) > 0 for t, i in zip(df.tpot_ms, df.itl_ms)]]
    if not len(df):
        return None
    styles = styles or series_styles(df)
    groups = latency_groups(df)
    fig = new_figure(12, 2.7 * len(groups) + 1.3)
    axes = fig.subplots(len(groups), 2, squeeze=False)
    for row_axes, (title, grp) in zip(axes, groups):
        for ax, metric, name in ((row_axes[0], "tpot_ms", "TPOT per request"), (row_axes[1], "itl_ms", "ITL")):
            for r in grp.sort_values("series").itertuples():
                values = getattr(r, metric)
                if not len(values):
                    continue
                x, y = _cdf(np.asarray(values, float))
                st = styles[r.series]
                ax.plot(x, y, drawstyle="steps-post", color=st["color"], linestyle=st["linestyle"], label=r.series)
            windows = sorted(set(grp.window))
            ax.set_title(f"{title}: {name} ({'/'.join(windows)} window)", fontsize=9)
            ax.set_ylim(0, 1.02)
            if metric == "itl_ms":  # the tail spans decades (a stall, a prefill); tokens of one chunk sit at 0
                ax.set_xscale("log")
                ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v, "g")))
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_xlabel("ITL ms (log scale)")
            else:
                ax.set_xlabel("TPOT ms")
            ax.grid(alpha=0.3, which="both")
        row_axes[0].set_ylabel("share of requests ≤ x")
        row_axes[1].set_ylabel("share of tokens ≤ x")
    shared_legend(fig, axes, "engine configuration", ncol=3)
    return fig


def plot_latency_cdf(lat: pd.DataFrame, samples: pd.DataFrame, styles: dict | None = None) -> bytes | None:
    """latency cdf_figure as PNG bytes."""
    return png_or_none(latency_cdf_figure(lat, samples, styles))


def timeline_points(points: pd.DataFrame, timelines: pd.DataFrame) -> pd.DataFrame:
    """The points whose window is drawn: all with a timeline, or at most MAX_TIMELINES of them (the largest
    concurrency of each configuration and length first, in label order)."""
    df = points.merge(timelines, on="point_id", how="inner").sort_values(["lengths", "series", "concurrency"])
    if len(df) <= MAX_TIMELINES:
        return df
    top = df.groupby(["lengths", "series"], sort=False).concurrency.transform("max") == df.concurrency
    return pd.concat([df[top], df[~top]]).head(MAX_TIMELINES).sort_values(["lengths", "series", "concurrency"])


def timeline_figure(points: pd.DataFrame, timelines: pd.DataFrame) -> Figure | None:
    """Small multiples, one per point (MAX_TIMELINES at most): output tok/s in bins over the point's first run,
    the steady span shaded, the edges of its whole cycles (C completions each: the precision's sub-windows) as
    thin lines, and the headline tok/s dashed with its stated 95% band."""
    if not len(timelines):
        return None
    df = timeline_points(points, timelines)
    ncols = 3 if len(df) > 2 else len(df)
    fig = new_figure(4.4 * ncols, 2.6 * math.ceil(len(df) / ncols) + 0.9)
    axes = panel_grid(fig, len(df), ncols)
    for ax, r in zip(axes, df.itertuples()):
        ax.plot(r.t, r.tok_s, color="C0", linewidth=1.2, drawstyle="steps-mid", label="output tok/s (binned)")
        for a, b in r.spans:
            ax.axvspan(a, b, color="C2", alpha=0.15, label="steady span")
        for i, e in enumerate(r.edges):
            ax.axvline(e, color="C2", linewidth=0.7, alpha=0.8, label="whole-cycle edges" if i == 0 else None)
        for a, b in r.cycle_windows:  # the record's headline: tokens over these whole cycles
            ax.axvspan(
                a,
                b,
                facecolor="none",
                edgecolor="darkgreen",
                hatch="//",
                linewidth=0,
                alpha=0.35,
                label="headline's whole cycles",
            )
        head = r.output_throughput
        if head == head and head is not None:
            ax.axhline(head, color="k", linestyle="--", linewidth=1, label=f"headline ({r.window} window)")
            h = r.throughput_halfwidth
            if isinstance(h, float) and h == h:
                ax.axhspan(head * (1 - h), head * (1 + h), color="k", alpha=0.08, label="stated 95% interval")
            else:
                why = "short: < 3 whole cycles, " if r.short else ""
                ax.text(0.99, 0.02, why + "no precision stated", transform=ax.transAxes, ha="right", fontsize=7)
        runs = f", run 1 of {r.runs}" if r.runs > 1 else ""
        ax.set_title(f"{r.label}{runs}", fontsize=8)
        ax.set_xlabel("s from the run's first send", fontsize=8)
        ax.set_ylabel("output tok/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_ylim(bottom=0)
        ax.set_xlim(0, r.duration_s)
        ax.grid(alpha=0.3)
    shown = "" if len(df) == len(timelines) else f" ({len(df)} of {len(timelines)} points)"
    fig.suptitle("output tok/s over the measured window" + shown, fontsize=10)
    shared_legend(fig, axes, ncol=5 if ncols == 3 else 3)
    return fig


def plot_timeline(points: pd.DataFrame, timelines: pd.DataFrame) -> bytes | None:
    """timeline_figure as PNG bytes."""
    return png_or_none(timeline_figure(points, timelines))
