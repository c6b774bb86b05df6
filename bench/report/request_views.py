"""What the report draws from the raw request records (raw/<point id>.parquet): per point, the per-request TPOT and
the token-accurate ITL samples behind its percentiles, and its output tok/s over the measured window with the steady
span and the whole-cycle edges. Pure numpy / pandas; bench.report.analysis.collect reads the raw records once
(`read_raw`) and passes them here and to bench.report.roofline_check.

The samples follow the point's headline window: where the record has steady spans (metrics.steady.spans), each
closed-loop run's span is found among them and the samples are the span's, as bench.measure.window.steady takes them
(request_tpots; step gaps spread over the tokens of each chunk); a point without one (an open loop, too few
requests, an older record) gives the whole measured window's (bench.measure.metrics.request_latencies). `window` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bench.measure import window as W
from bench.measure.metrics import closed_runs, request_latencies
from bench.results.records import PointRecord
from bench.results.store import SweepStore

TIMELINE_BINS = 60  # tok/s over the window: this many bins per run
MAX_TIMELINES = 12  # small multiples: at most this many points
SAMPLE_COLUMNS = ["point_id", "window", "tpot_ms", "itl_ms"]
TIMELINE_COLUMNS = ["point_id", "runs", "t", "tok_s", "spans", "edges", "cycle_windows", "short", "duration_s"]

RawRows = dict[str, list[dict]]  # point id -> its raw request rows


def read_raw(sweep_dir: Path, records: dict[str, PointRecord]) -> RawRows:
    """Every ok point's raw request rows, read once (the record's own `raw` path where it names one)."""
    store = SweepStore(sweep_dir)
    out: RawRows = {}
    for pid, point in records.items():
        if point.status != "ok":
            continue
        path = store.root / point.raw if point.raw else store.raw_path(pid)
        if path.is_file():
            out[pid] = store.raw(pid) if path == store.raw_path(pid) else pd.read_parquet(path).to_dict("records")
    return out


def _measured(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r.get("phase", "measure") == "measure"]


def _run_span(run: Sequence[dict], spans: list[W.Span]) -> W.Span | None:
    """The recorded steady span that lies inside this run (first send to last end), if any."""
    sends = [r["send_time"] for r in run if r.get("send_time") is not None]
    ends = [r["end_time"] for r in run if r.get("end_time") is not None]
    if not sends or not ends:
        return None
    lo, hi = min(sends), max(ends)
    return next((s for s in spans if lo <= s.start and s.end <= hi), None)


def _spans(point: PointRecord) -> list[W.Span]:
    m = point.metrics
    if m is None or m.window != "steady" or m.steady is None:
        return []
    return [W.Span(a, b) for a, b in m.steady.spans]


def latency_samples(records: dict[str, PointRecord], raw: RawRows) -> pd.DataFrame:
    """One row per ok point with raw records: its per-request TPOT (ms) and its ITL samples (ms, one per token
    after the first), as numpy arrays, and the window they come from ("steady" or "whole")."""
    rows = []
    for pid, rows_of in raw.items():
        runs = closed_runs(_measured(rows_of))
        spans = _spans(records[pid])
        tpots: list[float] = []
        itls: list[float] = []
        matched = [(run, _run_span(run, spans)) for run in runs]
        steady = bool(spans) and any(span is not None for _, span in matched)
        for run, span in matched:
            if steady:
                if span is None:
                    continue
                tpots += W.request_tpots(run, span)
                itls += [g * 1e3 / n for _, g, n in W.step_gaps(run, span) for _ in range(n)]
            else:
                for r in run:
                    lat = request_latencies(r)
                    tpots += [lat["tpot"]] if lat["tpot"] is not None else []
                    itls += lat["itl"]
        rows.append(
            {
                "point_id": pid,
                "window": "steady" if steady else "whole",
                "tpot_ms": np.asarray(tpots, float),
                "itl_ms": np.asarray(itls, float),
            }
        )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def timelines(records: dict[str, PointRecord], raw: RawRows) -> pd.DataFrame:
    """Per ok point with raw records: output tok/s over its first closed-loop run (the first with a steady span),
    in TIMELINE_BINS bins from the run's first send (`t`: bin centres, s), the run's steady spans, the edges of
    the whole cycles in them (bench.measure.window.cycle_edges: C completions each) and the record's headline window of
    whole cycles in this run (metrics.steady.cycle_windows), relative to the same origin; `short`: the record's
    headline holds fewer than 3 whole cycles."""
    rows = []
    for pid, rows_of in raw.items():
        runs = [run for run in closed_runs(_measured(rows_of)) if any(r.get("chunk_times") for r in run)]
        if not runs:
            continue
        spans = _spans(records[pid])
        matched = [(run, _run_span(run, spans)) for run in runs]
        run, span = next(((r, s) for r, s in matched if s is not None), matched[0])
        t0 = min(r["send_time"] for r in run if r.get("send_time") is not None)
        t1 = max([r["end_time"] for r in run if r.get("end_time") is not None] or [t0])
        times = np.fromiter((t for r in run for t in r.get("chunk_times") or []), float)
        tokens = np.fromiter((n for r in run for n in r.get("chunk_tokens") or []), float)
        duration = max(t1 - t0, float(times.max() - t0) if times.size else 0.0)
        if duration <= 0:
            continue
        edges = np.linspace(0.0, duration, TIMELINE_BINS + 1)
        counts, _ = np.histogram(times - t0, bins=edges, weights=tokens)
        shape = records[pid].config.shape
        concurrency = shape.concurrency if shape else None
        cycles: list[float] = []
        if span is not None and concurrency:
            ends = [r["end_time"] for r in run if r.get("end_time") is not None]
            cycles = [e - t0 for e in W.cycle_edges(ends, span.start, span.end, int(concurrency))]
        metrics = records[pid].metrics
        steady = metrics.steady if metrics is not None else None
        lo, hi = t0, t0 + duration
        windows = [(a - t0, b - t0) for a, b in (steady.cycle_windows if steady else []) if lo <= a and b <= hi]
        rows.append(
            {
                "point_id": pid,
                "runs": len(runs),
                "t": (edges[:-1] + edges[1:]) / 2,
                "tok_s": counts / np.diff(edges),
                "spans": [] if span is None else [(span.start - t0, span.end - t0)],
                "edges": cycles,
                "cycle_windows": windows,
                "short": bool(steady.short) if steady else False,
                "duration_s": duration,
            }
        )
    return pd.DataFrame(rows, columns=TIMELINE_COLUMNS)
