"""Charts of the NVTX range analysis.

Drawn on a bare matplotlib Figure (Agg canvas) rather than through pyplot: no display needed on servers or in
CI, and importing this module does not switch the backend of a notebook or program that also uses pyplot.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from bench.errors import BenchError
from bench.profiling.nsys_readers import range_label
from bench.store import atomic_write_bytes

MAX_BARS = 30


def plot_range_breakdown(summary_df: pd.DataFrame, path_png: str | Path, *, max_bars: int = MAX_BARS) -> Path:
    """Horizontal bars per range name (summary table rows): mean CPU time vs mean GPU busy time, in ms.

    Why both: a range whose GPU busy time is far below its CPU time is launch/host bound, one far above
    (work queued asynchronously) is GPU bound. The `max_bars` names with the largest total CPU time are shown;
    a log axis is used when the values span more than three decades, so microsecond ranges stay visible next
    to second-long ones.
    """
    path_png = Path(path_png)
    df = summary_df.sort_values("cpu_ns_total", ascending=False, kind="stable").head(max_bars).iloc[::-1]
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(len(df), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if len(df):
        _draw_bars(ax, df)
    else:
        ax.text(0.5, 0.5, "no NVTX ranges", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("time per range (ms)")
    ax.set_title("NVTX ranges: CPU time vs GPU busy time (mean per range)")
    # margins from the label lengths instead of tight_layout: one draw (savefig's) instead of two, which halves
    # the plot's cost on a large export's analysis (docs/nsys-analysis.md "Performance")
    width_in = fig.get_figwidth()
    longest = max((len(range_label(d, n)) for d, n in zip(df["domain"], df["name"])), default=10)
    fig.subplots_adjust(
        left=min(0.6, (0.2 + 0.075 * longest) / width_in),
        right=0.97,
        top=1 - 0.5 / fig.get_figheight(),
        bottom=0.6 / fig.get_figheight(),
    )
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        atomic_write_bytes(path_png, buf.getvalue())
    except OSError as exc:
        raise BenchError(f"cannot write the plot {path_png} ({exc})") from exc
    return path_png


def _draw_bars(ax, df: pd.DataFrame) -> None:
    labels = [range_label(d, n) for d, n in zip(df["domain"], df["name"])]
    cpu = df["cpu_ns_mean"].to_numpy(float) / 1e6
    gpu = df["gpu_busy_ns_mean"].to_numpy(float) / 1e6
    y = np.arange(len(df))
    ax.barh(y + 0.2, cpu, height=0.4, label="CPU time", color="#4c72b0")
    ax.barh(y - 0.2, gpu, height=0.4, label="GPU busy (union of kernels/copies)", color="#dd8452")
    ax.set_yticks(y, labels)
    positive = np.concatenate([cpu[cpu > 0], gpu[gpu > 0]])
    if len(positive) and positive.max() / positive.min() > 1e3:
        ax.set_xscale("log")
        # plain numbers ("0.01", "100") instead of $10^{n}$, and no minor ticks: matplotlib's mathtext parser and
        # the ~90 minor tick objects took 0.27-0.32 s of the chart's draw in a fresh process, 0.17 s without them
        # (CPU machine, the 65 MB benchmark export's summary, 3 runs each), and `bench profile analyze` always is one
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(loc="lower right", fontsize=8)  # "best" searches every artist: slow
    for yi, c, g, n in zip(y, cpu, gpu, df["count"]):
        ax.text(max(c, g), yi, f"  n={n}", va="center", fontsize=8)
