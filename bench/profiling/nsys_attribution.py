"""Attribute the GPU work of an Nsight Systems export to its NVTX ranges (the rule: `nsys_analysis` docstring).

Kept apart from the analysis because it is the one numerically dense part: vectorized with numpy so that an
export with 275k API calls, 54k kernels and thousands of ranges attributes in well under a second
(docs/nsys-analysis.md "Performance"). Inputs are the frames `nsys_readers` returns; outputs are plain frames.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.profiling.nsys_readers import global_pid

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


@dataclass
class CallScan:
    """What attribution needs from the CUDA API calls, gathered in one streamed pass (scan_calls).

    calls: the calls on the ranges' threads that launched GPU work of `acts` (global_tid, start_ns,
    correlation_id), sorted by (thread, start, correlationId); api_calls: per range row, how many calls of its
    thread start inside it; last_start: globalPid -> start of its last call (where the process's CUDA trace stops).
    """

    calls: pd.DataFrame
    api_calls: np.ndarray
    last_start: dict[int, int]


def scan_calls(ranges: pd.DataFrame, chunks: Iterable[np.ndarray], acts: pd.DataFrame) -> CallScan:
    """Consume the runtime scan (nsys_readers.iter_runtime_calls) chunk by chunk, keeping only the calls that
    launched GPU work on a range's thread: memory follows the GPU activity count, not the API call count."""
    gtids = ranges["global_tid"].to_numpy(np.int64)
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    range_tids = np.unique(gtids)
    procs = np.unique(acts["global_pid"].to_numpy(np.int64))
    gpu_keys = np.unique(_keys(procs, acts["global_pid"].to_numpy(np.int64), acts["correlation_id"].to_numpy(np.int64)))
    counts = np.zeros(len(ranges), np.int64)
    kept: list[np.ndarray] = []
    last: dict[int, int] = {}
    for chunk in chunks:
        by_proc = pd.Series(chunk["start_ns"]).groupby(global_pid(chunk["global_tid"])).max()
        for gp, t in by_proc.items():
            last[int(gp)] = max(last.get(int(gp), int(t)), int(t))
        mine = chunk[np.isin(chunk["global_tid"], range_tids)]
        if not len(mine):
            continue
        mine = mine[np.lexsort((mine["correlation_id"], mine["start_ns"], mine["global_tid"]))]
        lo, hi = _windows(mine["global_tid"], mine["start_ns"], gtids, starts, ends)
        counts += hi - lo
        keys = _keys(procs, global_pid(mine["global_tid"]), mine["correlation_id"])
        kept.append(mine[_member(keys, gpu_keys)])
    cols = ["global_tid", "start_ns", "correlation_id"]
    calls = np.concatenate(kept) if kept else np.empty(0, np.dtype([(c, np.int64) for c in cols]))
    calls = calls[np.lexsort((calls["correlation_id"], calls["start_ns"], calls["global_tid"]))]
    return CallScan(pd.DataFrame({c: calls[c] for c in cols}), counts, last)


def _keys(procs: np.ndarray, gpids: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 per (process, correlationId): the process's index among `procs` above 40 bits of id (CUPTI
    ids are 32-bit); -1 for a process not in `procs`."""
    idx = np.searchsorted(procs, gpids)
    ok = idx < len(procs)
    ok[ok] = procs[idx[ok]] == gpids[ok]
    return np.where(ok, (idx << 40) + corr, -1)


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if not len(sorted_keys):
        return np.zeros(len(keys), bool)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return (sorted_keys[pos] == keys) & (keys >= 0)


def attribute(
    ranges: pd.DataFrame, scan: CallScan, acts: pd.DataFrame
) -> tuple[pd.DataFrame, tuple[np.ndarray, np.ndarray], pd.DataFrame]:
    """Add RANGE_GPU_COLUMNS to ranges.

    Returns (ranges, (range_row, act_row) pairs, acts sorted by launching thread and launch time). Method:
    join GPU work to its API call by (globalPid, correlationId), sort it by (thread, API start); then each
    range owns one contiguous slice of that order, found with searchsorted, and sums/mins/maxes over the
    slices are prefix sums and reduceat. Only the interval union needs a per-range loop (ranges with work).
    """
    acts = _launched_by(acts, scan.calls)
    n = len(ranges)
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    gtids = ranges["global_tid"].to_numpy(np.int64)
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
    out["api_calls"] = scan.api_calls
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
    joined on (process, correlationId) because correlation ids repeat across processes (the first call of a
    key in `calls` order wins). Activities whose call is not among `calls` (other threads, outside every
    range, or lost) are dropped here."""
    procs = np.unique(acts["global_pid"].to_numpy(np.int64))
    tid = calls["global_tid"].to_numpy(np.int64)
    ck = _keys(procs, global_pid(tid), calls["correlation_id"].to_numpy(np.int64))
    by_key = np.argsort(ck, kind="stable")
    sk = ck[by_key]
    first = np.ones(len(sk), bool)
    first[1:] = sk[1:] != sk[:-1]
    uk, urow = sk[first], by_key[first]
    ak = _keys(procs, acts["global_pid"].to_numpy(np.int64), acts["correlation_id"].to_numpy(np.int64))
    ok = _member(ak, uk)
    row = urow[np.searchsorted(uk, ak[ok])] if len(uk) else np.zeros(0, np.int64)
    merged = acts[ok].reset_index(drop=True)
    merged["api_tid"] = tid[row]
    merged["api_start"] = calls["start_ns"].to_numpy(np.int64)[row]
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
    t in [start, end): an API call belongs to a range it lies inside, as nsys's projection counts it (call start >=
    range start and call end <= range end); on the range's own thread a call that starts before the range ends also
    ends before it, and one starting exactly at its end does not lie inside. One searchsorted per thread,
    vectorized over that thread's windows."""
    lo = np.zeros(len(tids), np.int64)
    hi = np.zeros(len(tids), np.int64)
    for tid in np.unique(tids):
        sel = np.flatnonzero(tids == tid)
        a0, a1 = np.searchsorted(row_tid, tid, "left"), np.searchsorted(row_tid, tid, "right")
        t = row_t[a0:a1]
        lo[sel] = a0 + np.searchsorted(t, starts[sel], "left")
        hi[sel] = a0 + np.searchsorted(t, ends[sel], "left")
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
    # grouped on the categoricals' integer codes (categories are sorted, so code order is name order), the
    # names put back afterwards: strings per (range, activity) pair cost more than the rest of the analysis
    labels = {
        c: pd.Categorical(acts[src]) for c, src in (("kind", "kind"), ("kernel", "name"), ("kernel_full", "full_name"))
    }
    flat = pd.DataFrame(
        {
            "row": r_idx,
            **{c: np.asarray(cat.codes, np.int64)[a_idx] for c, cat in labels.items()},
            "dur": (acts["end_ns"].to_numpy() - acts["start_ns"].to_numpy())[a_idx],
        }
    )
    g = flat.groupby(["row", "kind", "kernel", "kernel_full"], sort=True)["dur"]
    out = g.agg(count="size", gpu_sum_ns="sum", gpu_min_ns="min", gpu_max_ns="max").reset_index()
    for c, cat in labels.items():
        out[c] = np.asarray(cat.categories, dtype=object)[out[c].to_numpy()]
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
