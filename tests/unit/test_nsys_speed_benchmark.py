"""benchmarks/nsys_analyze_speed.py's cross-check: nsys's CSV and bench's summary keyed alike (DOMAIN:NAME), so
that the per-range comparison compares something. The nsys lines are the head of what
`nsys stats -q --format csv -r nvtx_gpu_proj_sum,nvtx_sum` printed on the H200 host
(reports/examples/nsys-analyze-speed/h200-x4.json, nsys_stdout_head)."""

from __future__ import annotations

import pytest

from tests.helpers.benchmark_module import load_benchmark

speed = load_benchmark("nsys_analyze_speed")

NSYS_CSV = """\
Range,Style,Total Proj Time (ns),Total Range Time (ns),Range Instances,Proj Avg (ns),Proj Med (ns),Proj Min (ns),Proj Max (ns),Proj StdDev (ns),Total GPU Ops,Avg GPU Ops,Avg Range Lvl,Avg Num Child
bench:bench:step,PushPop,49262384608,49688663672,100,492623846.1,18091983.0,8533850,6164015906,1461272587.5,34616,346.2,0.0,1.2
:plain,PushPop,1000,1200,2,500.0,500.0,400,600,1.0,4,2.0,0.0,0.0

Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range
"""


def test_nsys_names_are_domain_colon_name_and_the_default_domain_loses_its_colon():
    got = speed.nsys_proj(NSYS_CSV)
    assert got["bench:bench:step"]["total_proj_ns"] == 49262384608.0
    assert got["plain"]["total_proj_ns"] == 1000.0 and set(got) == {"bench:bench:step", "plain"}


def test_bench_summary_keys_match_nsys_and_carry_the_gpu_span_total(tmp_path):
    summary = tmp_path / "nsys_summary.csv"
    summary.write_text(
        "domain,name,count,ranges_with_gpu,gpu_span_ns_mean\nbench,bench:step,100,100,492623846.08\n,plain,2,2,500\n"
    )
    ours, theirs = speed.bench_proj(summary), speed.nsys_proj(NSYS_CSV)
    assert set(ours) == set(theirs), "keyed alike: the cross-check compares every range"
    assert ours["bench:bench:step"]["total_proj_ns"] == pytest.approx(theirs["bench:bench:step"]["total_proj_ns"])
