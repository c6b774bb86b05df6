"""Attach a capture to sweep points: Nsight Systems when nsys is found, else the plugin's in-process timing mode.

The plugin (bench.profiling.plugin, loaded by vLLM in every process) emits the NVTX ranges; this module wraps the
server command in `nsys profile`, opens and closes vLLM's CUDA-profiler capture range around the measured
window (POST /start_profile, /stop_profile), and after the server stopped (so nsys finalizes) exports SQLite
and runs the per-range analysis. Without nsys the same ranges are timed in-process into per-process files.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core.errors import BenchError
from bench.load import http_client as http
from bench.profiling.targets import DOMAIN

log = logging.getLogger(__name__)
NO_RANGES_HINT = (
    "the suite's plugin did not run in the server's processes or its ranges went nowhere (the server log says "
    "'bench profiling active' in each process where it ran, and 'bench profiling ERROR' when it could not)"
)
NSYS_FLAGS = [
    "-t",
    "cuda,nvtx,osrt",
    "--cuda-graph-trace=node",
    "-s",
    "none",
    "--cpuctxsw=none",
    "--trace-fork-before-exec=true",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=repeat",
    "--force-overwrite=true",
]
KNOWN_NSYS = [
    "/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys",
    "/opt/nvidia/nsight-systems/bin/nsys",
    "/usr/local/cuda/bin/nsys",
]


def find_nsys(explicit: str | None = None) -> str | None:
    if explicit:
        if not Path(explicit).exists():
            raise BenchError(f"--nsys {explicit}: no such file")
        return explicit
    return shutil.which("nsys") or next((p for p in KNOWN_NSYS if Path(p).exists()), None)


@dataclass
class Capture:
    """One capture per engine configuration (server); points served by it each get a capture range."""

    out_dir: Path
    nsys: str | None = None
    outputs: list[dict] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "nsys" if self.nsys else "timing"

    def report_base(self, engine_id: str) -> Path:
        return self.out_dir / f"capture-{engine_id}"

    def wrap(self, argv: list[str], engine_id: str) -> list[str]:
        if not self.nsys:
            return argv
        argv = argv + ["--profiler-config", json.dumps({"profiler": "cuda"})]
        return [self.nsys, "profile", *NSYS_FLAGS, "-o", str(self.report_base(engine_id)), *argv]

    def env(self, engine_id: str) -> dict[str, str]:
        if self.nsys:
            return {"BENCH_NVTX": "1", "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
        timing_dir = self.report_base(engine_id).with_suffix(".timing")
        timing_dir.mkdir(parents=True, exist_ok=True)
        return {"BENCH_TIMING": "1", "BENCH_TIMING_DIR": str(timing_dir)}

    def start(self, base_url: str) -> None:
        if self.nsys:
            _post(base_url + "/start_profile")

    def stop(self, base_url: str) -> None:
        if self.nsys:
            _post(base_url + "/stop_profile")

    def finalize(self, engine_id: str, server_log: str = "") -> dict[str, Any]:
        """After the server stopped: export and analyze what this engine's capture produced. A failure is
        recorded in the result ("error"), not raised: the sweep's points are done by then."""
        base = self.report_base(engine_id)
        out: dict[str, Any] = {"engine_id": engine_id, "mode": self.mode}
        try:
            if self.nsys:
                out["reports"] = self._finalize_nsys(self.nsys, base, server_log)
                out["bench_ranges"] = sum(r["bench_ranges"] for r in out["reports"])
            else:
                out.update(_finalize_timing(base.with_suffix(".timing"), base.with_suffix(".analysis")))
            if not out["bench_ranges"]:  # e.g. the plugin inactive in the server, or a no-op NVTX domain
                raise BenchError(f"no {DOMAIN}.* range captured: {NO_RANGES_HINT}")
        except (BenchError, subprocess.SubprocessError, OSError) as exc:
            out["error"] = str(exc)
            log.error("capture of %s: %s", engine_id, exc)
        self.outputs.append(out)
        return out

    @staticmethod
    def _finalize_nsys(nsys: str, base: Path, server_log: str) -> list[dict[str, Any]]:
        reps = generated_reports(server_log) or sorted(base.parent.glob(base.name + "*.nsys-rep"))
        if not reps:
            raise BenchError(f"nsys wrote no report for {base} (see the server log)")
        return [_export_and_analyze(nsys, rep) for rep in collect_reports(reps, base)]


def _export_and_analyze(nsys: str, rep: Path) -> dict[str, Any]:
    """`nsys export --type sqlite` of one report, then the per-range analysis beside it."""
    import pandas as pd

    from bench.profiling.nsys_analysis import analyze

    sqlite = rep.with_suffix(".sqlite")
    subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(sqlite), str(rep)],
        check=True,
        capture_output=True,
        timeout=1200,
    )
    result = analyze(sqlite, rep.with_suffix(".analysis"))
    return {
        "nsys_rep": rep.name,
        "sqlite": sqlite.name,
        "tables": {k: str(v) for k, v in result["paths"].items()},
        "headline": result["headline"],
        "warnings": result["warnings"],
        "bench_ranges": bench_range_count(pd.read_parquet(result["paths"]["summary_parquet"])),
    }


def bench_range_count(summary: Any) -> int:
    """How many ranges of a per-range summary (nsys_analysis.summarize_ranges) the suite's plugin emitted: its
    NVTX domain, or a name in its namespace. vLLM's and torch's own ranges do not show that the plugin worked."""
    if not len(summary):
        return 0
    ours = (summary["domain"] == DOMAIN) | summary["name"].astype(str).str.startswith(DOMAIN + ".")
    return int(summary.loc[ours, "count"].sum())


def capture_problem(outputs: list[dict], measured: set[str]) -> str | None:
    """The first capture of an engine config in `measured` (one with a point that finished ok) that failed or
    recorded nothing of ours, as one line; None when they all worked. The capture of a server that never served
    a point holds nothing by nature: its points' failures say why."""
    bad = (item for item in outputs if item.get("error") and item["engine_id"] in measured)
    return next((f"capture of {item['engine_id']}: {item['error']}" for item in bad), None)


def generated_reports(log_text: str) -> list[Path]:
    """Reports nsys says it wrote ("Generated:" then one path per line). Seen on an H200 with nsys 2025.3 and
    --capture-range-end=repeat: the report went to $TMPDIR/nsys-report-XXXX.nsys-rep, not to the -o path."""
    found, lines = [], log_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Generated:":
            for nxt in lines[i + 1 :]:
                if not nxt.startswith(("\t", " ")) or not nxt.strip().endswith(".nsys-rep"):
                    break
                found.append(Path(nxt.strip()))
    return [p for p in found if p.exists()]


def collect_reports(reports: list[Path], base: Path) -> list[Path]:
    """Move the reports nsys wrote next to the -o base (capture-<engine>.nsys-rep, or .1, .2... for several), so
    the export, the analysis and the report itself stay in the capture folder and not in a server's temp folder."""
    out = []
    for i, rep in enumerate(reports, 1):
        dest = base.parent / (f"{base.name}.nsys-rep" if len(reports) == 1 else f"{base.name}.{i}.nsys-rep")
        if rep.resolve() != dest.resolve():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(rep), dest)
        out.append(dest)
    return out


def _finalize_timing(timing_dir: Path, out_dir: Path) -> dict[str, Any]:
    from bench.profiling.nsys_analysis import summarize_ranges
    from bench.profiling.plot import plot_range_breakdown
    from bench.profiling.timing import load_timing_dir

    ranges = load_timing_dir(timing_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize_ranges(ranges)
    ranges.to_parquet(out_dir / "ranges.parquet", index=False)
    summary.to_parquet(out_dir / "summary.parquet", index=False)
    summary.to_csv(out_dir / "summary.csv", index=False)
    if len(summary):
        plot_range_breakdown(summary, out_dir / "range_breakdown.png")
    return {
        "timing_dir": str(timing_dir),
        "tables": {"summary": str(out_dir / "summary.parquet")},
        "ranges": len(ranges),
        "bench_ranges": bench_range_count(summary),
        "range_names": sorted(summary["name"].unique()) if len(summary) else [],
    }


def _post(url: str) -> None:
    http.post(url, None, timeout=120)
