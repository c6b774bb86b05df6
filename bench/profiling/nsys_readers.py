"""Read the tables of an open, validated Nsight Systems export (`nsys_sqlite.load_export`) into frames.

Every query orders its rows explicitly (SQLite gives no row order otherwise) and reads only the rows of the
threads / processes asked for: real exports hold hundreds of thousands of API calls and millions of strings.
The schema facts these queries rely on are in `nsys_sqlite`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from bench.profiling.nsys_sqlite import (
    GPU_COLUMNS,
    GPU_TABLES,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSH_POP,
    NVTX_START_END,
    RANGE_KINDS,
    RUNTIME,
    TID_MASK,
    NsysExport,
)


def global_pid(global_tid):
    """The globalPid of a globalTid (low 24 tid bits cleared): what GPU tables store for the process."""
    return global_tid - global_tid % (TID_MASK + 1)


def pid_of(global_id):
    """The OS pid inside a globalTid/globalPid. Arithmetic, not bit ops, so pandas Series work too."""
    return global_id // (TID_MASK + 1) % (TID_MASK + 1)


def lookup_strings(export: NsysExport, ids: Iterable[int]) -> dict[int, str]:
    """StringIds values for the given ids only (real exports can hold millions of strings)."""
    wanted = sorted({int(i) for i in ids if i is not None and not pd.isna(i)})
    out: dict[int, str] = {}
    for k in range(0, len(wanted), 500):
        chunk = wanted[k : k + 500]
        marks = ",".join("?" * len(chunk))
        out.update(export.query(f"SELECT id, value FROM StringIds WHERE id IN ({marks}) ORDER BY id", chunk))
    return out


def read_domains(export: NsysExport) -> dict[tuple[int, int], str]:
    """(globalPid, domainId) -> domain name, from the domain-create events of each process."""
    rows = export.query(
        "SELECT e.globalTid, e.domainId, COALESCE(s.value, e.text) FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = ? ORDER BY e.start, e.rowid",
        (NVTX_DOMAIN_CREATE,),
    )
    return {
        (int(global_pid(gtid)), int(dom)): name or ""
        for gtid, dom, name in rows
        if gtid is not None and dom is not None
    }


def read_nvtx_ranges(export: NsysExport) -> tuple[pd.DataFrame, int]:
    """Push/pop and start/end ranges with name, domain, process and thread; and how many were left open.

    A range with no end (the process died inside it, or the capture stopped) cannot be measured and is
    left out; the count is returned so the caller can warn.
    """
    rows = export.query(
        "SELECT e.rowid, e.eventType, e.start, e.end, e.globalTid, e.domainId, COALESCE(s.value, e.text) "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType IN (?, ?) ORDER BY e.start, e.rowid",
        (NVTX_PUSH_POP, NVTX_START_END),
    )
    df = pd.DataFrame(rows, columns=["range_id", "event_type", "start_ns", "end_ns", "global_tid", "domain_id", "name"])
    open_ranges = int(df["end_ns"].isna().sum())
    df = df[df["end_ns"].notna() & df["global_tid"].notna()].reset_index(drop=True)
    for col in ("range_id", "start_ns", "end_ns", "global_tid"):
        df[col] = df[col].astype(np.int64)
    domains = read_domains(export)
    gpids = global_pid(df["global_tid"].to_numpy())
    dom_ids = df["domain_id"].fillna(0).astype(np.int64).to_numpy()
    df["domain"] = [domains.get((int(p), int(d)), "") for p, d in zip(gpids, dom_ids)]
    df["name"] = df["name"].fillna("").astype(str)
    df["kind"] = df["event_type"].map(RANGE_KINDS)
    df["pid"] = pid_of(df["global_tid"]).astype(np.int64)
    df["tid"] = (df["global_tid"] % (TID_MASK + 1)).astype(np.int64)
    df["cpu_ns"] = df["end_ns"] - df["start_ns"]
    cols = ["range_id", "domain", "name", "kind", "pid", "tid", "global_tid", "start_ns", "end_ns", "cpu_ns"]
    return df[cols], open_ranges


def read_runtime_calls(export: NsysExport, global_tids: Sequence[int], t0: int, t1: int) -> pd.DataFrame:
    """CUDA runtime and driver API calls of the given threads that start in [t0, t1], sorted by
    (thread, start, correlationId).

    The order is made with numpy's lexsort on that key (unique per process) instead of SQL ORDER BY: the
    same deterministic order, but SQLite's sort of 275k unindexed rows took 0.35 s of the 0.55 s this read
    cost on the vLLM fixture, numpy's takes 0.02 s.
    """
    cols = ["global_tid", "start_ns", "end_ns", "correlation_id"]
    if not export.has(RUNTIME) or not len(global_tids):
        return pd.DataFrame({c: np.empty(0, np.int64) for c in cols})
    marks = ",".join("?" * len(global_tids))
    rows = export.query(
        f"SELECT globalTid, start, end, correlationId FROM {RUNTIME} WHERE globalTid IN ({marks}) "
        f"AND start >= ? AND start <= ?",
        [int(g) for g in global_tids] + [int(t0), int(t1)],
    )
    arr = np.array(rows, dtype=np.int64).reshape(-1, 4) if rows else np.empty((0, 4), np.int64)
    arr = arr[np.lexsort((arr[:, 3], arr[:, 1], arr[:, 0]))]
    return pd.DataFrame(arr, columns=cols)


def last_runtime_end(export: NsysExport) -> dict[int, int]:
    """globalPid -> end of the last CUDA API call recorded for it: where a process's CUDA trace stops."""
    if not export.has(RUNTIME):
        return {}
    rows = export.query(
        f"SELECT globalTid - (globalTid & {TID_MASK}) AS gp, MAX(end) FROM {RUNTIME} GROUP BY gp ORDER BY gp"
    )
    return {int(g): int(e) for g, e in rows if g is not None}


def read_gpu_activities(export: NsysExport, global_pids: Sequence[int]) -> pd.DataFrame:
    """Kernels, memcpys, memsets and whole-graph executions of the given processes (GPU_COLUMNS).

    name is the kernel short name ('[memcpy Host-to-Device]', '[memset]', '[CUDA graph N]' otherwise),
    full_name the demangled kernel name. Rows with no timestamps (CUPTI writes 0/0) are skipped.
    """
    frames = [
        f
        for t, kind in GPU_TABLES.items()
        if export.has(t)
        for f in [_read_gpu_table(export, t, kind, global_pids)]
        if len(f)
    ]
    if not frames:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c not in ("kind", "name", "full_name") else object) for c in GPU_COLUMNS}
        )
    out = pd.concat(frames, ignore_index=True)[GPU_COLUMNS]
    for col in ("kind", "name", "full_name"):
        out[col] = out[col].astype("category")
    return out


def _read_gpu_table(export: NsysExport, table: str, kind: str, global_pids: Sequence[int]) -> pd.DataFrame:
    have = {r[1] for r in export.query(f"PRAGMA table_info({table})")}
    extra = {
        "kernel": ["shortName", "demangledName"],
        "memcpy": ["bytes", "copyKind"],
        "memset": ["bytes"],
        "graph": ["graphId"] if "graphId" in have else [],
    }[kind]
    dev = [c if c in have else "0" for c in ("deviceId", "streamId")]
    marks = ",".join("?" * len(global_pids))
    rows = export.query(
        f"SELECT globalPid, correlationId, start, end, {', '.join(dev + extra) if extra else ', '.join(dev)} "
        f"FROM {table} WHERE globalPid IN ({marks}) AND NOT (start = 0 AND end = 0) "
        f"ORDER BY globalPid, correlationId, start",
        [int(g) for g in global_pids],
    )
    base = ["global_pid", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id"]
    df = pd.DataFrame(rows, columns=base + extra)
    if df.empty:
        return df
    df["kind"] = kind
    if kind == "kernel":
        names = lookup_strings(export, pd.unique(pd.concat([df["shortName"], df["demangledName"]])))
        df["name"] = df["shortName"].map(names)
        df["full_name"] = df["demangledName"].map(names)
        df["bytes"] = 0
    elif kind == "memcpy":
        labels = _enum_labels(export, "ENUM_CUDA_MEMCPY_OPER")
        df["name"] = [f"[memcpy {labels.get(int(k), k)}]" for k in df["copyKind"]]
        df["full_name"] = df["name"]
    elif kind == "memset":
        df["name"] = df["full_name"] = "[memset]"
    else:
        df["name"] = [f"[CUDA graph {g}]" for g in df["graphId"]] if "graphId" in df else "[CUDA graph]"
        df["full_name"] = df["name"]
        df["bytes"] = 0
    for col in ("global_pid", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id", "bytes"):
        df[col] = df[col].fillna(0).astype(np.int64)
    for col in ("kind", "name", "full_name"):  # few distinct values: categories make joins and takes cheap
        df[col] = df[col].astype("category")
    return df[GPU_COLUMNS]


def _enum_labels(export: NsysExport, table: str) -> dict[int, str]:
    if not export.has(table):
        return {}
    return {int(i): str(label) for i, label in export.query(f"SELECT id, label FROM {table} ORDER BY id")}


def read_diagnostics(export: NsysExport, global_pids: Iterable[int]) -> list[str]:
    """nsys's own warnings (severity 'Warning' or worse) for the given processes, deduplicated, in time
    order: e.g. 'Not all CUDA events might have been collected.' when a process exited before nsys flushed
    its buffers, which silently cuts the end off the GPU trace."""
    if not export.has("DIAGNOSTIC_EVENT"):
        return []
    levels = _enum_labels(export, "ENUM_DIAGNOSTIC_SEVERITY_LEVEL")
    warn_ids = [i for i, label in levels.items() if label.lower() in ("warning", "error", "fatal")] or [2, 3]
    pids = sorted({int(g) for g in global_pids})
    if not pids:
        return []
    rows = export.query(
        f"SELECT globalPid, text FROM DIAGNOSTIC_EVENT WHERE severity IN ({','.join('?' * len(warn_ids))}) "
        f"AND globalPid IN ({','.join('?' * len(pids))}) ORDER BY timestamp, rowid",
        warn_ids + pids,
    )
    seen: dict[str, None] = {}
    for gp, text in rows:
        seen.setdefault(f"pid {pid_of(int(gp))}: {str(text).strip()}", None)
    return list(seen)


def range_label(domain: str, name: str) -> str:
    """'name [domain]', or just the name for the default domain or when the name already carries it."""
    if not domain or str(name).startswith(f"{domain}:"):
        return str(name) or "(unnamed)"
    return f"{name} [{domain}]"
