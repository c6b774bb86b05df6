"""Benchmark: `python -m bench profile analyze` against `nsys stats -r nvtx_gpu_proj_sum,nvtx_sum` on the same
export and the same cores: wall time, peak memory, and whether the two agree per range.

The export is a real one scaled up, so that the rows are what nsys writes and the size is what a Kimi-rank capture
has: the committed vLLM 0.26.0 EAGLE3 capture (tests/data/nsys, 19 MB: 275k CUDA API calls, 54k kernels) copied
`--copies` times into one SQLite file, each copy shifted in time past the previous one and its correlation ids
past the previous copy's, plus `--windows` plugin-style NVTX ranges per copy on the launching thread (each with a
nested child covering its first half), under a 'bench' domain. 4 copies and 150 windows give 65 MB, 1.1M API
calls, ~216k kernels and ~1,400 ranges: the size of the Kimi-rank FLASHMLA capture (68 MB, 232,700 kernels,
1,236 ranges: reports/examples/kimi-rank-h200/nsys/flashmla-fp8/.../nsys_meta.json). 55 copies give an 884 MB
export (15.1M calls, 2.97M kernels) for the memory bound.

    python benchmarks/nsys_analyze_speed.py [--copies 4] [--windows 150] [--repeat 3] [--nsys PATH]
        [--taskset 0,1] [--keep DIR] [--out FILE.json]

bench runs as a user runs it (tables and the range-breakdown PNG) and with `--no-plot` (tables only, as nsys
stats gives). Each tool runs `--repeat` times in a fresh process (imports included, as a user runs it), alternating, pinned to
`--taskset` cores when given; peak RSS is the child's ru_maxrss. Without nsys (this is a CPU machine, or nsys not
found) only bench's side is measured and the JSON says so. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import lzma
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/data/nsys/h200-vllm0.26-eagle3-flashmla-fp8.sqlite.xz"
SHIFTED = {  # table -> columns moved per copy: times by the period, correlation ids by the id stride
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "correlationId"),
}
RANGE_NAMES = ("draft.propose", "draft.build_metadata", "verify.forward", "sample", "draft.forward", "step")
NSYS_KNOWN = (
    "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys",
    "/opt/nvidia/nsight-systems/bin/nsys",
)


def make_export(out: Path, copies: int, windows: int) -> dict:
    """Write the scaled export (see the module docstring); return its row counts."""
    with lzma.open(FIXTURE) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(out)
    (t_min, t_max) = con.execute("SELECT MIN(start), MAX(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    (nv_max,) = con.execute("SELECT MAX(COALESCE(end, start)) FROM NVTX_EVENTS").fetchone()
    period = max(nv_max, t_max) - min(t_min, 0) + 1_000_000_000
    (c_max,) = con.execute("SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    stride = int(c_max) + 1
    # the launching thread: the one with the most API calls; its process holds the kernels
    (tid,) = con.execute(
        "SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid ORDER BY COUNT(*) DESC LIMIT 1"
    ).fetchone()
    starts = [
        r[0] for r in con.execute(f"SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid={tid} ORDER BY start")
    ]
    (dom,) = con.execute("SELECT COALESCE(MAX(domainId), 0) + 1 FROM NVTX_EVENTS").fetchone()
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId, text) VALUES (?, 75, ?, ?, 'bench')",
        (int(starts[0]) - 1, tid, dom),
    )
    step = max(1, len(starts) // windows)
    rows = []
    for w in range(windows):
        a, b = starts[w * step], starts[min(len(starts) - 1, (w + 1) * step - 1)]
        name = f"bench:{RANGE_NAMES[w % len(RANGE_NAMES)]}"
        rows.append((a, b + 1, name))
        rows.append((a, a + (b - a) // 2, f"{name}.inner"))
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, domainId, text) VALUES (?, ?, 59, ?, ?, ?)",
        [(a, b, tid, dom, name) for a, b, name in rows],
    )
    base_ranges = "eventType IN (59, 60)"
    con.execute("CREATE TEMP TABLE nv AS SELECT * FROM NVTX_EVENTS WHERE " + base_ranges)
    for table in SHIFTED:
        con.execute(f"CREATE TEMP TABLE base_{table} AS SELECT * FROM {table}")
    for k in range(1, copies):
        for table, moved in SHIFTED.items():
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            sel = ", ".join(
                f"{c} + {k * period}" if c in ("start", "end") else f"{c} + {k * stride}" if c in moved else c
                for c in cols
            )
            con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {sel} FROM temp.base_{table}")
        cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        sel = ", ".join(f"{c} + {k * period}" if c in ("start", "end") else c for c in cols)
        con.execute(f"INSERT INTO NVTX_EVENTS ({', '.join(cols)}) SELECT {sel} FROM temp.nv")
    con.commit()
    counts = {
        t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")
    }
    con.execute("DROP TABLE temp.nv")
    con.close()
    con = sqlite3.connect(out)
    con.execute("VACUUM")
    con.close()
    return {"bytes": out.stat().st_size, "copies": copies, "windows_per_copy": windows, "rows": counts}


def timed(cmd: list[str], taskset: str | None, cwd: Path) -> dict:
    """Wall seconds and peak RSS (MiB) of one fresh process; its output kept for the cross-check."""
    if taskset:
        cmd = ["taskset", "-c", taskset, *cmd]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (taskset execs in place)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    rss = usage.ru_maxrss / 1024
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {stderr[-2000:]}")
    return {"wall_s": round(wall, 3), "max_rss_mib": round(rss, 1), "stdout": stdout}


def find_nsys(given: str | None) -> str | None:
    for cand in ([given] if given else []) + [shutil.which("nsys") or "", *NSYS_KNOWN]:
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def nsys_proj(stdout: str) -> dict[str, dict]:
    """Per range name from `nsys stats --format csv -r nvtx_gpu_proj_sum`: instances and total projected ns."""
    out: dict[str, dict] = {}
    for block in stdout.split("\n\n"):
        lines = [ln for ln in block.splitlines() if ln.strip()]
        head = next((i for i, ln in enumerate(lines) if ln.startswith('"Range"') or ln.startswith("Range,")), None)
        if head is None:
            continue
        for row in csv.DictReader(io.StringIO("\n".join(lines[head:]))):
            total = next((v for k, v in row.items() if k and k.startswith("Total Proj Time")), None)
            inst = next((v for k, v in row.items() if k and k.startswith("Proj Instances")), None)
            if total is not None:
                out[row["Range"].lstrip(":")] = {"total_proj_ns": float(total), "proj_instances": inst}
        if out:
            break
    return out


def bench_proj(summary_csv: Path) -> dict[str, dict]:
    """The same figures from bench's summary: ranges with GPU work and the sum of their GPU spans, keyed as nsys
    names a range: DOMAIN:NAME, or NAME in the default domain."""
    import pandas as pd

    s = pd.read_csv(summary_csv, keep_default_na=False)
    return {
        (f"{r['domain']}:{r['name']}" if r["domain"] else str(r["name"])): {
            "total_proj_ns": float(r["gpu_span_ns_mean"] * r["count"]),
            "proj_instances": int(r["ranges_with_gpu"]),
        }
        for _, r in s.iterrows()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--windows", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nsys", default=None)
    ap.add_argument("--taskset", default=None, help="cores for both tools, e.g. 0,1")
    ap.add_argument("--keep", type=Path, default=None, help="folder for the export and outputs (default: temp)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="nsys-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    export = work / f"scaled-x{args.copies}.sqlite"
    t0 = time.perf_counter()
    facts = make_export(export, args.copies, args.windows)
    facts["make_s"] = round(time.perf_counter() - t0, 1)
    print(f"export: {facts}", file=sys.stderr)
    nsys = find_nsys(args.nsys)
    runs: dict[str, list[dict]] = {"bench": [], "bench_no_plot": [], "nsys": []}
    analysis = work / "analysis"
    for i in range(args.repeat):
        for side, extra in (("bench", []), ("bench_no_plot", ["--no-plot"])):
            r = timed(
                [sys.executable, "-m", "bench", "profile", "analyze", str(export), "--out", str(analysis), *extra],
                args.taskset,
                ROOT,
            )
            runs[side].append(
                {k: v for k, v in r.items() if k != "stdout"}
                | {"bench_timing_s": json.loads((analysis / "nsys_meta.json").read_text()).get("timing_s")}
            )
            print(f"{side} run {i + 1}: {r['wall_s']} s", file=sys.stderr)
        if nsys:
            cmd = [nsys, "stats", "-q", "--format", "csv", "-r", "nvtx_gpu_proj_sum,nvtx_sum", str(export)]
            n = timed(cmd, args.taskset, work)
            runs["nsys"].append({k: v for k, v in n.items() if k != "stdout"})
            nsys_out = n["stdout"]
            print(f"nsys run {i + 1}: {n['wall_s']} s", file=sys.stderr)
    med = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items() if v}
    result: dict = {
        "export": facts,
        "machine": {"cpus": os.cpu_count(), "taskset": args.taskset, "python": sys.version.split()[0]},
        "nsys": nsys or "not found: bench's side only",
        "runs": runs,
        "median_wall_s": med,
        "ratio_bench_over_nsys": round(med["bench"] / med["nsys"], 3) if "nsys" in med else None,
        "ratio_bench_no_plot_over_nsys": round(med["bench_no_plot"] / med["nsys"], 3) if "nsys" in med else None,
    }
    if nsys:
        ours, theirs = bench_proj(analysis / "nsys_summary.csv"), nsys_proj(nsys_out)
        both = sorted(set(ours) & set(theirs))
        result["nsys_stdout_head"] = nsys_out.splitlines()[:40]  # the format the cross-check parses
        result["cross_check"] = {
            "ranges_compared": len(both),
            "only_bench": sorted(set(ours) - set(theirs)),
            "only_nsys": sorted(set(theirs) - set(ours)),
            "max_rel_diff_total_proj": max(
                (
                    abs(ours[n]["total_proj_ns"] - theirs[n]["total_proj_ns"]) / max(1.0, theirs[n]["total_proj_ns"])
                    for n in both
                ),
                default=None,
            ),
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
