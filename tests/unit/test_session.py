from bench.profiling.session import Capture, generated_reports


def test_generated_reports_are_read_from_the_server_log(tmp_path):
    rep = tmp_path / "nsys-report-1cb3.nsys-rep"
    rep.write_bytes(b"x")
    # The tail of a real server log under nsys (H200, vLLM 0.26.0), with this test's path.
    log = (f"Generating '{tmp_path}/nsys-report-9cfb.qdstrm'\nGenerated:\n\t{rep}\n"
           "(APIServer pid=1) INFO later line\n")
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
