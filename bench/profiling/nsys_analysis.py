"""Attribute GPU time to NVTX ranges of an Nsight Systems export and summarize it per range name.

Why: the question a profile of speculative decoding must answer is "how much GPU time does each phase
(draft, verify, sampling, ...) cost, and how does that compare with its CPU time?". nsys's GUI answers it
one range at a time; this gives tables.

Attribution rule (the one nsys uses for its "projected" NVTX ranges): a CUDA API call (runtime or driver)
belongs to a range when it starts inside [range start, range end] on the range's own thread; the GPU work
it launched (kernels, memcpys, memsets, whole-graph executions) is joined to it by (process,
correlationId). Nested ranges are inclusive: a parent also owns its children's work. A start/end range is
attributed on the thread that started it. Work launched from another thread or process is not attributed,
which is why ranges must be emitted in the process that launches the kernels (vLLM: the EngineCore / worker,
not the API process).

All times are integer nanoseconds on the export's clock.

Tables (`NsysAnalysis` fields):

ranges, one row per closed NVTX range:
  range_id (NVTX_EVENTS rowid), domain ('' = default domain), name, kind ('push_pop' | 'start_end'), pid, tid,
  global_tid, start_ns, end_ns, cpu_ns (end - start),
  api_calls (CUDA API calls in the range on its thread), launches (of those, calls that produced GPU work),
  kernels, memcpys, memsets, graphs (GPU activity records attributed),
  gpu_sum_ns (sum of their durations; overlapping work counts twice),
  gpu_busy_ns (length of the union of their intervals: wall time with at least one of them running),
  gpu_start_ns / gpu_end_ns (first start / last end of that work; <NA> when none),
  gpu_span_ns (gpu_end - gpu_start; 0 when none).
kernels, one row per (range, activity kind, kernel):
  range_id, domain, range_name, pid, tid, kind, kernel (short name), kernel_full (demangled), count,
  gpu_sum_ns, gpu_mean_ns, gpu_min_ns, gpu_max_ns, share (of the range's gpu_sum_ns).
summary, one row per (domain, name):
  domain, name, count, ranges_with_gpu, cpu_ns_total, gpu_busy_ns_total, gpu_sum_ns_total, and for each of
  cpu_ns, gpu_busy_ns, gpu_span_ns: _mean, _p50, _p90, _min, _max (over all ranges of the name, those without
  GPU work counting 0, so CPU and GPU figures describe the same occurrences; percentiles interpolate
  linearly), plus api_calls_mean, launches_mean, kernels_mean.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError
from bench.profiling import nsys_sqlite as db

RANGE_GPU_COLUMNS = [
    "api_calls",
    "launches",
    "kernels",
    "memcpys",
    "memsets",
    "graphs",
    "gpu_sum_ns",
    "gpu_busy_ns",
    "gpu_start_ns",
    "gpu_end_ns",
    "gpu_span_ns",
]
KERNEL_COLUMNS = [
    "range_id",
    "domain",
    "range_name",
    "pid",
    "tid",
    "kind",
    "kernel",
    "kernel_full",
    "count",
    "gpu_sum_ns",
    "gpu_mean_ns",
    "gpu_min_ns",
    "gpu_max_ns",
    "share",
]
STAT_METRICS = ("cpu_ns", "gpu_busy_ns", "gpu_span_ns")
STATS = ("mean", "p50", "p90", "min", "max")


@dataclass
class NsysAnalysis:
    """The three tables (see the module docstring), facts about the export, and warnings worth showing."""

    ranges: pd.DataFrame
    kernels: pd.DataFrame
    summary: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def analyze_file(path: str | Path, **load_kwargs) -> NsysAnalysis:
    """load_export + analyze_export, closing (and deleting a decompressed copy of) the export afterwards."""
    t0 = time.perf_counter()
    with db.load_export(path, **load_kwargs) as export:
        t1 = time.perf_counter()
        result = analyze_export(export)
    result.meta["timing_s"] = {"open_s": round(t1 - t0, 3), **result.meta.get("timing_s", {})}
    return result


def analyze_export(export: db.NsysExport) -> NsysAnalysis:
    """Read ranges, the API calls of their threads and the GPU work of their processes; attribute; summarize."""
    t0 = time.perf_counter()
    ranges, open_ranges = db.read_nvtx_ranges(export)
    tids = sorted(ranges["global_tid"].unique().tolist())
    pids = sorted({int(db.global_pid(t)) for t in tids})
    if len(ranges):
        calls = db.read_runtime_calls(export, tids, int(ranges["start_ns"].min()), int(ranges["end_ns"].max()))
    else:
        calls = db.read_runtime_calls(export, [], 0, 0)
    acts = db.read_gpu_activities(export, pids)
    t1 = time.perf_counter()
    ranges, pairs, acts = attribute(ranges, calls, acts)
    kernels = kernel_breakdown(ranges, pairs, acts)
    summary = summarize_ranges(ranges)
    t2 = time.perf_counter()
    meta = _meta(export, ranges, pairs, open_ranges)
    meta["timing_s"] = {"read_s": round(t1 - t0, 3), "attribute_s": round(t2 - t1, 3)}
    warnings = _warnings(export, ranges, open_ranges, pids)
    return NsysAnalysis(ranges=ranges, kernels=kernels, summary=summary, meta=meta, warnings=warnings)


# --- attribution -------------------------------------------------------------------------------------------


def attribute(
    ranges: pd.DataFrame, calls: pd.DataFrame, acts: pd.DataFrame
) -> tuple[pd.DataFrame, tuple[np.ndarray, np.ndarray], pd.DataFrame]:
    """Add RANGE_GPU_COLUMNS to ranges.

    Returns (ranges, (range_row, act_row) pairs, acts sorted by launching thread and launch time). Method:
    join GPU work to its API call by (globalPid, correlationId), sort it by (thread, API start); then each
    range owns one contiguous slice of that order, found with searchsorted, and sums/mins/maxes over the
    slices are prefix sums and reduceat. Only the interval union needs a per-range loop (ranges with work).
    """
    acts = _launched_by(acts, calls)
    n = len(ranges)
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    gtids = ranges["global_tid"].to_numpy(np.int64)
    c_lo, c_hi = _windows(
        calls["global_tid"].to_numpy(np.int64), calls["start_ns"].to_numpy(np.int64), gtids, starts, ends
    )
    lo, hi = _windows(acts["api_tid"].to_numpy(np.int64), acts["api_start"].to_numpy(np.int64), gtids, starts, ends)
    a_start, a_end = acts["start_ns"].to_numpy(np.int64), acts["end_ns"].to_numpy(np.int64)
    kind = acts["kind"].to_numpy()
    first_of_call = np.ones(len(acts), bool)
    if len(acts) > 1:
        same = (acts["api_tid"].to_numpy()[1:] == acts["api_tid"].to_numpy()[:-1]) & (
            acts["correlation_id"].to_numpy()[1:] == acts["correlation_id"].to_numpy()[:-1]
        )
        first_of_call[1:] = ~same
    out = ranges.copy()
    out["api_calls"] = c_hi - c_lo
    out["launches"] = _slice_sum(first_of_call.astype(np.int64), lo, hi)
    for col, k in (("kernels", "kernel"), ("memcpys", "memcpy"), ("memsets", "memset"), ("graphs", "graph")):
        out[col] = _slice_sum((kind == k).astype(np.int64), lo, hi)
    out["gpu_sum_ns"] = _slice_sum(a_end - a_start, lo, hi)
    out["gpu_busy_ns"] = _slice_union(a_start, a_end, lo, hi)
    has = hi > lo
    g_start = _slice_reduce(np.minimum, a_start, lo, hi)
    g_end = _slice_reduce(np.maximum, a_end, lo, hi)
    out["gpu_start_ns"] = pd.array(np.where(has, g_start, 0), dtype="Int64")
    out["gpu_end_ns"] = pd.array(np.where(has, g_end, 0), dtype="Int64")
    out.loc[~has, ["gpu_start_ns", "gpu_end_ns"]] = pd.NA
    out["gpu_span_ns"] = np.where(has, g_end - g_start, 0).astype(np.int64)
    lens = hi - lo
    pair_range = np.repeat(np.arange(n), lens)
    pair_act = (
        np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(lo, lens)
        if n
        else np.zeros(0, np.int64)
    )
    return out, (pair_range, pair_act.astype(np.int64)), acts


def _launched_by(acts: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Each GPU activity with the thread (api_tid) and start (api_start) of the API call that launched it,
    joined on (process, correlationId) because correlation ids repeat across processes. Activities whose
    call is not among `calls` (other threads, outside every range, or lost) are dropped here."""
    keys = pd.DataFrame(
        {
            "global_pid": db.global_pid(calls["global_tid"].to_numpy(np.int64)),
            "correlation_id": calls["correlation_id"].to_numpy(np.int64),
            "api_tid": calls["global_tid"].to_numpy(np.int64),
            "api_start": calls["start_ns"].to_numpy(np.int64),
        }
    )
    keys = keys.drop_duplicates(["global_pid", "correlation_id"])
    merged = acts.merge(keys, on=["global_pid", "correlation_id"], how="inner")
    order = np.lexsort(
        (
            merged["start_ns"].to_numpy(),
            merged["correlation_id"].to_numpy(),
            merged["api_start"].to_numpy(),
            merged["api_tid"].to_numpy(),
        )
    )
    return merged.iloc[order].reset_index(drop=True)


def _windows(
    row_tid: np.ndarray, row_t: np.ndarray, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by (tid, t): per window, the slice [lo, hi) of the rows on the window's thread with
    t in [start, end]. One searchsorted per thread, vectorized over that thread's windows."""
    lo = np.zeros(len(tids), np.int64)
    hi = np.zeros(len(tids), np.int64)
    for tid in np.unique(tids):
        sel = np.flatnonzero(tids == tid)
        a0, a1 = np.searchsorted(row_tid, tid, "left"), np.searchsorted(row_tid, tid, "right")
        t = row_t[a0:a1]
        lo[sel] = a0 + np.searchsorted(t, starts[sel], "left")
        hi[sel] = a0 + np.searchsorted(t, ends[sel], "right")
    return lo, hi


def _slice_sum(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    prefix = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return (prefix[hi] - prefix[lo]).astype(np.int64)


def _slice_reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """ufunc.reduce over each values[lo:hi] (possibly overlapping slices); 0 for empty ones."""
    out = np.zeros(len(lo), np.int64)
    ok = hi > lo
    if ok.any():
        idx = np.empty(2 * int(ok.sum()), np.int64)
        idx[0::2], idx[1::2] = lo[ok], hi[ok]
        padded = np.append(values, values[:1])  # hi may equal len(values); reduceat needs a valid index there
        out[ok] = ufunc.reduceat(padded, idx)[0::2]
    return out


def _slice_union(starts: np.ndarray, ends: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of the union of [start, end) intervals in each slice: GPU busy time without double counting
    work that overlaps on several streams or devices."""
    out = np.zeros(len(lo), np.int64)
    cache: dict[tuple[int, int], int] = {}
    for i in np.flatnonzero(hi > lo):
        key = (int(lo[i]), int(hi[i]))
        if key not in cache:
            cache[key] = _union_length(starts[key[0] : key[1]], ends[key[0] : key[1]])
        out[i] = cache[key]
    return out


def _union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    if len(starts) == 1:
        return int(ends[0] - starts[0])
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    seg_end = np.maximum.reduceat(e, heads)
    return int((seg_end - s[heads]).sum())


def kernel_breakdown(ranges: pd.DataFrame, pairs: tuple[np.ndarray, np.ndarray], acts: pd.DataFrame) -> pd.DataFrame:
    """Per range, per (kind, kernel): count and time (KERNEL_COLUMNS), biggest first within each range."""
    r_idx, a_idx = pairs
    if not len(r_idx):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in KERNEL_COLUMNS})
    flat = pd.DataFrame(
        {
            "row": r_idx,
            "kind": acts["kind"].to_numpy()[a_idx],
            "kernel": acts["name"].to_numpy()[a_idx],
            "kernel_full": acts["full_name"].to_numpy()[a_idx],
            "dur": (acts["end_ns"].to_numpy() - acts["start_ns"].to_numpy())[a_idx],
        }
    )
    g = flat.groupby(["row", "kind", "kernel", "kernel_full"], sort=True, dropna=False)["dur"]
    out = g.agg(count="size", gpu_sum_ns="sum", gpu_min_ns="min", gpu_max_ns="max").reset_index()
    out["gpu_mean_ns"] = out["gpu_sum_ns"] / out["count"]
    meta = ranges.iloc[out["row"].to_numpy()]
    for col, src in (
        ("range_id", "range_id"),
        ("domain", "domain"),
        ("range_name", "name"),
        ("pid", "pid"),
        ("tid", "tid"),
    ):
        out[col] = meta[src].to_numpy()
    total = meta["gpu_sum_ns"].to_numpy().astype(float)
    out["share"] = np.divide(out["gpu_sum_ns"].to_numpy(), total, out=np.zeros(len(out)), where=total > 0)
    out = out.sort_values(["row", "gpu_sum_ns", "kernel"], ascending=[True, False, True], kind="stable")
    return out[KERNEL_COLUMNS].reset_index(drop=True)


def summarize_ranges(ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per (domain, name): count and distribution of CPU time, GPU busy time and GPU span."""
    rows = []
    for (domain, name), grp in ranges.groupby(["domain", "name"], sort=True, dropna=False):
        row = {
            "domain": domain,
            "name": name,
            "count": len(grp),
            "ranges_with_gpu": int((grp["launches"] > 0).sum()) if "launches" in grp else 0,
            "cpu_ns_total": int(grp["cpu_ns"].sum()),
            "gpu_busy_ns_total": int(grp["gpu_busy_ns"].sum()),
            "gpu_sum_ns_total": int(grp["gpu_sum_ns"].sum()),
        }
        for metric in STAT_METRICS:
            v = grp[metric].to_numpy(dtype=float)
            row.update(
                {
                    f"{metric}_mean": v.mean(),
                    f"{metric}_p50": float(np.percentile(v, 50)),
                    f"{metric}_p90": float(np.percentile(v, 90)),
                    f"{metric}_min": v.min(),
                    f"{metric}_max": v.max(),
                }
            )
        for metric in ("api_calls", "launches", "kernels"):
            row[f"{metric}_mean"] = float(grp[metric].mean())
        rows.append(row)
    cols = (
        ["domain", "name", "count", "ranges_with_gpu", "cpu_ns_total", "gpu_busy_ns_total", "gpu_sum_ns_total"]
        + [f"{m}_{s}" for m in STAT_METRICS for s in STATS]
        + ["api_calls_mean", "launches_mean", "kernels_mean"]
    )
    out = pd.DataFrame(rows, columns=cols)
    return out.sort_values(
        ["cpu_ns_total", "domain", "name"], ascending=[False, True, True], kind="stable"
    ).reset_index(drop=True)


def range_label(domain: str, name: str) -> str:
    """'name [domain]', or just the name for the default domain or when the name already carries it."""
    if not domain or str(name).startswith(f"{domain}:"):
        return str(name) or "(unnamed)"
    return f"{name} [{domain}]"


# --- facts and warnings ------------------------------------------------------------------------------------


def _meta(export: db.NsysExport, ranges: pd.DataFrame, pairs: tuple[np.ndarray, np.ndarray], open_ranges: int) -> dict:
    return {
        "path": str(export.path),
        "schema_version": export.schema_version,
        "product_version": export.product_version,
        "cuda_graph_trace": export.cuda_graph_trace,
        "ranges": len(ranges),
        "open_ranges": open_ranges,
        "range_names": int(ranges[["domain", "name"]].drop_duplicates().shape[0]),
        "range_pids": sorted(int(p) for p in ranges["pid"].unique()),
        "gpu_activities_in_ranges": len(np.unique(pairs[1])),
        "gpu_activities_in_export": {
            kind: _count(export, table) for table, kind in db.GPU_TABLES.items() if export.has(table)
        },
    }


def _count(export: db.NsysExport, table: str) -> int:
    return int(export.query(f"SELECT COUNT(*) FROM {table}")[0][0])


def _warnings(export: db.NsysExport, ranges: pd.DataFrame, open_ranges: int, pids: list[int]) -> list[str]:
    """Things that make the numbers misleading if unnoticed: open ranges, a CUDA trace that stops early,
    ranges with no CUDA calls on their thread (work launched elsewhere), and nsys's own warnings."""
    out = []
    if open_ranges:
        out.append(f"{open_ranges} NVTX range(s) never ended (process exit or capture stop) and are left out")
    if not export.has(db.RUNTIME):
        out.append("the export has no CUDA API trace (CUPTI_ACTIVITY_KIND_RUNTIME): GPU columns are all 0")
    last = db.last_runtime_end(export)
    for gp, end in sorted(last.items()):
        late = ranges[(db.global_pid(ranges["global_tid"]) == gp) & (ranges["start_ns"] > end)]
        if len(late):
            out.append(
                f"pid {db.pid_of(gp)}: the CUDA trace stops at {end} ns but {len(late)} range(s) start "
                f"after it (buffers not flushed before exit?); their GPU columns are 0"
            )
    for (domain, name), grp in ranges.groupby(["domain", "name"], sort=True) if last else ():
        if grp["api_calls"].sum() == 0 and not any(
            int(gp) in last and int(s) <= last[int(gp)]
            for gp, s in zip(db.global_pid(grp["global_tid"]), grp["start_ns"])
        ):
            label = range_label(domain, name)
            others = sorted(db.pid_of(g) for g in last if g not in set(db.global_pid(grp["global_tid"])))
            where = f"; CUDA calls were traced in pid(s) {', '.join(map(str, others))}" if others else ""
            out.append(
                f"range '{label}' (pid {', '.join(map(str, sorted(grp['pid'].unique())))}) has no CUDA "
                f"API calls on its thread: GPU work launched from other threads or processes is not "
                f"attributed{where}; emit the range where the kernels are launched"
            )
    gpids = set(pids) | set(last)
    out += [f"nsys: {w}" for w in db.read_diagnostics(export, gpids)]
    return out


# --- output ------------------------------------------------------------------------------------------------


def write_tables(result: NsysAnalysis, out_dir: str | Path) -> dict[str, Path]:
    """Write ranges/kernels/summary as Parquet and CSV, and meta + warnings as JSON; return the paths."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for name in ("ranges", "kernels", "summary"):
            df = getattr(result, name)
            paths[f"{name}_parquet"] = out_dir / f"nsys_{name}.parquet"
            paths[f"{name}_csv"] = out_dir / f"nsys_{name}.csv"
            df.to_parquet(paths[f"{name}_parquet"], index=False)
            df.to_csv(paths[f"{name}_csv"], index=False)
        paths["meta_json"] = out_dir / "nsys_meta.json"
        paths["meta_json"].write_text(json.dumps({**result.meta, "warnings": result.warnings}, indent=2) + "\n")
    except OSError as exc:
        raise BenchError(f"cannot write the analysis tables to {out_dir} ({exc})") from exc
    return paths


def analyze(path: str | Path, out_dir: str | Path) -> dict:
    """`python -m bench profile analyze FILE`: analyze an export, write tables + plot, return paths and
    headline figures (JSON-serializable)."""
    from bench.profiling.plot import plot_range_breakdown

    t0 = time.perf_counter()
    result = analyze_file(path)
    paths = write_tables(result, out_dir)
    paths["plot_png"] = plot_range_breakdown(result.summary, Path(out_dir) / "nsys_range_breakdown.png")
    s = result.summary
    top = [
        {
            "domain": r.domain,
            "name": r.name,
            "count": int(r.count),
            "cpu_ms_mean": round(r.cpu_ns_mean / 1e6, 4),
            "gpu_busy_ms_mean": round(r.gpu_busy_ns_mean / 1e6, 4),
            "kernels_mean": round(r.kernels_mean, 2),
        }
        for r in s.head(10).itertuples()
    ]
    return {
        "paths": {k: str(v) for k, v in paths.items()},
        "headline": {
            "ranges": result.meta["ranges"],
            "range_names": result.meta["range_names"],
            "schema_version": result.meta["schema_version"],
            "cuda_graph_trace": result.meta["cuda_graph_trace"],
            "top_ranges": top,
        },
        "warnings": result.warnings,
        "timing_s": {**result.meta.get("timing_s", {}), "total_s": round(time.perf_counter() - t0, 3)},
    }
