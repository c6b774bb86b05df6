"""Captures attached to sweep points: nsys command and environment, report collection, and finalize (export +
analysis with a stand-in nsys that yields the real matmul export; the timing mode on real timer files)."""

from pathlib import Path

from bench.profiling.session import Capture, collect_reports, generated_reports
from bench.profiling.timing import TimingRecorder


def test_generated_reports_are_read_from_the_server_log(tmp_path):
    rep = tmp_path / "nsys-report-1cb3.nsys-rep"
    rep.write_bytes(b"x")
    # The tail of a real server log under nsys (H200, vLLM 0.26.0), with this test's path.
    log = f"Generating '{tmp_path}/nsys-report-9cfb.qdstrm'\nGenerated:\n\t{rep}\n(APIServer pid=1) INFO later line\n"
    assert generated_reports(log) == [rep]
    assert generated_reports("Generated:\n\t/nonexistent.nsys-rep\n") == []


def test_nsys_wrapping_and_timing_env(tmp_path):
    cap = Capture(tmp_path, nsys="/x/nsys")
    argv = cap.wrap(["python", "-m", "vllm.entrypoints.openai.api_server"], "e1")
    assert argv[:2] == ["/x/nsys", "profile"] and "--capture-range=cudaProfilerApi" in argv
    assert argv[-2:] == ["--profiler-config", '{"profiler": "cuda"}']
    assert cap.env("e1") == {"BENCH_NVTX": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    timing = Capture(tmp_path)
    assert timing.wrap(["a"], "e1") == ["a"] and timing.env("e1")["BENCH_TIMING"] == "1"


def test_reports_written_to_a_temp_folder_are_moved_into_the_capture_folder(tmp_path):
    tmp = tmp_path / "run" / "tmp"
    tmp.mkdir(parents=True)
    first, second = tmp / "nsys-report-94c2.nsys-rep", tmp / "nsys-report-a532.nsys-rep"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    base = tmp_path / "profile" / "capture-e1"
    assert collect_reports([first], base) == [base.parent / "capture-e1.nsys-rep"]
    assert (base.parent / "capture-e1.nsys-rep").read_bytes() == b"1" and not first.exists()
    # Already in place: left alone. Several: numbered in the order nsys generated them.
    assert collect_reports([base.parent / "capture-e1.nsys-rep"], base) == [base.parent / "capture-e1.nsys-rep"]
    moved = collect_reports([base.parent / "capture-e1.nsys-rep", second], base)
    assert [p.name for p in moved] == ["capture-e1.1.nsys-rep", "capture-e1.2.nsys-rep"]
    assert [p.read_bytes() for p in moved] == [b"1", b"2"]


MATMUL = Path(__file__).resolve().parents[1] / "data" / "nsys" / "h200-nvtx-matmul.sqlite"


def fake_nsys(tmp_path: Path) -> str:
    """Stands in for `nsys export --type sqlite --force-overwrite=true -o OUT REPORT`: OUT becomes the real matmul
    export, so the analysis after it runs on real data."""
    script = tmp_path / "fake-nsys"
    script.write_text(f'#!/bin/sh\n[ "$1" = export ] && [ "$5" = -o ] && cp "{MATMUL}" "$6"\n')
    script.chmod(0o755)
    return str(script)


def test_finalize_exports_and_analyzes_each_report(tmp_path):
    cap = Capture(tmp_path / "profile", nsys=fake_nsys(tmp_path))
    report = cap.report_base("e1").with_suffix(".nsys-rep")
    report.parent.mkdir(parents=True)
    report.write_bytes(b"rep")
    out = cap.finalize("e1")
    assert "error" not in out and cap.outputs == [out]
    (rep,) = out["reports"]
    assert (rep["nsys_rep"], rep["sqlite"]) == ("capture-e1.nsys-rep", "capture-e1.sqlite")
    top = rep["headline"]["top_ranges"][0]
    assert (top["name"], top["count"]) == ("bench:decode", 5) and rep["warnings"] == []
    assert Path(rep["tables"]["summary_csv"]).parent == tmp_path / "profile" / "capture-e1.analysis"


def test_finalize_records_a_missing_report_as_an_error(tmp_path):
    cap = Capture(tmp_path / "profile", nsys=fake_nsys(tmp_path))
    out = cap.finalize("e2", server_log="no Generated: line here")
    assert out["error"].startswith("nsys wrote no report for") and "reports" not in out


def test_finalize_in_timing_mode_summarizes_the_timer_files(tmp_path):
    cap = Capture(tmp_path / "profile")
    timing_dir = Path(cap.env("e1")["BENCH_TIMING_DIR"])
    rec = TimingRecorder(timing_dir)
    for i in range(3):
        rec.add("bench.model.execute", 7, 1000 * i, 1000 * i + 400)
    rec.close()
    out = cap.finalize("e1")
    assert (out["mode"], out["ranges"], out["range_names"]) == ("timing", 3, ["bench.model.execute"])
    assert Path(out["tables"]["summary"]).is_file()
