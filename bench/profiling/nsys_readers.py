"""Read the tables of an open, validated Nsight Systems export (`nsys_sqlite.load_export`) into frames.

Every query orders its rows explicitly (SQLite gives no row order otherwise) and reads only the rows of the
threads / processes asked for: real exports hold hundreds of thousands of API calls and millions of strings.
The schema facts these queries rely on are in `nsys_sqlite`'s docstring.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

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

T = TypeVar("T")


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


#: One CUDA API call as the runtime scan yields it.
CALL_DTYPE = np.dtype([("global_tid", np.int64), ("start_ns", np.int64), ("correlation_id", np.int64)])
#: Rows per chunk of the runtime scan: 1M calls are 32 MB of numpy, the memory the scan holds at once.
RUNTIME_CHUNK = 1 << 20
#: Rows per window of a GPU table read (8 columns: 256k rows are ~30 MB of text while one window is parsed).
GPU_CHUNK = 1 << 18


def iter_runtime_calls(
    export: NsysExport, chunk: int = RUNTIME_CHUNK, conn: sqlite3.Connection | None = None
) -> Iterator[np.ndarray]:
    """Every CUDA runtime and driver API call of the export, all threads, as CALL_DTYPE arrays of at most `chunk`
    rows in the table's own order: one pass over the largest table of an export (a Kimi-rank capture holds over a
    million calls, a long one tens of millions), never held whole; the consumer keeps what it needs
    (bench.profiling.nsys_attribution.scan_calls). No end column: it costs ~15% of the scan, and a call's start
    alone places it in a range. `conn`: read through this connection (NsysExport.reopen, for another thread)."""
    if not export.has(RUNTIME):
        return
    exprs = ["COALESCE(globalTid, 0)", "start", "COALESCE(correlationId, 0)"]
    for cols in export.int_columns(RUNTIME, exprs, chunk=chunk, conn=conn):
        yield cols.view(CALL_DTYPE).reshape(-1)  # (n, 3) int64 rows are CALL_DTYPE records: no copy


def read_gpu_activities(export: NsysExport, global_pids: Sequence[int]) -> pd.DataFrame:
    """Kernels, memcpys, memsets and whole-graph executions of the given processes (GPU_COLUMNS), ordered by
    (globalPid, correlationId, start), kinds in GPU_TABLES order.

    name is the kernel short name ('[memcpy Host-to-Device]', '[memset]', '[CUDA graph N]' otherwise),
    full_name the demangled kernel name; kind, name and full_name are categoricals. Rows with no timestamps
    (CUPTI writes 0/0) are skipped. Columns are read as text that numpy parses (NsysExport.int_columns: no per-row
    Python objects) and sorted in numpy, which is what makes a 3M-kernel export readable in seconds.
    """
    parts = [
        p
        for t, kind in GPU_TABLES.items()
        if export.has(t)
        for p in [_read_gpu_table(export, t, kind, global_pids)]
        if p is not None
    ]
    if not parts:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64" if c not in ("kind", "name", "full_name") else object) for c in GPU_COLUMNS}
        )
    num = np.concatenate([p.rows for p in parts])
    order = np.lexsort((num["start_ns"], num["correlation_id"], num["global_pid"]))
    num = num[order]
    out = pd.DataFrame({c: num[c] for c in (*_GPU_NUMBERS, "bytes")})
    for col in ("kind", "name", "full_name"):
        labels: list[str] = []
        codes = []
        for p in parts:
            lab, code = p.labels(col)
            codes.append(code + len(labels))
            labels += lab
        out[col] = _categorical(np.concatenate(codes)[order], labels)
    return out[GPU_COLUMNS]


def _categorical(codes: np.ndarray, labels: list[str]) -> pd.Categorical:
    """A categorical of labels[codes] with sorted, unique categories (labels may repeat across tables)."""
    cats = sorted(set(labels))
    where = {c: i for i, c in enumerate(cats)}
    remap = np.array([where[lab] for lab in labels], dtype=np.int64)
    return pd.Categorical.from_codes(remap[codes] if len(codes) else codes, categories=cats)


@dataclass
class _GpuPart:
    """One GPU table's rows: numbers in `rows`, and per label column (kind, name, full_name) the labels and
    each row's code into them."""

    rows: np.ndarray
    kind: str
    names: list[str]
    name_codes: np.ndarray
    full_codes: np.ndarray

    def labels(self, col: str) -> tuple[list[str], np.ndarray]:
        if col == "kind":
            return [self.kind], np.zeros(len(self.rows), np.int64)
        return self.names, self.name_codes if col == "name" else self.full_codes


def _read_gpu_table(export: NsysExport, table: str, kind: str, global_pids: Sequence[int]) -> _GpuPart | None:
    """One GPU table's rows of these processes, or None when it has none."""
    have = {r[1] for r in export.query(f"PRAGMA table_info({table})")}
    extra = {
        "kernel": ["shortName", "demangledName"],
        "memcpy": ["bytes", "copyKind"],
        "memset": ["bytes", "0"],
        "graph": ["graphId" if "graphId" in have else "0", "0"],
    }[kind]
    cols = [c if c in have else "0" for c in ("deviceId", "streamId")] + extra
    marks = ",".join("?" * len(global_pids))
    exprs = [f"COALESCE({c}, 0)" for c in ["globalPid", "correlationId", "start", "end", *cols]]
    where = f"globalPid IN ({marks}) AND NOT (start = 0 AND end = 0)"
    blocks = list(export.int_columns(table, exprs, where, [int(g) for g in global_pids], chunk=GPU_CHUNK))
    raw = np.empty(sum(len(b) for b in blocks), dtype=_GPU_RAW)
    at = 0
    blocks.reverse()
    while blocks:  # each window freed as it is copied: the rows are held about once, not twice
        b = blocks.pop().view(_GPU_RAW).reshape(-1)
        raw[at : at + len(b)] = b
        at += len(b)
    if not len(raw):
        return None
    n = len(raw)
    rows = np.empty(n, dtype=_GPU_ROW)
    for c in _GPU_NUMBERS:
        rows[c] = raw[c]
    rows["bytes"] = raw["a"] if kind in ("memcpy", "memset") else 0
    if kind == "kernel":
        ids, codes = np.unique(np.concatenate([raw["a"], raw["b"]]), return_inverse=True)
        strings = lookup_strings(export, ids.tolist())
        return _GpuPart(rows, kind, [strings.get(int(i), str(i)) for i in ids], codes[:n], codes[n:])
    if kind == "memcpy":
        enum = _enum_labels(export, "ENUM_CUDA_MEMCPY_OPER")
        ids, codes = np.unique(raw["b"], return_inverse=True)
        names = [f"[memcpy {enum.get(int(k), k)}]" for k in ids]
    elif kind == "memset":
        names, codes = ["[memset]"], np.zeros(n, np.int64)
    else:
        ids, codes = np.unique(raw["a"], return_inverse=True)
        names = [f"[CUDA graph {g}]" if "graphId" in have else "[CUDA graph]" for g in ids]
    return _GpuPart(rows, kind, names, codes, codes)


_GPU_NUMBERS = ("global_pid", "correlation_id", "start_ns", "end_ns", "device_id", "stream_id")
_GPU_ROW = np.dtype([(c, np.int64) for c in (*_GPU_NUMBERS, "bytes")])
_GPU_RAW = np.dtype([(c, np.int64) for c in (*_GPU_NUMBERS, "a", "b")])  # a, b: the table's two extra columns


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


class Prefetch(Generic[T]):
    """The items of `make()`, produced by a background thread (started at once) at most `depth` ahead of the
    consumer, so that SQLite's scan, which runs without the GIL, overlaps what the caller does meanwhile (reading
    the GPU tables, then each previous chunk's numpy work). An exception in the producer is raised to the
    consumer at that point of the sequence. Use as a context manager: leaving it stops the producer and waits
    for it, also when the consumer stopped early."""

    _DONE = object()

    def __init__(self, make: Callable[[], Iterator[T]], depth: int = 2) -> None:
        self._items: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._produce, args=(make,), name="bench-nsys-prefetch", daemon=True)
        self._worker.start()

    def _put(self, entry: tuple) -> bool:
        while not self._stop.is_set():
            try:
                self._items.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, make: Callable[[], Iterator[T]]) -> None:
        try:
            for item in make():
                if not self._put((item, None)):
                    return
            self._put((self._DONE, None))
        except BaseException as exc:  # raised to the consumer, in order
            self._put((self._DONE, exc))

    def __iter__(self) -> Iterator[T]:
        while True:
            item, exc = self._items.get()
            if exc is not None:
                raise exc
            if item is self._DONE:
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        self._worker.join()

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
