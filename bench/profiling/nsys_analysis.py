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

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes, atomic_write_table
from bench.profiling import nsys_readers as rd
from bench.profiling import nsys_sqlite as db
from bench.profiling import step_paths, step_shares
from bench.profiling.nsys_attribution import attribute, kernel_breakdown, scan_calls
from bench.profiling.nsys_readers import range_label
from bench.profiling.plot import ChartInChild

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
    # decode steps by path (step_paths: needs BENCH_NVTX_ATTENTION=1's ranges; else why_none says why)
    paths: step_paths.StepPaths | None = None


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
    ranges, open_ranges = rd.read_nvtx_ranges(export)
    tids = sorted(ranges["global_tid"].unique().tolist())
    pids = sorted({int(rd.global_pid(t)) for t in tids})
    conn = export.reopen()  # the API-call scan runs in another thread, on its own connection
    try:
        with rd.Prefetch(lambda: rd.iter_runtime_calls(export, conn=conn)) as calls:
            acts = rd.read_gpu_activities(export, pids)  # meanwhile: the first chunks are being read
            scan = scan_calls(ranges, calls, acts)
    finally:
        conn.close()
    t1 = time.perf_counter()
    ranges, pairs, acts = attribute(ranges, scan, acts)
    kernels = kernel_breakdown(ranges, pairs, acts)
    summary = summarize_ranges(ranges)
    paths = step_paths.by_path(ranges, acts, pairs)
    t2 = time.perf_counter()
    meta = _meta(export, ranges, pairs, open_ranges)
    meta["step_paths"] = {
        "decode_steps": paths.decode_steps,
        "without_attention": paths.without_attention,
        "why_none": paths.why_none,
    }
    meta["timing_s"] = {"read_s": round(t1 - t0, 3), "attribute_s": round(t2 - t1, 3)}
    warnings = _warnings(export, ranges, open_ranges, pids, scan.last_start)
    return NsysAnalysis(ranges=ranges, kernels=kernels, summary=summary, meta=meta, warnings=warnings, paths=paths)


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


def _warnings(
    export: db.NsysExport, ranges: pd.DataFrame, open_ranges: int, pids: list[int], last: dict[int, int]
) -> list[str]:
    """Things that make the numbers misleading if unnoticed: open ranges, a CUDA trace that stops early,
    ranges with no CUDA calls on their thread (work launched elsewhere), and nsys's own warnings."""
    out = []
    if open_ranges:
        out.append(f"{open_ranges} NVTX range(s) never ended (process exit or capture stop) and are left out")
    if not export.has(db.RUNTIME):
        out.append("the export has no CUDA API trace (CUPTI_ACTIVITY_KIND_RUNTIME): GPU columns are all 0")
    for gp, end in sorted(last.items()):
        late = ranges[(rd.global_pid(ranges["global_tid"]) == gp) & (ranges["start_ns"] > end)]
        if len(late):
            out.append(
                f"pid {rd.pid_of(gp)}: the CUDA trace stops at {end} ns (its last call) but {len(late)} range(s) start "
                f"after it (buffers not flushed before exit?); their GPU columns are 0"
            )
    for (domain, name), grp in ranges.groupby(["domain", "name"], sort=True) if last else ():
        if grp["api_calls"].sum() == 0 and not any(
            int(gp) in last and int(s) <= last[int(gp)]
            for gp, s in zip(rd.global_pid(grp["global_tid"]), grp["start_ns"])
        ):
            label = range_label(domain, name)
            others = sorted(rd.pid_of(g) for g in last if g not in set(rd.global_pid(grp["global_tid"])))
            where = f"; CUDA calls were traced in pid(s) {', '.join(map(str, others))}" if others else ""
            out.append(
                f"range '{label}' (pid {', '.join(map(str, sorted(grp['pid'].unique())))}) has no CUDA "
                f"API calls on its thread: GPU work launched from other threads or processes is not "
                f"attributed{where}; emit the range where the kernels are launched"
            )
    gpids = set(pids) | set(last)
    out += [f"nsys: {w}" for w in rd.read_diagnostics(export, gpids)]
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
            atomic_write_table(paths[f"{name}_parquet"], df)
            atomic_write_table(paths[f"{name}_csv"], df)
        paths["meta_json"] = out_dir / "nsys_meta.json"
        atomic_write_bytes(
            paths["meta_json"], (json.dumps({**result.meta, "warnings": result.warnings}, indent=2) + "\n").encode()
        )
    except OSError as exc:
        raise BenchError(f"cannot write the analysis tables to {out_dir} ({exc})") from exc
    return paths


def analyze(path: str | Path, out_dir: str | Path, *, plot: bool = True, verify: bool = False) -> dict:
    """`python -m bench profile analyze FILE`: analyze an export, write tables (+ the plot), return paths and
    headline figures (JSON-serializable). Without `verify` no PRAGMA quick_check runs over the whole file first
    (a third of a second on a Kimi-rank export): a corrupt page the analysis reads still ends it with the one-line
    error (NsysExport.reading), and one it does not read cannot change its figures."""
    t0 = time.perf_counter()
    # the chart's process starts first, so that matplotlib's import runs beside the read (bench.profiling.plot)
    with ChartInChild(Path(out_dir) / "nsys_range_breakdown.png") if plot else contextlib.nullcontext() as chart:
        result = analyze_file(path, verify=verify)
        if chart is not None:
            chart.send(result.summary)  # it draws while the tables are written
        paths = write_tables(result, out_dir)
        shares = step_shares.shares_of(result.ranges, Path(out_dir))
        if shares.table is not None:
            paths["step_shares_csv"] = Path(out_dir) / "nsys_step_shares.csv"
            atomic_write_table(paths["step_shares_csv"], shares.table)
        by_path = result.paths
        if by_path is not None:
            paths["step_paths_md"] = Path(out_dir) / "nsys_step_paths.md"
            atomic_write_bytes(paths["step_paths_md"], step_paths.paths_markdown(by_path).encode())
            if by_path.steps is not None:
                paths["step_paths_csv"] = Path(out_dir) / "nsys_step_paths.csv"
                atomic_write_table(paths["step_paths_csv"], by_path.steps)
        if chart is not None:
            paths["plot_png"] = chart.wait()
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
            "decode_steps": shares.decode,
            "step_shares": None if shares.table is None else shares.table.round(6).to_dict("records"),
            "step_shares_missing": shares.why_none,
            "step_paths": None
            if by_path is None or by_path.table is None
            else by_path.table.drop(columns="what").round(6).to_dict("records"),
            "step_paths_missing": None if by_path is None else by_path.why_none,
        },
        "warnings": result.warnings,
        "timing_s": {**result.meta.get("timing_s", {}), "total_s": round(time.perf_counter() - t0, 3)},
    }
