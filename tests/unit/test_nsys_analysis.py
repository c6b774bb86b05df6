"""Nsight Systems export analyzer on the two real exports in tests/data/nsys, plus damaged inputs.

Golden numbers were computed independently with raw sqlite3 queries (a correlated SQL join of NVTX_EVENTS ->
CUPTI_ACTIVITY_KIND_RUNTIME (same globalTid, call inside the range) -> CUPTI_ACTIVITY_KIND_KERNEL (same
correlationId and process)), not with the code under test; the queries are in docs/nsys-analysis.md.
"""

from __future__ import annotations

import lzma
import shutil
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.core.errors import BenchError
from bench.profiling import nsys_sqlite
from bench.profiling.nsys_analysis import analyze, analyze_file, range_label, summarize_ranges, write_tables
from bench.profiling.plot import ChartInChild, plot_range_breakdown

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "nsys"
MATMUL = FIXTURES / "h200-nvtx-matmul.sqlite"
VLLM_XZ = FIXTURES / "h200-vllm0.26-eagle3-flashmla-fp8.sqlite.xz"


def test_fixtures_are_in_the_repo():
    """The exports are committed: a clone without them is broken, and every test below would fail anyway
    (no skip hides it); this one says why in one line."""
    missing = [p.name for p in (MATMUL, VLLM_XZ) if not p.is_file()]
    assert not missing, f"nsys fixtures missing from {FIXTURES}: {missing}"


# bench:decode / torch_range, in time order (raw sqlite3: SUM(k.end - k.start) per range; one kernel each)
DECODE_GPU = [2670954, 2669578, 2662186, 2660682, 2662986]
DECODE_CPU = [101439686, 641764, 100355, 54817, 48633]
TORCH_GPU = [32224, 30784, 30944, 30784, 31200]
API_CALLS = [975, 6, 3, 2, 1, 2, 1, 2, 1, 2]  # all 10 ranges in time order: COUNT of runtime rows inside


@pytest.fixture(scope="session")
def vllm_sqlite(tmp_path_factory) -> Path:
    """The 19 MB vLLM export, decompressed once per test session."""
    dest = tmp_path_factory.mktemp("nsys") / "vllm.sqlite"
    with lzma.open(VLLM_XZ) as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    return dest


@pytest.fixture(scope="session")
def vllm(vllm_sqlite):
    return analyze_file(vllm_sqlite)


@pytest.fixture(scope="session")
def matmul():
    return analyze_file(MATMUL)


def writable_copy(tmp_path: Path, name: str = "copy.sqlite") -> Path:
    dest = tmp_path / name
    shutil.copyfile(MATMUL, dest)
    dest.chmod(0o644)
    return dest


# --- the small torch export --------------------------------------------------------------------------------


def test_matmul_ranges_names_domains_and_cpu_times(matmul):
    r = matmul.ranges
    assert len(r) == 10
    decode, torch_r = r[r["name"] == "bench:decode"], r[r["name"] == "torch_range"]
    assert len(decode) == 5 and set(decode["domain"]) == {"bench"}  # registered string via textId
    assert len(torch_r) == 5 and set(torch_r["domain"]) == {""}  # plain text, default domain
    assert decode["cpu_ns"].tolist() == DECODE_CPU
    assert set(r["kind"]) == {"push_pop"} and set(r["pid"]) == {3632} and set(r["tid"]) == {3632}
    assert r["api_calls"].tolist() == API_CALLS


def test_matmul_gpu_time_per_range(matmul):
    r = matmul.ranges
    decode, torch_r = r[r["name"] == "bench:decode"], r[r["name"] == "torch_range"]
    assert decode["gpu_busy_ns"].tolist() == DECODE_GPU
    assert decode["gpu_sum_ns"].tolist() == DECODE_GPU
    assert decode["gpu_span_ns"].tolist() == DECODE_GPU  # one kernel: span = its duration
    assert torch_r["gpu_busy_ns"].tolist() == TORCH_GPU
    assert (r["kernels"] == 1).all() and (r["launches"] == 1).all() and (r["memcpys"] == 0).all()
    first = decode.iloc[0]
    assert (first["gpu_start_ns"], first["gpu_end_ns"]) == (4121396643, 4124067597)
    # GPU work runs long after the 48-100 us CPU ranges returned: the async gap the tables must show
    assert (decode["gpu_end_ns"].astype("int64") > decode["end_ns"]).all()


def test_matmul_kernel_breakdown(matmul):
    k = matmul.kernels
    assert len(k) == 10 and (k["count"] == 1).all() and (k["share"] == 1.0).all()
    decode = k[k["range_name"] == "bench:decode"]
    assert decode["kernel"].str.startswith("sm80_xmma_gemm_f32f32").all()
    assert set(k[k["range_name"] == "torch_range"]["kernel"]) == {"vectorized_elementwise_kernel"}
    assert decode["gpu_sum_ns"].sum() == sum(DECODE_GPU) == 13326386
    # the randn kernel before the first range belongs to no range
    assert "distribution_elementwise_grid_stride_kernel" not in set(k["kernel"])


def test_matmul_summary_and_meta(matmul):
    s = matmul.summary.set_index("name")
    d = s.loc["bench:decode"]
    assert d["count"] == 5 and d["ranges_with_gpu"] == 5 and d["domain"] == "bench"
    assert d["cpu_ns_p50"] == 100355 and d["cpu_ns_min"] == 48633 and d["cpu_ns_max"] == 101439686
    assert d["gpu_busy_ns_mean"] == pytest.approx(2665277.2)
    assert (d["gpu_busy_ns_p50"], d["gpu_busy_ns_min"], d["gpu_busy_ns_max"]) == (2662986, 2660682, 2670954)
    assert d["gpu_busy_ns_p90"] == pytest.approx(np.percentile(DECODE_GPU, 90))
    assert s.loc["torch_range", "gpu_busy_ns_total"] == sum(TORCH_GPU) == 155936
    assert list(s.index) == ["bench:decode", "torch_range"]  # largest total CPU time first
    m = matmul.meta
    assert (m["schema_version"], m["cuda_graph_trace"], m["ranges"], m["range_names"]) == ("3.20.3", "graph", 10, 2)
    assert m["gpu_activities_in_export"] == {"kernel": 11} and m["gpu_activities_in_ranges"] == 10
    assert matmul.warnings == []


# --- the vLLM export ---------------------------------------------------------------------------------------


def test_vllm_ranges_and_per_process_domains(vllm):
    r = vllm.ranges
    assert len(r) == 47
    cccl = r[r["name"] == "cub::DeviceScan::InclusiveScan"]
    measure = r[r["name"] == "bench:measure"]
    # domainId 1 is 'CCCL' in the EngineCore (pid 4713) and 'bench' in the API process (pid 4631)
    assert len(cccl) == 46 and set(cccl["domain"]) == {"CCCL"} and set(cccl["pid"]) == {4713}
    assert len(measure) == 1 and measure.iloc[0]["domain"] == "bench" and measure.iloc[0]["pid"] == 4631
    assert measure.iloc[0]["cpu_ns"] == 873752022
    assert cccl["cpu_ns"].sum() == 1741932


def test_vllm_gpu_attribution(vllm):
    r = vllm.ranges
    cccl = r[r["domain"] == "CCCL"]
    with_gpu = cccl[cccl["kernels"] > 0]
    assert len(with_gpu) == 15 and with_gpu["kernels"].sum() == 30 and (with_gpu["kernels"] == 2).all()
    assert cccl["gpu_sum_ns"].sum() == 30848 and cccl["gpu_busy_ns"].sum() == 30848
    first = cccl.iloc[0]
    assert (first["cpu_ns"], first["api_calls"], first["gpu_busy_ns"], first["gpu_span_ns"]) == (142882, 5, 2080, 54559)
    assert r[r["name"] == "bench:measure"].iloc[0][["api_calls", "kernels", "gpu_busy_ns"]].tolist() == [0, 0, 0]
    k = vllm.kernels
    assert set(k["kernel"]) == {"DeviceScanInitKernel", "DeviceScanKernel"}
    assert (k["gpu_min_ns"].min(), k["gpu_max_ns"].max(), k["count"].sum()) == (672, 1440, 30)
    s = vllm.summary.set_index("name").loc["cub::DeviceScan::InclusiveScan"]
    assert (s["count"], s["ranges_with_gpu"], s["cpu_ns_p50"]) == (46, 15, 33600)


def test_vllm_meta_and_warnings(vllm):
    m = vllm.meta
    assert m["cuda_graph_trace"] == "node" and m["schema_version"] == "3.20.3"
    assert m["gpu_activities_in_export"] == {"kernel": 53957, "memcpy": 253, "memset": 23}
    text = "\n".join(vllm.warnings)
    assert "pid 4713: the CUDA trace stops at 78751738272 ns (its last call) but 31 range(s) start after it" in text
    assert "range 'bench:measure' (pid 4631) has no CUDA API calls" in text and "pid(s) 4713" in text
    assert "nsys: pid 4713: Not all CUDA events might have been collected." in vllm.warnings


def test_xz_is_decompressed_to_a_temp_file_and_cleaned_up(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with nsys_sqlite.load_export(VLLM_XZ) as export:
        assert export.db_path.is_file() and export.db_path.parent.parent == tmp_path
        assert export.query("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0] == 275258
    assert list(tmp_path.iterdir()) == []


def test_xz_detected_by_content_not_name(tmp_path):
    renamed = tmp_path / "renamed.sqlite"
    renamed.write_bytes(lzma.compress(MATMUL.read_bytes()))
    res = analyze_file(renamed)
    assert res.ranges["gpu_busy_ns"].sum() == sum(DECODE_GPU) + sum(TORCH_GPU)


def test_outputs_written(vllm, tmp_path):
    paths = write_tables(vllm, tmp_path / "out")
    back = pd.read_parquet(paths["ranges_parquet"])
    assert len(back) == 47 and back["gpu_busy_ns"].sum() == 30848
    assert len(pd.read_csv(paths["summary_csv"])) == 2
    png = plot_range_breakdown(vllm.summary, tmp_path / "out" / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_entry_point(tmp_path):
    out = analyze(MATMUL, tmp_path)
    assert Path(out["paths"]["plot_png"]).is_file() and Path(out["paths"]["kernels_csv"]).is_file()
    # the chart's child process draws what the in-process chart draws, byte for byte
    summary = pd.read_parquet(out["paths"]["summary_parquet"])
    in_process = plot_range_breakdown(summary, tmp_path / "in-process.png")
    assert Path(out["paths"]["plot_png"]).read_bytes() == in_process.read_bytes()
    top = out["headline"]["top_ranges"][0]
    assert (top["name"], top["count"], top["gpu_busy_ms_mean"]) == ("bench:decode", 5, 2.6653)
    assert out["headline"]["cuda_graph_trace"] == "graph" and out["warnings"] == []


# --- synthetic additions on a copy of the real export (clearly not nsys output) ----------------------------


def test_whole_graph_trace_counts_and_overlap_union(tmp_path):
    """A GRAPH_TRACE row launched inside the 2nd bench:decode range, overlapping its gemm by 1000 ns for
    half its 2000 ns: gpu_sum counts both, gpu_busy the union."""
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        corr, gpid = con.execute(
            "SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = 1560"
        ).fetchone()
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER, end INTEGER, deviceId INTEGER, "
            "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, graphId INTEGER)"
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (?, ?, 0, 7, ?, ?, 42)",
            (4152898946 - 1000, 4152898946 + 1000, corr, gpid),
        )
    res = analyze_file(path)
    second = res.ranges[res.ranges["name"] == "bench:decode"].iloc[1]
    assert (second["graphs"], second["launches"]) == (1, 1)  # same API call launched both
    assert second["gpu_sum_ns"] == 2669578 + 2000
    assert second["gpu_busy_ns"] == 2669578 + 1000
    assert "[CUDA graph 42]" in set(res.kernels["kernel"])


def test_open_ranges_are_left_out_and_reported(tmp_path):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute(
            "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT rowid FROM NVTX_EVENTS "
            "WHERE text = 'torch_range' ORDER BY start LIMIT 1)"
        )
    res = analyze_file(path)
    assert len(res.ranges) == 9
    assert any("1 NVTX range(s) never ended" in w for w in res.warnings)


def test_nvtx_only_export_gives_zero_gpu_columns(tmp_path):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    res = analyze_file(path)
    assert len(res.ranges) == 10 and res.ranges["gpu_busy_ns"].sum() == 0 and res.kernels.empty
    assert any("no CUDA API trace" in w for w in res.warnings)


def test_summary_of_no_ranges_and_empty_plot(tmp_path):
    empty = summarize_ranges(
        pd.DataFrame(
            columns=[
                "domain",
                "name",
                "cpu_ns",
                "gpu_busy_ns",
                "gpu_span_ns",
                "gpu_sum_ns",
                "api_calls",
                "launches",
                "kernels",
            ]
        )
    )
    assert empty.empty and "cpu_ns_p90" in empty.columns
    assert plot_range_breakdown(empty, tmp_path / "e.png").is_file()


def test_range_label():
    assert range_label("bench", "bench:decode") == "bench:decode"
    assert range_label("CCCL", "scan") == "scan [CCCL]"
    assert range_label("", "torch_range") == "torch_range"


# --- refused inputs ----------------------------------------------------------------------------------------


def refused(path, match: str):
    with pytest.raises(BenchError, match=match) as info:
        nsys_sqlite.load_export(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file(tmp_path):
    refused(tmp_path / "nope.sqlite", "no such file")


def test_random_bytes(tmp_path):
    bad = tmp_path / "random.sqlite"
    bad.write_bytes(np.random.default_rng(0).bytes(5000))
    refused(bad, "not an SQLite database")


def test_sqlite_without_nsys_tables(tmp_path):
    plain = tmp_path / "plain.sqlite"
    with sqlite3.connect(plain) as con:
        con.execute("CREATE TABLE t (x)")
    refused(plain, "not an Nsight Systems export")


def test_truncated_copy(tmp_path):
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(MATMUL.read_bytes()[:150000])
    refused(cut, r"truncated SQLite file \(150000 bytes, its header says 311296\)")


def test_corrupt_pages(tmp_path):
    path = writable_copy(tmp_path)
    data = bytearray(path.read_bytes())
    data[20 * 4096 : 25 * 4096] = b"\xff" * (5 * 4096)
    path.write_bytes(bytes(data))
    refused(path, "corrupt SQLite file")


def test_truncated_and_bogus_xz(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cut = tmp_path / "cut.sqlite.xz"
    cut.write_bytes(VLLM_XZ.read_bytes()[:100000])
    refused(cut, "xz stream ends early")
    junk = tmp_path / "junk.sqlite.xz"
    junk.write_bytes(b"\xfd7zXZ\x00" + b"not xz after the magic" * 100)
    refused(junk, "not a valid xz file")
    plain = tmp_path / "plain.sqlite.xz"  # the name says xz, the bytes do not: judged by content
    plain.write_bytes(b"neither" * 100)
    refused(plain, "not an SQLite database")
    assert list((tmp_path / "tmp").iterdir()) == []  # temp copies removed on failure


@pytest.mark.parametrize(
    "table, match",
    [
        ("NVTX_EVENTS", "required table NVTX_EVENTS is missing"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "required table CUPTI_ACTIVITY_KIND_RUNTIME is missing"),
        ("StringIds", "not an Nsight Systems export"),
    ],
)
def test_required_table_dropped(tmp_path, table, match):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute(f"DROP TABLE {table}")
    refused(path, match)


def test_required_column_missing(tmp_path):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN shortName")
    refused(path, "CUPTI_ACTIVITY_KIND_KERNEL lacks column.*shortName")


def test_unknown_schema_version(tmp_path):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE META_DATA_EXPORT SET value = '3.99.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    refused(path, r"schema version 3\.99\.0 is not supported \(supported: 3\.20\.3\)")
    with nsys_sqlite.load_export(path, allow_any_version=True) as export:
        assert export.schema_version == "3.99.0"


def test_no_version_table(tmp_path):
    path = writable_copy(tmp_path)
    with sqlite3.connect(path) as con:
        con.execute("DROP TABLE META_DATA_EXPORT")
    refused(path, "schema version unknown")


def test_runtime_scan_in_small_chunks_gives_the_same_tables(vllm_sqlite, vllm, monkeypatch):
    """The API-call table is streamed in chunks (memory bounded by the GPU work, not the call count): chunk
    boundaries falling inside ranges and between a call and its kernels change nothing."""
    from bench.profiling import nsys_readers

    seen: list[int] = []
    real = nsys_readers.iter_runtime_calls

    def small(export, chunk=nsys_readers.RUNTIME_CHUNK, conn=None):
        for block in real(export, chunk=997, conn=conn):
            seen.append(len(block))
            yield block

    monkeypatch.setattr(nsys_readers, "iter_runtime_calls", small)
    chunked = analyze_file(vllm_sqlite)
    assert len(seen) > 200 and sum(seen) == 275258  # every call of the export, in many chunks
    for name in ("ranges", "kernels", "summary"):
        pd.testing.assert_frame_equal(getattr(chunked, name), getattr(vllm, name))
    assert chunked.warnings == vllm.warnings


def test_corrupt_pages_without_the_upfront_check_end_the_analysis_with_one_line(tmp_path):
    """`profile analyze` skips PRAGMA quick_check unless --verify: the same damaged file still fails, when the
    analysis reads the damaged pages, with the one-line error; with verify it fails before reading."""
    path = writable_copy(tmp_path)
    data = bytearray(path.read_bytes())
    data[20 * 4096 : 25 * 4096] = b"\xff" * (5 * 4096)
    path.write_bytes(bytes(data))
    for verify, match in ((False, "cannot read the export|corrupt SQLite file"), (True, "corrupt SQLite file")):
        with pytest.raises(BenchError, match=match) as info:
            analyze(path, tmp_path / f"out-{verify}", verify=verify)
        assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_analyze_without_the_plot_writes_the_tables_only(tmp_path):
    out = analyze(MATMUL, tmp_path / "a", plot=False)
    assert "plot_png" not in out["paths"] and not (tmp_path / "a" / "nsys_range_breakdown.png").exists()
    assert (tmp_path / "a" / "nsys_summary.csv").exists()


def test_chart_child_failure_is_one_line_naming_its_cause(vllm, tmp_path):
    """A child that cannot write its PNG (here: its folder is a file) ends `wait` with the child's own error."""
    (tmp_path / "blocker").write_text("a file where the folder should be")
    with ChartInChild(tmp_path / "blocker" / "p.png") as chart:
        chart.send(vllm.summary)
        with pytest.raises(BenchError, match="the chart's process failed: cannot write the plot") as info:
            chart.wait()
    assert "\n" not in str(info.value)


def test_chart_child_not_given_its_bars_is_killed_on_exit(tmp_path):
    """The analysis failed before the chart: leaving the block ends the child (no process left waiting on stdin)."""
    with ChartInChild(tmp_path / "p.png") as chart:
        proc = chart.proc
    assert proc is not None and proc.poll() is not None and not (tmp_path / "p.png").exists()
    with pytest.raises(BenchError, match="already"):
        chart.wait()


def test_analysis_failure_leaves_no_chart_process(tmp_path, monkeypatch):
    started = []
    real_init = ChartInChild.__init__

    def spy(self, path_png):
        real_init(self, path_png)
        started.append((self, self.proc))

    monkeypatch.setattr(ChartInChild, "__init__", spy)
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(BenchError):
        analyze(bogus, tmp_path / "out")
    ((chart, proc),) = started
    assert chart.proc is None and proc.returncode is not None  # closed: the child killed and reaped


def test_an_api_call_starting_at_a_ranges_end_is_not_inside_it(tmp_path):
    """nsys projects onto a range the GPU work of the calls that lie inside it (call end <= range end). Range 11 of
    the matmul export ends, in this copy, exactly when its cudaLaunchKernel starts: the launch is not its own."""
    path = writable_copy(tmp_path, "edge.sqlite")
    with sqlite3.connect(path) as con:
        (start,) = con.execute(
            "SELECT MAX(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r, NVTX_EVENTS n "
            "WHERE n.rowid = 11 AND r.globalTid = n.globalTid AND r.start BETWEEN n.start AND n.end"
        ).fetchone()
        con.execute("UPDATE NVTX_EVENTS SET end = ? WHERE rowid = 11", (start,))
    before = analyze_file(MATMUL).ranges
    after = analyze_file(path).ranges
    changed = after[after.end_ns == start]
    assert len(changed) == 1 and changed.iloc[0].launches == 0
    assert before[before.start_ns == changed.iloc[0].start_ns].iloc[0].launches == 1
