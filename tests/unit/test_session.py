from bench.profiling.session import Capture, collect_reports, generated_reports


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
