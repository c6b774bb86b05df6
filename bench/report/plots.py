"""The report's analysis (pure pandas: DataFrames in, DataFrames out) and its figures (one function per plot,
PNG bytes out).

Figures are drawn on bare matplotlib Figures with an Agg canvas, never through pyplot: no global state, no
display, and importing this module does not change the backend of a program that also uses pyplot. A plot
function returns None when its table has nothing to draw; the HTML says so instead of showing an empty chart.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.store import SweepStore

SERIES_AXES = ["draft_attention_backend", "draft_kv_cache_dtype", "dcp_size"]
FACET_AXES = ["num_speculative_tokens", "input_len", "output_len"]
CONFIG_AXES = SERIES_AXES + FACET_AXES + ["concurrency"]
NUMERIC = [
    "output_throughput",
    "per_user_output_throughput",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "errors",
    "acceptance_rate",
    "mean_acceptance_length",
]


# =============================================================================================================
# Analysis: pure pandas
# =============================================================================================================


def point_extras(sweep_dir: Path) -> pd.DataFrame:
    """What points_table leaves out and the report needs, one row per point id: ITL p90, the server arguments,
    the asked synthetic acceptance rates, the effective block size / DCP / logged backends, trials."""
    rows = []
    for pid, p in SweepStore(sweep_dir).points().items():
        eng = (p.get("config") or {}).get("engine") or {}
        m, e = p.get("metrics") or {}, p.get("effective") or {}
        acc = eng.get("acceptance") or {}
        rows.append(
            {
                "point_id": pid,
                "itl_p90_ms": (m.get("itl_ms") or {}).get("p90"),
                "server": eng.get("server") or {},
                "asked_rates": acc.get("rates") if acc.get("mode") == "synthetic" else None,
                "block_size_ran": e.get("block_size"),
                "dcp_size_ran": e.get("dcp_size"),
                "backends_logged": ", ".join(e.get("attention_backends_logged") or []) or None,
                "trials": len(p.get("trials") or []) or None,
                "phase": p.get("phase"),
                "log": (p.get("server") or {}).get("log"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "point_id",
            "itl_p90_ms",
            "server",
            "asked_rates",
            "block_size_ran",
            "dcp_size_ran",
            "backends_logged",
            "trials",
            "phase",
            "log",
        ],
    )


def varied_axes(points: pd.DataFrame) -> list[str]:
    """The configuration axes with more than one value in the sweep (all points, whatever their status)."""
    return [a for a in CONFIG_AXES if a in points and points[a].nunique(dropna=False) > 1]


def enrich(points: pd.DataFrame, extras: pd.DataFrame | None = None) -> pd.DataFrame:
    """points_table + extras, numeric metric columns as floats (None -> NaN), and strings naming each point by
    the axes that vary: `series` (draft backend / KV dtype, DCP and k), `shape` (concurrency, or the whole
    batch shape when input/output lengths vary) and `label` (both)."""
    df = points.copy()
    if extras is not None and len(extras):
        df = df.merge(extras, on="point_id", how="left")
    for col in NUMERIC:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    if "server" not in df:
        df["server"] = [{} for _ in range(len(df))]
    df["server"] = df["server"].map(lambda v: v if isinstance(v, dict) else {})
    varied = set(varied_axes(points))
    lens_vary = bool({"input_len", "output_len"} & varied)
    df["series"] = [series_label(r, varied) for r in df.itertuples()]
    df["shape"] = [
        f"{r.concurrency}x{r.input_len}x{r.output_len}" if lens_vary else f"c{r.concurrency}" for r in df.itertuples()
    ]
    df["label"] = [f"{a} {b}" for a, b in zip(df["series"], df["shape"])]
    return df


def series_label(row, varied: set[str]) -> str:
    parts = [f"{row.draft_attention_backend}/{row.draft_kv_cache_dtype}"]
    if "dcp_size" in varied or (row.dcp_size or 1) != 1:
        parts.append(f"dcp{row.dcp_size}")
    if "num_speculative_tokens" in varied:
        parts.append(f"k{row.num_speculative_tokens}")
    return " ".join(parts)


def ok_points(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.status == "ok"].reset_index(drop=True)


def throughput_series(df: pd.DataFrame) -> pd.DataFrame:
    """Ok points with a measured output throughput, one row per point, ordered for line plots."""
    cols = [
        "series",
        *SERIES_AXES,
        *FACET_AXES,
        "concurrency",
        "shape",
        "output_throughput",
        "per_user_output_throughput",
        "label",
    ]
    ok = ok_points(df)
    ok = ok[ok.output_throughput.notna() | ok.per_user_output_throughput.notna()]
    return ok[cols].sort_values(["series", "concurrency", *FACET_AXES], kind="stable").reset_index(drop=True)


LATENCY_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}


def latency_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per ok point: TTFT, TPOT and ITL p50/p90/p99 in ms (NaN where not measured)."""
    ok = ok_points(df)
    cols = ["label", "series", "concurrency"] + [f"{m}_{q}_ms" for m in LATENCY_METRICS for q in ("p50", "p90", "p99")]
    for c in cols:
        if c not in ok:
            ok[c] = np.nan
    return ok[cols].reset_index(drop=True)


def pareto_mask(xs, ys, maximize_x: bool = True, maximize_y: bool = True) -> np.ndarray:
    """True where no other point is at least as good on both and strictly better on one. NaN never optimal."""
    x = np.asarray(xs, float) * (1 if maximize_x else -1)
    y = np.asarray(ys, float) * (1 if maximize_y else -1)
    valid = ~(np.isnan(x) | np.isnan(y))
    out = np.zeros(len(x), bool)
    for i in np.flatnonzero(valid):
        dominated = valid & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        out[i] = not dominated.any()
    return out


def pareto_table(df: pd.DataFrame) -> pd.DataFrame:
    """Ok points with output tok/s, per-user tok/s and TPOT p50; `pareto_user`: optimal for (output tok/s max,
    per-user tok/s max); `pareto_tpot`: optimal for (output tok/s max, TPOT p50 min)."""
    ok = ok_points(df)
    out = ok[
        [
            "label",
            "series",
            *SERIES_AXES,
            "concurrency",
            "shape",
            "output_throughput",
            "per_user_output_throughput",
            "tpot_p50_ms",
        ]
    ].copy()
    out["pareto_user"] = pareto_mask(out.per_user_output_throughput, out.output_throughput)
    out["pareto_tpot"] = pareto_mask(out.tpot_p50_ms, out.output_throughput, maximize_x=False)
    return out.reset_index(drop=True)


def acceptance_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per ok point: acceptance rate, mean acceptance length and per-position acceptance (pos1..posK)."""
    ok = ok_points(df)
    k = max([len(v) for v in ok.per_position_acceptance if isinstance(v, list)] or [0])
    out = ok[
        ["label", "series", *SERIES_AXES, *FACET_AXES, "concurrency", "acceptance_rate", "mean_acceptance_length"]
    ].copy()
    for i in range(k):
        out[f"pos{i + 1}"] = [
            v[i] if isinstance(v, list) and len(v) > i and v[i] is not None else np.nan
            for v in ok.per_position_acceptance
        ]
    out["asked_rates"] = ok.get("asked_rates", None)
    return out.reset_index(drop=True)


def heatmap_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (DCP size, draft backend, draft KV dtype) cell: the best output tok/s among the cell's ok
    points at the sweep's largest concurrency (`value`, NaN if none) and, when there is none, why (`note`:
    the failed / skipped reasons, or which concurrencies did run)."""
    cols = [
        "dcp_size",
        "draft_attention_backend",
        "draft_kv_cache_dtype",
        "concurrency",
        "value",
        "best_label",
        "n_ok",
        "n_failed",
        "n_skipped",
        "note",
    ]
    if not len(df):
        return pd.DataFrame(columns=cols)
    top = int(df.concurrency.max())
    rows = []
    for (dcp, backend, kv), cell in df.groupby(
        ["dcp_size", "draft_attention_backend", "draft_kv_cache_dtype"], sort=False, dropna=False
    ):
        at = cell[(cell.status == "ok") & (cell.concurrency == top) & cell.output_throughput.notna()]
        bad = cell[cell.status != "ok"]
        value, best, note = np.nan, None, None
        if len(at):
            i = at.output_throughput.idxmax()
            value, best = float(at.output_throughput[i]), at.label[i]
        else:
            bad_top = bad[bad.concurrency == top]
            reasons = (bad_top if len(bad_top) else bad).apply(lambda r: f"{r.status}: {r.reason or '?'}", axis=1)
            if len(reasons):
                note = "; ".join(sorted(set(reasons)))
            else:
                ran = sorted(cell[cell.status == "ok"].concurrency.unique())
                note = f"no ok point at concurrency {top}" + (f" (ran at {', '.join(map(str, ran))})" if ran else "")
        rows.append(
            {
                "dcp_size": dcp,
                "draft_attention_backend": backend,
                "draft_kv_cache_dtype": kv,
                "concurrency": top,
                "value": value,
                "best_label": best,
                "n_ok": int((cell.status == "ok").sum()),
                "n_failed": int((cell.status == "failed").sum()),
                "n_skipped": int((cell.status == "skipped").sum()),
                "note": note,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def problems_table(df: pd.DataFrame, sweep_dir: Path | None = None) -> pd.DataFrame:
    """Failed and skipped points with their classified reason; `log_signature`: what the current failure
    signatures find in the engine's server log (may name the root cause when the recorded reason is generic)."""
    bad = df[df.status != "ok"].copy()
    cols = [
        "point_id",
        "engine_id",
        *SERIES_AXES,
        *FACET_AXES,
        "concurrency",
        "status",
        "reason",
        "detail",
        "log_signature",
    ]
    bad["log_signature"] = None
    if sweep_dir is not None and len(bad):
        sigs = {}
        for eng in bad.engine_id.dropna().unique():
            sigs[eng] = _log_signature(SweepStore(sweep_dir).log_path(eng))
        bad["log_signature"] = bad.engine_id.map(sigs)
    return bad[cols].reset_index(drop=True)


def _log_signature(path: Path) -> str | None:
    try:
        from bench.server import classify_log
    except ImportError:  # pragma: no cover - the classifier is part of the package
        return None
    if not path.is_file():
        return None
    found = classify_log(path.read_text(errors="replace"))
    return f"{found[0]}: {found[1]}" if found else None


def effective_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per point that reached a server: what it asked vs what the server logged, and the mismatch flags."""
    cols = [
        "label",
        "point_id",
        "status",
        "draft_attention_backend",
        "draft_attention_backend_ran",
        "target_attention_backend_ran",
        "draft_kv_cache_dtype",
        "kv_cache_dtype_ran",
        "dcp_size",
        "dcp_size_ran",
        "block_size_ran",
        "cudagraph_mode",
        "backends_logged",
        "mismatch",
    ]
    out = df.copy()
    for c in cols:
        if c not in out:
            out[c] = None
    ran = [
        "draft_attention_backend_ran",
        "target_attention_backend_ran",
        "kv_cache_dtype_ran",
        "dcp_size_ran",
        "block_size_ran",
        "cudagraph_mode",
        "backends_logged",
        "mismatch",
    ]
    seen = out[ran].notna().any(axis=1)
    return out.loc[seen, cols].reset_index(drop=True)


def summary_counts(df: pd.DataFrame) -> dict:
    ok = ok_points(df)
    best = None
    if len(ok) and ok.output_throughput.notna().any():
        best = ok.loc[ok.output_throughput.idxmax()]
    return {
        "points": len(df),
        "ok": len(ok),
        "failed": int((df.status == "failed").sum()),
        "skipped": int((df.status == "skipped").sum()),
        "varied": varied_axes(df),
        "best_label": None if best is None else best.label,
        "best_output_throughput": None if best is None else float(best.output_throughput),
    }


def find_profiling_tables(sweep_dir: Path) -> list[Path]:
    """NVTX range tables stored with the sweep: profile/**.parquet and nsys/**/*ranges*.parquet / *summary*."""
    sweep_dir = Path(sweep_dir)
    found = set(sweep_dir.glob("profile/**/*.parquet"))
    found |= set(sweep_dir.glob("nsys/**/*ranges*.parquet")) | set(sweep_dir.glob("nsys/**/*summary*.parquet"))
    return sorted(found)


SUMMARY_KEYS = {"name", "count", "cpu_ns_total", "cpu_ns_mean", "gpu_busy_ns_mean"}
RANGES_KEYS = {"name", "cpu_ns", "gpu_busy_ns", "gpu_sum_ns", "gpu_span_ns", "launches"}


def nvtx_summaries(sweep_dir: Path) -> list[tuple[Path, pd.DataFrame]]:
    """(file, per-range-name summary) per folder of profiling tables: a summary table (nsys_summary / summary)
    is used as is; a folder with only a ranges table is summarized with
    bench.profiling.nsys_analysis.summarize_ranges; other tables (kernels) are ignored. Empty when there are
    none, and the HTML then has no NVTX section."""
    by_dir: dict[Path, dict[str, tuple[Path, pd.DataFrame]]] = {}
    for path in find_profiling_tables(sweep_dir):
        try:
            table = pd.read_parquet(path)
        except (OSError, ValueError):
            continue
        cols = set(table.columns)
        kind = "summary" if cols >= SUMMARY_KEYS else "ranges" if cols >= RANGES_KEYS else None
        if kind:
            by_dir.setdefault(path.parent, {}).setdefault(kind, (path, table))
    out = []
    for folder in sorted(by_dir):
        found = by_dir[folder]
        if "summary" in found:
            out.append(found["summary"])
            continue
        path, ranges = found["ranges"]
        try:
            from bench.profiling.nsys_analysis import summarize_ranges

            defaults = {"domain": "", "api_calls": 0, "kernels": 0}
            ranges = ranges.assign(**{c: v for c, v in defaults.items() if c not in ranges})
            out.append((path, summarize_ranges(ranges)))
        except Exception:
            continue
    return out


@dataclass
class ReportData:
    """Every table the report shows, computed from the results directory alone."""

    sweep_dir: Path
    manifest: dict
    provenance: dict
    points: pd.DataFrame
    counts: dict
    throughput: pd.DataFrame
    latency: pd.DataFrame
    pareto: pd.DataFrame
    acceptance: pd.DataFrame
    heatmap: pd.DataFrame
    problems: pd.DataFrame
    effective: pd.DataFrame
    roofline: pd.DataFrame
    roofline_inputs: pd.DataFrame
    roofline_notes: list[str]
    nvtx: list[tuple[Path, pd.DataFrame]] = field(default_factory=list)


def collect(sweep_dir: Path, points: pd.DataFrame | None = None) -> ReportData:
    from bench.report.roofline import roofline
    from bench.report.tables import points_table, provenance

    sweep_dir = Path(sweep_dir)
    manifest = SweepStore(sweep_dir).manifest()
    df = enrich(points_table(sweep_dir) if points is None else points, point_extras(sweep_dir))
    roof, inputs, notes = roofline(df, manifest)
    return ReportData(
        sweep_dir=sweep_dir,
        manifest=manifest,
        provenance=provenance(sweep_dir),
        points=df,
        counts=summary_counts(df),
        throughput=throughput_series(df),
        latency=latency_table(df),
        pareto=pareto_table(df),
        acceptance=acceptance_table(df),
        heatmap=heatmap_table(df),
        problems=problems_table(df, sweep_dir),
        effective=effective_table(df),
        roofline=roof,
        roofline_inputs=inputs,
        roofline_notes=notes,
        nvtx=nvtx_summaries(sweep_dir),
    )


# =============================================================================================================
# Figures: one function per plot, PNG bytes (None when there is nothing to draw)
# =============================================================================================================

DPI = 100
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def series_styles(df: pd.DataFrame) -> dict[str, dict]:
    """Stable styles per series: color per (draft backend, draft KV dtype), line style per draft KV dtype,
    marker per DCP size, so a series looks the same in every plot."""
    key = lambda r: (str(r.draft_attention_backend), str(r.draft_kv_cache_dtype))  # noqa: E731
    combos = sorted({key(r) for r in df.itertuples()})
    kvs = sorted({c[1] for c in combos})
    dcps = sorted({int(d) for d in df.dcp_size.dropna()})
    palette = (
        [f"C{i}" for i in range(10)]
        if len(combos) <= 10
        else [matplotlib.colormaps["tab20"](i % 20) for i in range(len(combos))]
    )
    out = {}
    for r in df.drop_duplicates("series").itertuples():
        dcp = int(r.dcp_size) if r.dcp_size == r.dcp_size and r.dcp_size is not None else None
        out[r.series] = {
            "color": palette[combos.index(key(r)) % len(palette)],
            "linestyle": LINESTYLES[kvs.index(key(r)[1]) % len(LINESTYLES)],
            "marker": MARKERS[dcps.index(dcp) % len(MARKERS)] if dcp in dcps else "o",
        }
    return out


def shape_x(df: pd.DataFrame) -> tuple[pd.Series, list, list[str], str, bool]:
    """x positions of points on a batch-shape axis: the concurrency itself when input/output lengths are the
    same everywhere (log2 scale when it spans 4x or more), else one category per (concurrency, input, output)
    shape ordered by concurrency. Returns (x per row, ticks, tick labels, axis label, log scale)."""
    keys = list(zip(df.concurrency, df.input_len, df.output_len))
    if len({(i, o) for _, i, o in keys}) <= 1:
        vals = sorted({int(c) for c, _, _ in keys})
        log = len(vals) > 1 and vals[-1] / max(vals[0], 1) >= 4
        return (df.concurrency.astype(float), vals, [str(v) for v in vals], "concurrency (requests in flight)", log)
    order = sorted(set(keys))
    pos = {k: i for i, k in enumerate(order)}
    return (
        pd.Series([float(pos[k]) for k in keys], index=df.index),
        list(range(len(order))),
        [f"{c}\n{i}/{o}" for c, i, o in order],
        "batch shape: concurrency, input/output tokens",
        False,
    )


def _shape_axis(ax, ticks, labels, xlabel, log) -> None:
    if log:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, labels)
    ax.minorticks_off()
    ax.set_xlabel(xlabel)


def _wrap(text: str, width: int = 28) -> str:
    return "\n".join(textwrap.wrap(str(text), width)) or str(text)


def _dcp_rows(df: pd.DataFrame) -> list[tuple[str, object, pd.DataFrame]]:
    """One row of panels per DCP size when DCP varies, else one row: (title prefix, dcp, rows)."""
    dcps = sorted(df.dcp_size.dropna().unique())
    if len(dcps) <= 1:
        return [("", None, df)]
    return [(f"DCP {int(d)}: ", d, df[df.dcp_size == d]) for d in dcps]


def _line_name(series: str, dcp) -> str:
    """The legend name of a series inside a DCP row (the row title already says the DCP)."""
    return series.replace(f" dcp{int(dcp)}", "") if dcp is not None else series


def _shared_legend(fig: Figure, axes, title: str | None = None, ncol: int = 4) -> None:
    seen = {}
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


def plot_throughput(series: pd.DataFrame) -> bytes | None:
    """Output tok/s and per-user output tok/s vs concurrency (vs batch shape when input/output lengths vary);
    one line per (draft backend, draft KV dtype): color = backend x KV dtype, style = KV dtype; one row of
    panels per DCP size when DCP varies."""
    if not len(series):
        return None
    styles = series_styles(series)
    x, ticks, labels, xlabel, log = shape_x(series)
    series = series.assign(_x=x)
    rows = _dcp_rows(series)
    fig = _figure(12, 3.4 * len(rows) + 1.2)
    axes = fig.subplots(len(rows), 2, squeeze=False, sharex=True)
    for (prefix, dcp, grp), row_axes in zip(rows, axes):
        for ax, (metric, ylabel) in zip(
            row_axes,
            (
                ("output_throughput", "output tok/s (all requests)"),
                ("per_user_output_throughput", "output tok/s per user"),
            ),
        ):
            for name, s in grp.groupby("series", sort=True):
                s = s.sort_values("_x")
                ax.plot(s._x, s[metric], label=_line_name(name, dcp), markersize=7, linewidth=1.8, **styles[name])
            _shape_axis(ax, ticks, labels, xlabel, log)
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.set_title(prefix + ylabel.split(" (")[0] + " vs " + xlabel.split(" (")[0].split(":")[0], fontsize=10)
    for ax in np.ravel(axes[:-1]):
        ax.set_xlabel("")
    _shared_legend(
        fig,
        axes,
        "draft backend / draft KV dtype"
        + (" / k" if series.num_speculative_tokens.nunique() > 1 else "")
        + (" / DCP" if len(rows) == 1 and series.dcp_size.nunique() > 1 else ""),
    )
    return _png(fig)


def plot_latency(lat: pd.DataFrame) -> bytes | None:
    """TTFT, TPOT and ITL per point: p99 (light), p90 (medium) and p50 (dark) bars overlaid on one row."""
    if not len(lat) or lat.filter(like="_ms").isna().all().all():
        return None
    n = len(lat)
    fig = _figure(13, 1.7 + 0.42 * n)
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
    return _png(fig)


def plot_pareto(par: pd.DataFrame) -> bytes | None:
    """Output tok/s vs per-user tok/s (both up is better) and vs TPOT p50 (left is better); Pareto-optimal
    points ringed in black and joined by the front; each point (only the optimal ones when there are more than
    24) annotated with its concurrency / batch shape."""
    if not len(par) or par.output_throughput.isna().all():
        return None
    styles = series_styles(par)
    fig = _figure(12, 4.6)
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
            ax.plot(
                front[x],
                front.output_throughput,
                color="k",
                linestyle="--",
                linewidth=1,
                zorder=2,
                label="Pareto front",
            )
            ax.scatter(
                front[x], front.output_throughput, s=170, facecolors="none", edgecolors="k", linewidths=1.5, zorder=4
            )
        order = sorted(par.series.unique())
        offsets = [(11, -13), (11, 6), (-30, 6), (-30, -13)]  # clear of the Pareto ring
        for r in par.itertuples():
            if len(par) > 24 and not getattr(r, flag):
                continue  # many points: name only the optimal ones
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
        ax.set_xlabel(xlabel + ("  (better →)" if flag == "pareto_user" else "  (← better)"))
        ax.set_ylabel("output tok/s (better ↑)")
        ax.grid(alpha=0.3)
        ax.margins(0.12)
    axes[0].set_title("throughput vs per-user speed", fontsize=10)
    axes[1].set_title("throughput vs TPOT p50", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=9)
    return _png(fig)


def plot_acceptance(acc: pd.DataFrame) -> bytes | None:
    """Acceptance rate and mean acceptance length vs concurrency (batch shape) per series, and per-position
    acceptance per point (the asked synthetic rates, when the sweep set them, dashed black); one row of panels
    per DCP size when DCP varies."""
    if not len(acc) or acc[["acceptance_rate", "mean_acceptance_length"]].isna().all().all():
        return None
    styles = series_styles(acc)
    asked = next((v for v in acc.asked_rates if isinstance(v, list)), None) if "asked_rates" in acc else None
    k_max = int(pd.to_numeric(acc.num_speculative_tokens, errors="coerce").max() or 1)
    x, ticks, tick_labels, xlabel, log = shape_x(acc)
    acc = acc.assign(_x=x)
    pos_cols = [c for c in acc.columns if c.startswith("pos") and c[3:].isdigit()]
    rows = _dcp_rows(acc)
    fig = _figure(13, 3.6 * len(rows) + 1.0)
    axes = fig.subplots(len(rows), 3, squeeze=False)
    for (prefix, dcp, grp), row_axes in zip(rows, axes):
        for ax, metric, label, lim, expected in (
            (
                row_axes[0],
                "acceptance_rate",
                "acceptance rate (accepted / drafted)",
                (0, 1.02),
                float(np.mean(asked)) if asked else None,
            ),
            (
                row_axes[1],
                "mean_acceptance_length",
                "mean acceptance length (tokens / step)",
                (1, k_max + 1.05),
                1 + float(np.sum(asked)) if asked else None,
            ),
        ):
            for name, s in grp.groupby("series", sort=True):
                s = s.sort_values("_x")
                ax.plot(s._x, s[metric], label=_line_name(name, dcp), markersize=7, **styles[name])
            if expected is not None:
                ax.axhline(expected, color="k", linestyle=(0, (2, 2)), linewidth=1)
                ax.annotate(
                    f"asked: {expected:.3f}",
                    (0.01, expected),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, -12),
                    textcoords="offset points",
                    fontsize=8,
                )
            _shape_axis(ax, ticks, tick_labels, xlabel, log)
            ax.set_title(prefix + label, fontsize=10)
            ax.grid(alpha=0.3)
            ax.set_ylim(*lim)
        ax = row_axes[2]
        if pos_cols:
            xs = np.arange(1, len(pos_cols) + 1)
            for r in grp.itertuples():
                st = styles[r.series]
                ax.plot(
                    xs,
                    [getattr(r, c) for c in pos_cols],
                    color=st["color"],
                    linestyle=st["linestyle"],
                    marker=st["marker"],
                    alpha=0.6,
                    markersize=5,
                )
            if asked:
                ax.plot(
                    np.arange(1, len(asked) + 1),
                    asked,
                    color="k",
                    linestyle=(0, (2, 2)),
                    linewidth=1.2,
                    label="asked (synthetic rates)",
                )
            ax.set_xticks(xs)
            ax.set_ylim(0, 1.05)
        else:
            ax.text(0.5, 0.5, "no per-position data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("draft position")
        ax.set_title(prefix + "per-position acceptance (one line per point)", fontsize=10)
        ax.grid(alpha=0.3)
    _shared_legend(fig, axes)
    return _png(fig)


def plot_heatmap(heat: pd.DataFrame) -> bytes | None:
    """Draft backend (rows) x draft KV dtype (columns), one panel per DCP size: the best output tok/s at the
    largest concurrency; cells without an ok point grey, with the reason written in."""
    if not len(heat):
        return None
    dcps = sorted(heat.dcp_size.unique())
    backends = sorted(heat.draft_attention_backend.astype(str).unique())
    kvs = sorted(heat.draft_kv_cache_dtype.astype(str).unique())
    w = max(2.6 * len(kvs), 4.0)
    fig = _figure(min(w * len(dcps) + 1.5, 16), 1.4 + 1.25 * len(backends))
    axes = fig.subplots(1, len(dcps), squeeze=False)[0]
    vmax = heat.value.max()
    vmax = vmax if vmax == vmax and vmax > 0 else 1.0
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    im = None
    for ax, dcp in zip(axes, dcps):
        grid = np.full((len(backends), len(kvs)), np.nan)
        notes = {}
        for r in heat[heat.dcp_size == dcp].itertuples():
            i, j = backends.index(str(r.draft_attention_backend)), kvs.index(str(r.draft_kv_cache_dtype))
            grid[i, j] = r.value
            notes[i, j] = r.note
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=vmax, aspect="auto")
        for i in range(len(backends)):
            for j in range(len(kvs)):
                v = grid[i, j]
                if v == v:
                    ax.text(
                        j,
                        i,
                        f"{v:,.0f}\ntok/s",
                        ha="center",
                        va="center",
                        fontsize=10,
                        color="white" if v < 0.6 * vmax else "black",
                        fontweight="bold",
                    )
                else:
                    ax.text(
                        j,
                        i,
                        _wrap(notes.get((i, j)) or "not in sweep", 24),
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="#7a0000",
                    )
        ax.set_xticks(range(len(kvs)), kvs)
        ax.set_yticks(range(len(backends)), backends)
        ax.set_xlabel("draft KV cache dtype")
        ax.set_ylabel("draft attention backend")
        ax.set_title(f"DCP {dcp}: best output tok/s at concurrency {int(heat.concurrency.iloc[0])}", fontsize=10)
    if im is not None:
        fig.colorbar(im, ax=list(axes), label="output tok/s", shrink=0.9)
    return _png(fig)


def plot_roofline(roof: pd.DataFrame) -> bytes | None:
    """Per point, log scale: the bandwidth-bound max decode tok/s (top-k experts; uniform routing) and the
    achieved output tok/s, with the achieved fraction of the top-k bound written next to it."""
    if not len(roof):
        return None
    n = len(roof)
    fig = _figure(12, 1.6 + 0.55 * n)
    ax = fig.subplots()
    y = np.arange(n)[::-1]
    h = 0.26
    ax.barh(y + h, roof.max_output_tok_s, height=h, color="#c44e52", label="max decode tok/s (top-k experts read)")
    ax.barh(
        y,
        roof.max_output_tok_s_uniform,
        height=h,
        color="#dd8452",
        label="max decode tok/s (uniform routing: expected distinct experts)",
    )
    ach = pd.to_numeric(roof.output_throughput, errors="coerce")
    ax.barh(y - h, ach.fillna(0), height=h, color="#4c72b0", label="achieved output tok/s")
    for yi, a, f in zip(y, ach, roof.fraction_of_max):
        if a == a and f is not None and f == f:
            ax.text(a, yi - h, f"  {f:.2%} of max (top-k)", va="center", fontsize=8)
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
    return _png(fig)


def plot_nvtx(summary: pd.DataFrame) -> bytes | None:
    """NVTX range breakdown (CPU time vs GPU busy time per range name): bench.profiling.plot's chart."""
    if not len(summary):
        return None
    import tempfile

    from bench.profiling.plot import plot_range_breakdown

    with tempfile.TemporaryDirectory() as tmp:
        path = plot_range_breakdown(summary, Path(tmp) / "nvtx.png")
        return path.read_bytes()


PLOTS = ("throughput", "latency", "pareto", "acceptance", "heatmap", "roofline")


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
    return out
