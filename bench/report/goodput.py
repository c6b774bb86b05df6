"""Goodput of a point under service-level targets (bench.config.slo), per request as `vllm bench serve --goodput` counts
it: a request is good when it succeeded and every target given holds for it (its TTFT, TPOT and end-to-end latency
as bench.measure.metrics.request_latencies measures them; a request with no token after its first chunk has no TPOT and
meets a TPOT target, as vLLM's TPOT of 0 for it does).

Over the point's headline window, as its output tok/s is:
- steady (bench.measure.window): good requests per second = good requests that finished inside the steady spans over the
  spans' length (request_throughput counts every finished one the same way); good output tokens per second = the
  tokens of good requests' chunks that arrived inside the headline's token windows (the whole cycles,
  metrics.steady.cycle_windows; the spans for records without them) over their length, so that with every request
  good it equals the point's output tok/s;
- whole: good requests and their output tokens over the whole window's duration.
The raw per-request rows are read only when an SLO is given (bench.report.build).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.config.slo import Slo
from bench.measure.metrics import request_latencies
from bench.measure.window import tokens_in
from bench.results.records import PointRecord
from bench.results.store import SweepStore

COLUMNS = ["point_id", "goodput_requests_s", "goodput_output_s", "good_requests", "counted_requests", "goodput_window"]


def is_good(row: dict, slo: Slo) -> bool:
    """Whether one raw request row meets every target of `slo`."""
    if row.get("status") != "ok" or not row.get("chunk_times"):
        return False
    lat = request_latencies(row)
    figures = {"ttft": lat["ttft"], "tpot": lat["tpot"], "e2el": lat["e2e"]}
    for target, limit in slo.targets().items():
        value = figures[target]
        if value is None and target == "tpot":
            continue  # one chunk only: no time between tokens to bound
        if value is None or value > limit:
            return False
    return True


@dataclass(frozen=True)
class Goodput:
    requests_s: float | None
    output_s: float | None
    good: int  # good requests counted (finished inside the window)
    counted: int  # every request that finished inside the window
    window: str  # "steady" or "whole"


def goodput(
    rows: Sequence[dict],
    slo: Slo,
    spans: Sequence[Sequence[float]] | None,
    duration_s: float | None,
    token_windows: Sequence[Sequence[float]] | None = None,
) -> Goodput:
    """Goodput over the steady `spans` ([start, end] on the rows' clock) when given, else over the whole window of
    `duration_s` seconds: good requests per second over the spans, good output tokens per second over
    `token_windows` (default: the spans). Rows of other phases than "measure" (warm-up) are left out."""
    measured = [r for r in rows if (r.get("phase") or "measure") == "measure"]
    good_rows = [r for r in measured if is_good(r, slo)]  # is_good is False for a failed request
    if spans:
        length = sum(b - a for a, b in spans)
        windows = token_windows or spans
        token_s = sum(b - a for a, b in windows)
        good = [r for r in good_rows if _inside(r.get("end_time"), spans)]
        counted = sum(1 for r in measured if r.get("status") == "ok" and _inside(r.get("end_time"), spans))
        tokens = sum(tokens_in(good_rows, a, b) for a, b in windows)
        window = "steady"
    else:
        length = token_s = duration_s or 0.0
        good = good_rows
        counted = sum(1 for r in measured if r.get("status") == "ok")
        tokens = sum(sum(r.get("chunk_tokens") or []) for r in good)
        window = "whole"
    if not (length > 0 and token_s > 0):
        return Goodput(None, None, len(good), counted, window)
    return Goodput(len(good) / length, tokens / token_s, len(good), counted, window)


def _inside(t: float | None, spans: Sequence[Sequence[float]]) -> bool:
    return t is not None and any(a < t <= b for a, b in spans)


def point_goodput(record: PointRecord, rows: Sequence[dict], slo: Slo) -> Goodput | None:
    """A measured point's goodput over its headline window; None for a point that did not run."""
    m = record.metrics
    if record.status != "ok" or m is None:
        return None
    steady = m.steady if m.window == "steady" else None
    spans = steady.spans if steady is not None else None
    windows = steady.cycle_windows if steady is not None else None
    return goodput(rows, slo, spans, m.whole_window().duration_s, windows)


def goodput_table(sweep_dir: Path, slo: Slo) -> pd.DataFrame:
    """One row per ok point of the results directory (COLUMNS)."""
    store = SweepStore(sweep_dir)
    out = []
    for point_id, record in store.records().items():
        found = point_goodput(record, store.raw(point_id), slo) if record.status == "ok" else None
        if found is not None:
            out.append([point_id, found.requests_s, found.output_s, found.good, found.counted, found.window])
    return pd.DataFrame(out, columns=COLUMNS)
