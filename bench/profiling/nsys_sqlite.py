"""Open, validate and read an Nsight Systems SQLite export (`nsys export --type sqlite`).

Why a module of its own: the export is a loosely specified, lazily created schema (a table exists only if
something was recorded into it), so every reader here checks what exists, orders every query explicitly
(SQLite gives no row order otherwise) and turns SQLite failures into one-line `BenchError`s that name the
file. This module opens and validates; `nsys_readers` reads the tables into frames; nothing here interprets the
data (`nsys_analysis` does).

Schema facts used (checked on real exports of nsys 2025.3, schema 3.20.3):
- NVTX_EVENTS: eventType 59 push/pop range, 60 start/end range, 75 domain create (text = domain name),
  34 mark. The range name is StringIds.value via textId (registered strings) or else the plain text column.
  domainId is only unique within a process: the same id can name different domains in two processes.
- globalTid packs the process: pid = (globalTid >> 24) & 0xFFFFFF, tid = globalTid & 0xFFFFFF, and the
  process id used by GPU tables is globalPid = globalTid with the low 24 bits cleared.
- CUPTI_ACTIVITY_KIND_RUNTIME holds runtime AND driver API calls; its correlationId links to the GPU work
  (KERNEL / MEMCPY / MEMSET, GRAPH_TRACE when CUDA graphs are traced whole). correlationId is unique only
  within a process.
"""

from __future__ import annotations

import contextlib
import lzma
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.core.errors import BenchError

#: Export schema versions (META_DATA_EXPORT.EXPORT_SCHEMA_VERSION) whose layout this reader was checked on.
SUPPORTED_SCHEMA_VERSIONS: tuple[str, ...] = ("3.20.3",)

NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE, NVTX_MARK = 59, 60, 75, 34
RANGE_KINDS = {NVTX_PUSH_POP: "push_pop", NVTX_START_END: "start_end"}

TID_MASK = 0xFFFFFF

RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
#: GPU activity tables and the activity kind each one becomes in the analysis.
GPU_TABLES: dict[str, str] = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "kernel",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "memcpy",
    "CUPTI_ACTIVITY_KIND_MEMSET": "memset",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": "graph",
}

#: Columns the readers select, per table; a table that exists without them is refused up front.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "StringIds": ("id", "value"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "domainId", "globalTid"),
    RUNTIME: ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "shortName",
        "demangledName",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "bytes",
        "copyKind",
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("start", "end", "correlationId", "globalPid"),
}

SQLITE_MAGIC = b"SQLite format 3\x00"
XZ_MAGIC = b"\xfd7zXZ\x00"

#: Columns of the frame `read_gpu_activities` returns (also used for an empty result).
GPU_COLUMNS = [
    "kind",
    "global_pid",
    "correlation_id",
    "start_ns",
    "end_ns",
    "device_id",
    "stream_id",
    "name",
    "full_name",
    "bytes",
]


@dataclass
class NsysExport:
    """An open, validated export. Use as a context manager (or call close()) to drop a decompressed copy.

    path: the file the user named; db_path: the SQLite file actually open (a temp copy for `.xz`).
    capture: META_DATA_CAPTURE as name -> list of values (names repeat, e.g. CAPTURE_EVENT_TYPE).
    """

    path: Path
    db_path: Path
    conn: sqlite3.Connection
    tables: frozenset[str]
    schema_version: str | None
    product_version: str | None
    capture: dict[str, list[str]] = field(default_factory=dict)
    _cleanup: weakref.finalize | None = field(default=None, repr=False)

    def has(self, table: str) -> bool:
        return table in self.tables

    def query(self, sql: str, params: Sequence = ()) -> list[tuple]:
        """Run one query; a SQLite failure here means a damaged file, so say that and name it."""
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BenchError(
                f"{self.path}: cannot read the export ({exc}); the file looks corrupt or truncated"
            ) from exc

    def reopen(self) -> sqlite3.Connection:
        """Another read-only connection to the same file, for a reader in another thread (a connection belongs
        to the thread that made it); the caller closes it."""
        return sqlite3.connect(self.db_path.resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False)

    def int_columns(
        self,
        table: str,
        exprs: Sequence[str],
        where: str = "",
        params: Sequence = (),
        chunk: int = 1 << 20,
        conn: sqlite3.Connection | None = None,
    ) -> Iterator[np.ndarray]:
        """The integer expressions `exprs` over `table`'s rows (optionally `where`), as (n, len(exprs)) int64
        arrays of at most `chunk` rows, a window of rowids at a time, in the table's order.

        SQLite builds each column of a window as one comma-separated string (group_concat) and numpy parses it:
        the per-row Python tuples of a cursor (the bulk of the time on a million-row table) are never made,
        and SQLite's step runs without the GIL. Every expression must be an integer that is never NULL (wrap
        nullable columns in COALESCE); a window whose columns parse to different lengths is an error, not a
        silent shift. `conn`: read through this connection (reopen()) instead of the export's own."""
        conn = conn or self.conn
        cond = f" AND ({where})" if where else ""
        cols = ", ".join(f"group_concat({e})" for e in exprs)
        with self.reading():
            lo, hi = conn.execute(f"SELECT MIN(rowid), MAX(rowid) FROM {table}").fetchone()
            if lo is None:
                return
            for first in range(int(lo), int(hi) + 1, chunk):
                row = conn.execute(
                    f"SELECT COUNT(*), {cols} FROM {table} WHERE rowid >= ? AND rowid < ?{cond}",
                    (first, first + chunk, *params),
                ).fetchone()
                if not row[0]:
                    continue
                block = np.empty((row[0], len(exprs)), np.int64)
                for i, text in enumerate(row[1:]):
                    try:
                        values = np.fromstring(text, dtype=np.int64, sep=",")
                    except ValueError:  # numpy 2: text that does not parse to the end
                        values = np.empty(0, np.int64)
                    if len(values) != row[0]:
                        raise BenchError(
                            f"{self.path}: {table}.{exprs[i]} holds a value that is not an integer "
                            f"(rowids {first}-{first + chunk - 1}); this export layout is not supported"
                        )
                    block[:, i] = values
                yield block

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Turn a SQLite failure while rows are read into the one-line error query() gives."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise BenchError(
                f"{self.path}: cannot read the export ({exc}); the file looks corrupt or truncated"
            ) from exc

    @property
    def cuda_graph_trace(self) -> str | None:
        """How CUDA graphs were traced: 'node' (each kernel of a replay recorded), 'graph' (one GRAPH_TRACE
        row per launch, default), 'mixed' if processes differ, None if the export does not say."""
        modes = sorted(
            {v.lower() for k, vals in self.capture.items() if k.endswith("CUDA_GRAPH_TRACE_OPTIONS:MODE") for v in vals}
        )
        if not modes:
            return None
        return modes[0] if len(modes) == 1 else "mixed"

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            if self._cleanup is not None:
                self._cleanup()

    def __enter__(self) -> NsysExport:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_export(path: str | Path, *, allow_any_version: bool = False, verify: bool = True) -> NsysExport:
    """Open a `.sqlite` or `.sqlite.xz` export read-only and check it is one this code can read.

    Refuses, with a one-line BenchError naming the file: a missing file, a non-SQLite file, a truncated or
    corrupt file (header size check, then PRAGMA quick_check when verify=True, ~5 ms per MB), a SQLite file
    that is no nsys export, an export schema version not in SUPPORTED_SCHEMA_VERSIONS (unless
    allow_any_version), and an export without the tables range attribution needs.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"{path}: no such file")
    tmpdir: Path | None = None
    db_path = path
    if _is_xz(path):  # by content, not by name: a renamed `.sqlite` that is really xz still opens
        tmpdir = Path(tempfile.mkdtemp(prefix="bench-nsys-"))
        db_path = tmpdir / (path.name[:-3] if path.name.endswith(".xz") else path.name)
        try:
            _decompress_xz(path, db_path)
        except BaseException:
            shutil.rmtree(tmpdir, ignore_errors=True)
            raise
    try:
        export = _open_checked(path, db_path, allow_any_version=allow_any_version, verify=verify)
    except BaseException:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    if tmpdir:
        # close() runs this; so does garbage collection or interpreter exit if the caller forgets close().
        export._cleanup = weakref.finalize(export, shutil.rmtree, tmpdir, True)
    return export


def _is_xz(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(6) == XZ_MAGIC
    except OSError as exc:
        raise BenchError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _decompress_xz(src: Path, dest: Path) -> None:
    """Stream-decompress, so a 2 GB export needs no 2 GB of memory; a bad stream becomes a BenchError."""
    try:
        with lzma.open(src) as fin, open(dest, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    except EOFError as exc:
        raise BenchError(f"{src}: the xz stream ends early (truncated download or copy?)") from exc
    except lzma.LZMAError as exc:
        raise BenchError(f"{src}: not a valid xz file ({exc})") from exc
    except OSError as exc:
        raise BenchError(f"{src}: cannot decompress to {dest.parent} ({exc})") from exc


def _open_checked(path: Path, db_path: Path, *, allow_any_version: bool, verify: bool) -> NsysExport:
    _check_sqlite_header(path, db_path)
    try:
        conn = sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise BenchError(f"{path}: cannot open as SQLite ({exc})") from exc
    try:
        export = _inspect(path, db_path, conn, allow_any_version=allow_any_version, verify=verify)
    except BaseException:
        conn.close()
        raise
    return export


def _check_sqlite_header(path: Path, db_path: Path) -> None:
    """Catch the common bad inputs before SQLite does, with a precise message: wrong file type, or a copy
    cut short (the header records the page count; a shorter file is truncated)."""
    try:
        size = db_path.stat().st_size
        with open(db_path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise BenchError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise BenchError(f"{path}: not an SQLite database (expected an `nsys export --type sqlite` file)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages, valid_for = header[24:28], int.from_bytes(header[28:32], "big"), header[92:96]
    if pages and change_counter == valid_for and size < pages * page_size:
        raise BenchError(f"{path}: truncated SQLite file ({size} bytes, its header says {pages * page_size})")


def _inspect(
    path: Path, db_path: Path, conn: sqlite3.Connection, *, allow_any_version: bool, verify: bool
) -> NsysExport:
    def q(sql: str) -> list[tuple]:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BenchError(f"{path}: corrupt SQLite file ({exc})") from exc

    tables = frozenset(r[0] for r in q("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name"))
    if verify:
        problems = [r[0] for r in q("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise BenchError(f"{path}: corrupt SQLite file (quick_check: {problems[0]})")
    if "StringIds" not in tables or not any(t.startswith("TARGET_INFO_") for t in tables):
        raise BenchError(
            f"{path}: SQLite, but not an Nsight Systems export (no StringIds / TARGET_INFO_* "
            f"tables); make one with `nsys export --type sqlite`"
        )
    meta_export = _name_values(q, tables, "META_DATA_EXPORT")
    version = _first(meta_export.get("EXPORT_SCHEMA_VERSION"))
    if not allow_any_version and version not in SUPPORTED_SCHEMA_VERSIONS:
        shown = version if version else "unknown (no META_DATA_EXPORT.EXPORT_SCHEMA_VERSION)"
        raise BenchError(
            f"{path}: export schema version {shown} is not supported (supported: "
            f"{', '.join(SUPPORTED_SCHEMA_VERSIONS)}); export with nsys 2025.3, or check the "
            f"schema and extend SUPPORTED_SCHEMA_VERSIONS"
        )
    _check_required_tables(path, tables)
    for table, cols in REQUIRED_COLUMNS.items():
        if table in tables:
            have = {r[1] for r in q(f"PRAGMA table_info({table})")}
            missing = [c for c in cols if c not in have]
            if missing:
                raise BenchError(
                    f"{path}: table {table} lacks column(s) {', '.join(missing)} "
                    f"(schema {version}); this export layout is not supported"
                )
    return NsysExport(
        path=path,
        db_path=db_path,
        conn=conn,
        tables=tables,
        schema_version=version,
        product_version=_first(meta_export.get("EXPORT_PRODUCT_VERSION")),
        capture=_name_values(q, tables, "META_DATA_CAPTURE"),
    )


def _check_required_tables(path: Path, tables: frozenset[str]) -> None:
    """NVTX_EVENTS is the subject of the analysis; GPU work can only be attributed through the API calls."""
    if "NVTX_EVENTS" not in tables:
        raise BenchError(
            f"{path}: required table NVTX_EVENTS is missing (no NVTX ranges recorded: profile "
            f"with `-t cuda,nvtx` and emit ranges in the process that launches the GPU work)"
        )
    gpu = sorted(t for t in GPU_TABLES if t in tables)
    if gpu and RUNTIME not in tables:
        raise BenchError(
            f"{path}: required table {RUNTIME} is missing although {gpu[0]} exists; "
            f"GPU work cannot be attributed to ranges without it"
        )


def _name_values(q, tables: frozenset[str], table: str) -> dict[str, list[str]]:
    """META_DATA_* tables are name/value rows; names may repeat."""
    if table not in tables:
        return {}
    out: dict[str, list[str]] = {}
    for name, value in q(f"SELECT name, value FROM {table} ORDER BY rowid"):
        out.setdefault(str(name), []).append("" if value is None else str(value))
    return out


def _first(values: list[str] | None) -> str | None:
    return values[0] if values else None
