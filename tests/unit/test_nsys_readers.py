"""The export readers' fast paths: NsysExport.int_columns (columns as text parsed by numpy, a window of rowids at
a time) against a plain cursor, and Prefetch (a reader in another thread) for order, errors and early stops."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bench.core.errors import BenchError
from bench.profiling import nsys_readers as rd
from bench.profiling import nsys_sqlite

MATMUL = Path(__file__).resolve().parents[1] / "data" / "nsys" / "h200-nvtx-matmul.sqlite"


@pytest.fixture
def export(tmp_path):
    path = tmp_path / "copy.sqlite"
    shutil.copyfile(MATMUL, path)
    path.chmod(0o644)
    with sqlite3.connect(path) as con:  # a table of our own: NULLs, big ids, sparse rowids, one text value
        con.execute("CREATE TABLE T (a INTEGER, b INTEGER, c TEXT)")
        con.executemany(
            "INSERT INTO T (rowid, a, b, c) VALUES (?, ?, ?, ?)",
            [
                (i * 7 + 3, None if i % 5 == 0 else 281554047734377 + i, -i, "x" if i == 40 else str(i))
                for i in range(50)
            ],
        )
    with nsys_sqlite.load_export(path) as ex:
        yield ex


@pytest.mark.parametrize("chunk", [1, 8, 1 << 20])
def test_int_columns_equal_a_cursor_in_order_whatever_the_window(export, chunk):
    exprs = ["COALESCE(a, 0)", "b"]
    want = np.array(export.query(f"SELECT {', '.join(exprs)} FROM T ORDER BY rowid"), np.int64)
    got = np.concatenate(list(export.int_columns("T", exprs, chunk=chunk)))
    assert got.dtype == np.int64 and np.array_equal(got, want)
    assert got[0, 0] == 0 and got[1, 0] == 281554047734378, "NULL through COALESCE, 49-bit ids exact"


def test_int_columns_filters_with_parameters_and_refuses_a_non_integer(export):
    got = np.concatenate(list(export.int_columns("T", ["b"], "b < ? AND b > ?", [-10, -20], chunk=16)))
    assert got[:, 0].tolist() == list(range(-11, -20, -1))
    with pytest.raises(BenchError, match=r"T\.c holds a value that is not an integer"):
        list(export.int_columns("T", ["c"]))


def test_the_runtime_scan_is_the_same_through_int_columns_and_a_second_connection(export):
    want = np.array(
        export.query(
            "SELECT COALESCE(globalTid, 0), start, COALESCE(correlationId, 0) FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        ),
        np.int64,
    )
    conn = export.reopen()
    try:
        with rd.Prefetch(lambda: rd.iter_runtime_calls(export, chunk=100, conn=conn)) as calls:
            got = np.concatenate(list(calls))
    finally:
        conn.close()
    assert len(got) == len(want) > 100
    assert np.array_equal(np.stack([got[n] for n in rd.CALL_DTYPE.names], axis=1), want)


def test_prefetch_keeps_order_runs_ahead_and_raises_the_producers_error_in_place():
    started = threading.Event()

    def items():
        started.set()
        yield from range(5)
        raise BenchError("broken at 5")

    with rd.Prefetch(items) as p:
        assert started.wait(5), "the producer starts at once, before the first item is asked for"
        seen = []
        with pytest.raises(BenchError, match="broken at 5"):
            for x in p:
                seen.append(x)
    assert seen == [0, 1, 2, 3, 4]


def test_prefetch_stopped_early_stops_its_producer():
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    t = time.perf_counter()
    with rd.Prefetch(endless, depth=2) as p:
        for x in p:
            if x == 3:
                break
    assert time.perf_counter() - t < 5 and len(produced) <= 3 + 1 + 2 + 1, "bounded by depth, then stopped"
