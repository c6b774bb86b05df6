"""Benchmark analysis: how a steady point's throughput moves through its window, from its committed raw rows.

For one point of a results directory: the point's own sub-windows (bench.measure.window.sub_windows: whole cycles of the
closed loop, the ones its precision comes from), and in each the output tok/s, the share of time in stalls
(bench.measure.window.stall_gaps: gaps of no token for any request longer than STALL_FACTOR x the point's step p50, a new
request's prefill stopping the batch) and the tok/s outside those stalls. Then the CV of the sub-windows' tok/s, its
lag-1 autocorrelation (the batch means' independence, which the half-width assumes) and its correlation with the
stall share. Prints a markdown table.

    python benchmarks/steady_drift.py reports/examples/kimi-rank-h200-long-window/sweep 8b47cf550bba
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from bench.core.fmt import md_rows
from bench.measure import window as W
from bench.results.store import SweepStore


def drift(rows: list[dict], concurrency: int, step_p50_ms: float) -> dict:
    """Per sub-window: start and end (s from the span's start), tok/s, stall share, tok/s outside stalls; and the
    summary statistics (module docstring)."""
    span = W.steady_span(rows, concurrency)
    if span is None:
        raise SystemExit("no steady span in these rows")
    threshold = W.STALL_FACTOR * step_p50_ms
    out = []
    for w in W.sub_windows(rows, span, concurrency):
        length = w["end"] - w["start"]
        stalled = float(W.stall_gaps(rows, W.Span(w["start"], w["end"]), threshold).sum()) / 1e3
        out.append(
            {
                "from_s": w["start"] - span.start,
                "to_s": w["end"] - span.start,
                "tok_s": w["output_throughput"],
                "stall_share": stalled / length,
                "outside_tok_s": w["output_throughput"] * length / (length - stalled) if length > stalled else None,
            }
        )
    tok = np.array([w["tok_s"] for w in out])
    share = np.array([w["stall_share"] for w in out])
    enough = len(tok) >= 3
    return {
        "sub_windows": out,
        "cv": float(tok.std(ddof=1) / tok.mean()) if enough else None,
        "lag1": float(np.corrcoef(tok[:-1], tok[1:])[0, 1]) if enough else None,
        "corr_stall_share": float(np.corrcoef(tok, share)[0, 1]) if enough else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a results directory (points/, raw/)")
    ap.add_argument("point", help="a point id (or prefix)")
    args = ap.parse_args(argv)
    store = SweepStore(args.results)
    (record,) = [r for pid, r in store.records().items() if pid.startswith(args.point)]
    shape, metrics = record.config.shape, record.metrics
    if shape is None or metrics is None or metrics.step_ms is None or metrics.step_ms.p50 is None:
        raise SystemExit(f"{record.point_id}: not a measured closed-loop point with a step p50")
    rows = [r for r in store.raw(record.point_id) if r["phase"] == "measure" and r["status"] == "ok"]
    d = drift(rows, shape.concurrency, metrics.step_ms.p50)
    table = [
        [
            f"{w['from_s']:.0f}-{w['to_s']:.0f}",
            f"{w['tok_s']:.1f}",
            f"{w['stall_share']:.0%}",
            f"{w['outside_tok_s']:.0f}",
        ]
        for w in d["sub_windows"]
    ]
    print("\n".join(md_rows(["steady span s", "tok/s", "stall share", "tok/s outside stalls"], table)))
    print(
        f"\nCV {d['cv']:.3f}, lag-1 autocorrelation {d['lag1']:.2f}, correlation with stall share {d['corr_stall_share']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
