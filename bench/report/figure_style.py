"""What every figure of the report shares: a bare Agg figure and its PNG bytes, one style per series, the
batch-shape x axis, a grid of panels (one per input/output length), and a legend shared by all panels."""

from __future__ import annotations

import io
import math
import textwrap
from typing import Any, NamedTuple

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "*", "h"]
# an emulated DCP rank (bench.models.dcp_emulation): never a plain rank's look (a dash-dot-dot line, an X marker)
EMULATED = {"marker": "X", "linestyle": (0, (4, 1, 1, 1, 1, 1))}


def new_figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def png_or_none(fig: Figure | None) -> bytes | None:
    """A figure's PNG bytes; None for no figure (nothing to draw)."""
    return None if fig is None else png_bytes(fig)


def series_styles(df: pd.DataFrame) -> dict[str, dict]:
    """Stable styles per series (engine configuration): a color of its own (ordered by draft backend, draft KV
    dtype, workload, emulated or not, then the series name), line style per draft KV dtype, marker per DCP size,
    so a series looks the same in every plot and no two series share a color (up to 20). An emulated DCP rank
    has an X marker and a dash-dot-dot line besides, apart from every plain rank."""
    workload = "workload" in df

    def key(r) -> tuple[str, str, str, str, str]:
        return (
            str(r.draft_attention_backend),
            str(r.draft_kv_cache_dtype),
            str(r.workload) if workload else "",
            "emulated" if _emulated(r) else "",
            str(r.series),
        )

    combos = sorted({key(r) for r in df.itertuples()})
    kvs = sorted({c[1] for c in combos})
    dcps = sorted({int(d) for d in df.dcp_size.dropna()})
    palette = (
        [f"C{i}" for i in range(10)]
        if len(combos) <= 10
        else [matplotlib.colormaps["tab20"](i % 20) for i in range(len(combos))]
    )
    out: dict[str, dict[str, Any]] = {}
    for r in df.drop_duplicates("series").itertuples():
        dcp = int(r.dcp_size) if r.dcp_size == r.dcp_size and r.dcp_size is not None else None
        out[r.series] = {
            "color": palette[combos.index(key(r)) % len(palette)],
            "linestyle": LINESTYLES[kvs.index(key(r)[1]) % len(LINESTYLES)],
            "marker": MARKERS[dcps.index(dcp) % len(MARKERS)] if dcp in dcps else "o",
        }
        if _emulated(r):
            out[r.series].update(EMULATED)
    return out


def _emulated(row) -> bool:
    value = getattr(row, "dcp_emulated", None)
    return isinstance(value, (int, float)) and value == value


class ShapeAxis(NamedTuple):
    """A batch-shape x axis: each row's x position, the ticks and their labels, the axis title, log2 scale."""

    x: pd.Series
    ticks: list
    labels: list[str]
    title: str
    log: bool

    def draw(self, ax) -> None:
        if self.log:
            ax.set_xscale("log", base=2)
        ax.set_xticks(self.ticks, self.labels)
        ax.minorticks_off()
        ax.set_xlabel(self.title)


def shape_x(df: pd.DataFrame) -> ShapeAxis:
    """The concurrency itself when input/output lengths are the same everywhere (log2 scale when it spans 4x or
    more), else one category per (concurrency, input, output) shape ordered by concurrency; a text workload's
    point (no fixed input length) is its load label (the `shape` column, bench.report.analysis.enrich)."""
    labels_of = df["shape"] if "shape" in df else pd.Series([""] * len(df), index=df.index)
    keys = [
        (_num(c), _num(i), _num(o), "" if _num(i) != math.inf else str(label or ""))
        for c, i, o, label in zip(df.concurrency, df.input_len, df.output_len, labels_of)
    ]
    if len({k[1:] for k in keys}) <= 1 and all(k[0] != math.inf for k in keys):
        vals = sorted({int(k[0]) for k in keys})
        log = len(vals) > 1 and vals[-1] / max(vals[0], 1) >= 4
        return ShapeAxis(
            df.concurrency.astype(float), vals, [str(v) for v in vals], "concurrency (requests in flight)", log
        )
    order = sorted(set(keys))
    pos = {k: i for i, k in enumerate(order)}
    x = pd.Series([float(pos[k]) for k in keys], index=df.index)
    labels = [wrap(label, 16) if label else f"{_int(c)}\n{_int(i)}/{_int(o)}" for c, i, o, label in order]
    text = any(k[3] for k in order)
    title = "batch shape: concurrency, input/output tokens" + (" (text workloads: their load)" if text else "")
    return ShapeAxis(x, list(range(len(order))), labels, title, False)


def _num(value) -> float:
    """A shape number; inf when missing (NaN breaks sets and sorts, inf equals itself and sorts last)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.inf
    return math.inf if math.isnan(value) else value


def _int(value: float) -> str:
    return "?" if value == math.inf else str(int(value))


def wrap(text: str, width: int = 28) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def length_groups(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows of each input/output length (`lengths`, bench.report.analysis.lengths_label), shortest input first
    and text workloads last: one panel each, no line across two."""

    def order(label: str) -> tuple:
        nums = [int(t) for t in str(label).replace("/", " ").split() if t.isdigit()]
        return (0, *nums) if nums else (1,)

    labels = sorted(df["lengths"].dropna().unique(), key=order)
    return [(str(label), df[df["lengths"] == label]) for label in labels]


def panel_grid(fig: Figure, n: int, ncols: int = 2, **kw) -> list:
    """n panels in rows of at most `ncols`, the unused cells of the last row removed."""
    cols = max(1, min(ncols, n))
    rows = max(1, math.ceil(n / cols))
    axes = list(np.ravel(fig.subplots(rows, cols, squeeze=False, **kw)))
    for ax in axes[n:]:
        ax.remove()
    return axes[:n]


def series_lines(ax, grp: pd.DataFrame, metric: str, styles: dict, **kw) -> None:
    """One line per series and input/output length of `grp` (x = its `_x` column), in the series' style: a line
    joins only points of one length."""
    for (name, _), s in grp.groupby(["series", "lengths"], sort=True):
        if s[metric].isna().all():  # no legend entry without data
            continue
        s = s.sort_values("_x")
        ax.plot(s._x, s[metric], label=name, markersize=7, **kw, **styles[name])


def shared_legend(fig: Figure, axes, title: str | None = None, ncol: int = 4) -> None:
    seen: dict[str, Any] = {}
    for ax in np.ravel(axes):
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    if seen:
        fig.legend(
            list(seen.values()),
            list(seen),
            loc="outside lower center",
            ncol=min(len(seen), ncol),
            fontsize=9,
            title=title,
        )
