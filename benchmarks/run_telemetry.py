"""Benchmark analysis: what the GPU and the host did during each run of a client cross-check, to tell a slower GPU
from a slower host when a server's speed moves between runs (reports/examples/kimi-rank-h100-crosscheck: 18%
between rounds at a fixed 1,980 MHz SM clock).

Joins each run of crosscheck.json (its wall-clock `started_unix` / `ended_unix`, recorded since this script
existed) with the once-a-second telemetry that scripts/gpu/issue18-steady.sh writes beside the results:
gpu-telemetry.csv (nvidia-smi: timestamp, memory used, utilization, SM and memory clocks, power, temperature,
throttle reasons; its timestamp is the host's local time, read as UTC, the GPU hosts' zone) and host-telemetry.csv
(unix time, /proc/stat's cpu line in jiffies, mean CPU clock in MHz). Per run: the GPU's mean utilization, clocks,
power and temperature, the throttle reasons seen; the host's busy and steal shares of CPU time and its clock. Then,
over the runs, the correlation of the engine's step p50 with each column. Prints a markdown table.

    python benchmarks/run_telemetry.py /tmp/res/crosscheck-call-1 [--gpu CSV] [--host CSV]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from bench.core.fmt import fmt, md_rows

# /proc/stat's cpu line, in order (proc(5)); guest time is already counted in user
STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
GPU_COLUMNS = ("util %", "SM MHz", "mem MHz", "power W", "temp C")


def _number(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None  # "[N/A]", an empty field


def read_gpu(path: Path) -> list[dict]:
    """One dict per nvidia-smi sample: unix time, the GPU_COLUMNS, throttle reasons (hex)."""
    out = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) < 8:
                continue
            try:
                stamp = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
            except ValueError:
                continue
            values = [_number(v) for v in (row[2], row[3], row[4], row[5], row[6])]
            out.append({"t": stamp.timestamp(), **dict(zip(GPU_COLUMNS, values)), "throttle": row[7].strip()})
    return out


def read_host(path: Path) -> list[dict]:
    """One dict per sample: unix time, the cumulative jiffies of STAT_FIELDS, the mean CPU clock."""
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(",")
        if len(parts) != 3:
            continue
        try:
            jiffies = [int(v) for v in parts[1].split()]
            out.append({"t": float(parts[0]), **dict(zip(STAT_FIELDS, jiffies)), "MHz": float(parts[2])})
        except ValueError:
            continue
    return out


def gpu_during(samples: list[dict], start: float, end: float) -> dict:
    inside = [s for s in samples if start <= s["t"] <= end]
    out: dict = {"gpu samples": len(inside)}
    for col in GPU_COLUMNS:
        values = [s[col] for s in inside if s[col] is not None]
        out[col] = float(np.mean(values)) if values else None
    reasons = sorted({s["throttle"] for s in inside} - {"0x0000000000000000"})
    out["throttle"] = (" ".join(reasons) if reasons else "none") if inside else ""
    return out


def host_during(samples: list[dict], start: float, end: float) -> dict:
    """Busy and steal shares of the CPU time between the first and the last sample inside the run."""
    inside = [s for s in samples if start <= s["t"] <= end]
    out: dict = {"host samples": len(inside), "busy %": None, "steal %": None, "iowait %": None, "CPU MHz": None}
    if len(inside) < 2:
        return out
    first, last = inside[0], inside[-1]
    delta = {k: last[k] - first[k] for k in STAT_FIELDS}
    total = sum(delta.values())
    if total <= 0:
        return out
    idle = delta["idle"] + delta["iowait"]
    out["busy %"] = 100 * (total - idle - delta["steal"]) / total
    out["steal %"] = 100 * delta["steal"] / total
    out["iowait %"] = 100 * delta["iowait"] / total
    out["CPU MHz"] = float(np.mean([s["MHz"] for s in inside]))
    return out


def runs(crosscheck: dict) -> list[dict]:
    """Each run of the cross-check in the order it ran, with its figures and its wall-clock span."""
    out = []
    for entry in crosscheck.get("rounds", []):
        for client in entry["order"]:
            run = entry[client]
            if "started_unix" not in run:
                raise SystemExit(
                    f"round {entry['round']} {client}: no started_unix (a cross-check from before run_telemetry.py "
                    "existed): its runs cannot be joined to telemetry"
                )
            out.append({"round": entry["round"], "client": client, **run})
    return sorted(out, key=lambda r: r["started_unix"])


def table(crosscheck: dict, gpu: list[dict], host: list[dict]) -> list[dict]:
    rows = []
    for run in runs(crosscheck):
        start, end = run["started_unix"], run["ended_unix"]
        rows.append(
            {
                "round": run["round"],
                "client": run["client"],
                "output tok/s": run.get("output_tok_s"),
                "step p50 ms": run.get("step_p50_ms"),
                **gpu_during(gpu, start, end),
                **host_during(host, start, end),
            }
        )
    return rows


def correlations(rows: list[dict], target: str = "step p50 ms") -> dict[str, float | None]:
    """Pearson r over the runs of `target` with each numeric telemetry column (None with fewer than 4 runs or
    a constant column)."""
    cols = [*GPU_COLUMNS, "busy %", "steal %", "iowait %", "CPU MHz"]
    out: dict[str, float | None] = {}
    for col in cols:
        pairs = [(r[target], r[col]) for r in rows if r.get(target) is not None and r.get(col) is not None]
        if len(pairs) < 4:
            out[col] = None
            continue
        x, y = np.array(pairs, dtype=float).T
        out[col] = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else None
    return out


def markdown(rows: list[dict]) -> str:
    def f(v, spec=".1f"):
        return fmt(v, spec, missing="")

    head = ["round", "client", "output tok/s", "step p50 ms", *GPU_COLUMNS, "throttle", "busy %", "steal %"]
    head += ["iowait %", "CPU MHz", "samples (gpu/host)"]
    body = (
        [
            r["round"],
            r["client"],
            f(r["output tok/s"]),
            f(r["step p50 ms"], ".2f"),
            *(f(r[c]) for c in GPU_COLUMNS),
            r["throttle"],
            f(r["busy %"]),
            f(r["steal %"], ".2f"),
            f(r["iowait %"], ".2f"),
            f(r["CPU MHz"], ".0f"),
            f"{r['gpu samples']}/{r['host samples']}",
        ]
        for r in rows
    )
    lines = list(md_rows(head, body))
    corr = correlations(rows)
    said = ", ".join(f"{k} {v:+.2f}" for k, v in corr.items() if v is not None)
    lines += ["", f"Pearson r of step p50 with each column over {len(rows)} runs: {said or 'too few runs (4 needed)'}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("crosscheck", type=Path, help="a cross-check's folder (its crosscheck.json)")
    p.add_argument("--gpu", type=Path, help="default: gpu-telemetry.csv beside the folder")
    p.add_argument("--host", type=Path, help="default: host-telemetry.csv beside the folder")
    args = p.parse_args(argv)
    data = json.loads((args.crosscheck / "crosscheck.json").read_text())
    gpu_path = args.gpu or args.crosscheck.parent / "gpu-telemetry.csv"
    host_path = args.host or args.crosscheck.parent / "host-telemetry.csv"
    gpu = read_gpu(gpu_path) if gpu_path.exists() else []
    host = read_host(host_path) if host_path.exists() else []
    if not gpu and not host:
        print(f"no telemetry at {gpu_path} or {host_path}", file=sys.stderr)
        return 1
    print(markdown(table(data, gpu, host)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
