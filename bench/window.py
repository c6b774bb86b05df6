"""The steady window of a closed-loop load: the span in which all C requests are in flight and decoding, and the
figures measured over it, with their precision. Pure functions over raw request rows (bench.loadgen records as
dicts): a scripted clock tests them (tests/unit/test_window.py).

Why a steady window: a measured wave of C requests starts with C prefills at once (ramp-up) and ends with
requests finishing one by one (drain), stalls of the last ones included. On one H200 rank of Kimi K2.6 those
phases took 28-58% of a one-wave window and turned a 1.44x steady speedup into a reported 0.77x (docs/measurement.md).
GuideLLM cuts warm-up and cool-down fractions off its window and MLPerf LoadGen requires a minimum duration; here the
span is found from the requests themselves:

- it starts when each of the first C requests (by send time) has had its first token: every slot is decoding;
- it ends when the first request that was in flight at the last send finishes: from then on fewer than C are in
  flight (the closed loop sends nothing more), i.e. the drain.

Inside the span a closed loop keeps C in flight: a finished request's slot gets a fresh prompt, whose prefill
interleaves with the others' decode as it does in serving. Figures over the span:
- output tok/s: tokens of the chunks that arrived in the span over its length;
- TPOT: per request, the time between its first and last chunk inside the span over the tokens after the first,
  as a distribution over requests (mean and p50);
- step: the gaps between successive chunks of one request inside the span. Each stream chunk is one engine step
  (under speculative decoding a step emits 1 to k+1 tokens), so the gap distribution is the engine's step time;
- stalls: gaps in which no request got a token for longer than STALL_FACTOR x the step p50 (the whole batch
  waiting, e.g. for a prefill); their count and share of the span say how much of it went to something else
  than decode steps;
- precision: the span cut into sub-windows of whole cycles of the loop (C completions each, cycle_edges; batch
  means); the sub-window throughputs' CV and the 95% confidence half-width of their mean, relative to it, for
  throughput and TPOT.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

MAX_SUB_WINDOWS = 10  # batch means: enough batches for a t interval, few enough that each spans whole cycles
MIN_SUB_WINDOWS = 3  # below this the half-width is unknown, not small
STALL_FACTOR = 4.0  # a gap without any token this many step p50s long is a stall of the whole batch
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Span:
    """[start, end] on the records' clock (time.perf_counter of the client)."""

    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


def steady_span(rows: Sequence[dict], concurrency: int) -> Span | None:
    """The span in which all `concurrency` requests were in flight and decoding (module docstring); None when
    there is none (fewer requests than the concurrency, a first request without a token, or the drain began
    before the last of the first requests got its first token)."""
    sent = sorted((r for r in rows if r.get("send_time") is not None), key=lambda r: r["send_time"])
    if concurrency < 1 or len(sent) < concurrency:
        return None
    first = first_of_each_slot(sent, concurrency)
    if len(first) < concurrency or any(not r.get("chunk_times") for r in first):
        return None
    start = max(r["chunk_times"][0] for r in first)
    last_send = sent[-1]["send_time"]
    ends = [r["end_time"] for r in sent if r.get("end_time") is not None and r["end_time"] >= last_send]
    if not ends:
        return None
    end = min(ends)
    return Span(start, end) if end > start else None


def first_of_each_slot(sent: Sequence, concurrency: int) -> list:
    """The first request of each of the C slots, from rows or records in send order. A closed loop records its
    worker's slot: with staggered starts, slot 0's second request can go out before slot C-1's first, so the first
    C sends are not one per slot. Rows without a slot (text workloads, results from before 2026-12-05) send their
    first C at once, and those are taken."""
    slots: dict[int, Any] = {}
    for r in sent:
        slot = r.get("slot") if isinstance(r, dict) else getattr(r, "slot", None)
        if slot is None:
            return list(sent[:concurrency])
        slots.setdefault(slot, r)
    return list(slots.values())


def _chunks(rows: Iterable[dict]) -> Iterable[tuple[list[float], list[int]]]:
    for r in rows:
        if r.get("chunk_times"):
            yield r["chunk_times"], r["chunk_tokens"]


def tokens_in(rows: Sequence[dict], lo: float, hi: float) -> int:
    """Output tokens of the chunks that arrived in (lo, hi]."""
    return sum(n for times, tokens in _chunks(rows) for t, n in zip(times, tokens) if lo < t <= hi)


def step_gaps(rows: Sequence[dict], span: Span) -> list[tuple[float, float, int]]:
    """(end time, gap s, tokens) of every chunk whose predecessor in the same request also lies in the span. Chunks
    that the client read together carry one arrival time; m of them after a gap share it, m steps of gap / m each
    (not m - 1 steps of 0 s and one of the whole gap, which would pull the step p50 and the stall threshold down)."""
    out = []
    for times, tokens in _chunks(rows):
        groups = [list(g) for _, g in itertools.groupby(range(len(times)), key=lambda k: times[k])]
        for before, group in itertools.pairwise(groups):
            t0, t = times[before[0]], times[group[0]]
            if span.start <= t0 and t <= span.end:
                out += [(t, (t - t0) / len(group), tokens[k]) for k in group]
    return out


def request_tpots(rows: Sequence[dict], span: Span) -> list[float]:
    """Per request, ms per output token between its first and last chunk inside the span (requests with at least
    two chunks there)."""
    out = []
    for times, tokens in _chunks(rows):
        inside = [(t, n) for t, n in zip(times, tokens) if span.start <= t <= span.end]
        later = sum(n for _, n in inside[1:])
        if len(inside) >= 2 and later > 0:
            out.append((inside[-1][0] - inside[0][0]) * 1e3 / later)
    return out


def stall_gaps(rows: Sequence[dict], span: Span, threshold_ms: float) -> np.ndarray:
    """The gaps (ms) inside the span in which no request got a token for longer than `threshold_ms`."""
    times = np.sort(np.fromiter((t for ts, _ in _chunks(rows) for t in ts if span.start <= t <= span.end), float))
    gaps = np.diff(np.concatenate(([span.start], times, [span.end]))) * 1e3
    return gaps[gaps > threshold_ms]


def _stall_summary(spans: Sequence[tuple[Sequence[dict], Span]], step_p50_ms: float | None) -> dict:
    """Stalls (gaps of no token longer than STALL_FACTOR x the step p50) over these (rows, span) pairs together:
    how many, their share of the spans' time, their p50 and longest (ms)."""
    length = sum(span.length for _, span in spans)
    if not step_p50_ms or length <= 0:
        return {"threshold_ms": None, "count": 0, "share": None, "p50_ms": None, "max_ms": None}
    threshold = STALL_FACTOR * step_p50_ms
    gaps = np.concatenate([stall_gaps(rows, span, threshold) for rows, span in spans])
    return {
        "threshold_ms": threshold,
        "count": int(gaps.size),
        "share": float(gaps.sum() / 1e3 / length),
        "p50_ms": float(np.median(gaps)) if gaps.size else None,
        "max_ms": float(gaps.max()) if gaps.size else None,
    }


def stalls(rows: Sequence[dict], span: Span, step_p50_ms: float | None) -> dict:
    """The stalls of one span (see _stall_summary)."""
    return _stall_summary([(rows, span)], step_p50_ms)


def cycle_edges(ends: Sequence[float], start: float, end: float, concurrency: int) -> list[float]:
    """Sub-window edges over whole cycles of the closed loop. A cycle is C successive completions (in a steady loop,
    each slot finishes once), so a sub-window from one completion to the (b x C)-th after it holds whole cycles:
    cut at fixed durations instead, a loop that repeats a pattern (a prefill of each slot's new request per
    cycle) is cut mid-cycle, and the sub-windows differ by where the cut falls, not by noise (docs/measurement.md).
    b = ceil(cycles / MAX_SUB_WINDOWS); the edges start at the first completion inside (start, end]; what lies
    before it and after the last edge counts in the headline, not in the precision. [] below MIN_SUB_WINDOWS."""
    done = sorted(t for t in ends if start < t <= end)
    per = max(concurrency, 1)
    cycles = (len(done) - 1) // per if done else 0
    if cycles < MIN_SUB_WINDOWS:
        return []
    b = math.ceil(cycles / MAX_SUB_WINDOWS)
    return [done[i * b * per] for i in range(cycles // b + 1)]


def sub_windows(rows: Sequence[dict], span: Span, concurrency: int) -> list[dict]:
    """Throughput and TPOT (ms per token over the chunk gaps that end inside) of the sub-windows between
    cycle_edges, each with its edges (`start`, `end`)."""
    edges = cycle_edges(
        [r["end_time"] for r in rows if r.get("end_time") is not None], span.start, span.end, concurrency
    )
    gaps = step_gaps(rows, span)
    out = []
    for lo, hi in itertools.pairwise(edges):
        inside = [(g, n) for t, g, n in gaps if lo < t <= hi]
        tokens = sum(n for _, n in inside)
        out.append(
            {
                "start": lo,
                "end": hi,
                "output_throughput": tokens_in(rows, lo, hi) / (hi - lo),
                "tpot_ms": sum(g for g, _ in inside) * 1e3 / tokens if tokens else None,
            }
        )
    return out


def half_width(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """(CV, relative half-width of the CONFIDENCE interval of the mean) of batch means; None below
    MIN_SUB_WINDOWS known values."""
    v = np.asarray([x for x in values if x is not None], float)
    if len(v) < MIN_SUB_WINDOWS or not v.mean():
        return None, None
    sd = float(np.std(v, ddof=1))
    t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, len(v) - 1))
    return sd / abs(float(v.mean())), t * sd / math.sqrt(len(v)) / abs(float(v.mean()))


def precision(windows: Sequence[dict]) -> dict:
    """What the sub-windows say about the steady figures' precision (relative values)."""
    cv_tp, hw_tp = half_width([w["output_throughput"] for w in windows])
    cv_tpot, hw_tpot = half_width([w["tpot_ms"] for w in windows])
    return {
        "sub_windows": len(windows),
        "confidence": CONFIDENCE,
        "output_throughput_cv": cv_tp,
        "output_throughput_halfwidth": hw_tp,
        "tpot_cv": cv_tpot,
        "tpot_halfwidth": hw_tpot,
    }


def distribution(values: Sequence[float]) -> dict:
    arr = np.asarray(values, float)
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    return {
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "n": int(arr.size),
    }


def steady(trials: Sequence[Sequence[dict]], concurrency: int) -> dict | None:
    """The steady figures of a point from its trials' measured rows (one closed-loop run each): throughput over
    the summed spans, TPOT and step distributions, TTFT of the requests sent inside a span (prefill under load),
    and the precision from every trial's sub-windows. None when no trial has a steady span."""
    spans, tokens, tpots, steps, itls, ttfts, windows, measured = [], 0, [], [], [], [], [], []
    for rows in trials:
        span = steady_span(rows, concurrency)
        if span is None:
            continue
        spans.append(span)
        measured.append(rows)
        tokens += tokens_in(rows, span.start, span.end)
        tpots += request_tpots(rows, span)
        gaps = step_gaps(rows, span)
        steps += [g * 1e3 for _, g, _ in gaps]
        itls += [g * 1e3 / n for _, g, n in gaps for _ in range(n)]  # token-accurate: k tokens of one chunk
        ttfts += [
            (r["chunk_times"][0] - r["send_time"]) * 1e3
            for r in rows
            if r.get("chunk_times") and span.start <= r["send_time"] < span.end
        ]
        windows += sub_windows(rows, span, concurrency)
    if not spans:
        return None
    length = sum(s.length for s in spans)
    tpot = distribution(tpots)
    step = distribution(steps)
    return {
        "spans": [[s.start, s.end] for s in spans],
        "span_s": length,
        "output_tokens": tokens,
        "output_throughput": tokens / length if length > 0 else None,
        "per_user_output_throughput": 1e3 / tpot["mean"] if tpot["mean"] else None,
        "tpot_ms": tpot,
        "step_ms": step,
        "stalls": _stall_summary(list(zip(measured, spans)), step["p50"]),
        "itl_ms": distribution(itls),
        "ttft_ms": distribution(ttfts),
        "precision": precision(windows),
    }


def live_halfwidth(
    start: float,
    now: float,
    times: Sequence[float],
    tokens: Sequence[int],
    ends: Sequence[float],
    concurrency: int,
) -> float | None:
    """While a closed loop runs: the relative half-width of the steady throughput so far, over [start, now]
    (start: when all C first decoded; no drain yet), from every chunk's arrival time and tokens in arrival order
    and the completions so far (`ends`), over the same whole-cycle sub-windows as the record (cycle_edges; cheap
    enough to ask once a second while streams are read). None while too short to say."""
    edges = np.asarray(cycle_edges(ends, start, now, concurrency), float)
    if now <= start or len(edges) < MIN_SUB_WINDOWS + 1:
        return None
    t = np.asarray(times, float)
    n = np.asarray(tokens, float)
    inside = (t > edges[0]) & (t <= edges[-1])
    per_bin = np.histogram(t[inside], bins=edges, weights=n[inside])[0] / np.diff(edges)
    return half_width(list(per_bin))[1]


DEFAULT_DRAIN_S = 30.0  # what a window cut by a deadline leaves its requests in flight, before a lifetime is known


@dataclass
class WindowRule:
    """When a measured closed loop stops sending: after `num_prompts` requests AND `window_s` seconds AND
    `min_requests` (enough whole cycles for a precision); then, with a `target_precision`, once the live half-width
    of the steady throughput is at most the target, or at `max_window_s` (which wins over `min_requests`).
    `more(i, load)` is bench.loadgen.ClosedLoop.more (i: requests sent so far; `load` has `records`, `token_times`,
    `token_counts`); `record()` says how the window ended. With a `deadline` (time.perf_counter's value at which
    the sweep's time budget ends, bench sweep --time-budget) it stops sending once the time left is at most
    `drain_s` (what the requests in flight still need: the trial sets 1.5 request lifetimes), whatever the floors say:
    `stopped_by` "deadline", and the point states the precision it reached."""

    num_prompts: int
    concurrency: int
    window_s: float = 0.0
    target_precision: float | None = None
    max_window_s: float = 300.0
    deadline: float | None = None
    drain_s: float = DEFAULT_DRAIN_S
    clock: Callable[[], float] = time.perf_counter
    check_every_s: float = 1.0  # the live precision walks every chunk: at most this often
    started: float | None = None
    stopped: str | None = None
    last_check: float = -math.inf
    last_halfwidth: float | None = None
    sent: int = 0

    def more(self, i: int, load) -> bool:
        if self.stopped:  # once stopped, stopped: a later look must not restart the loop at fewer than C in flight
            return False
        now = self.clock()
        if self.started is None:
            self.started = now
        self.sent = i
        elapsed = now - self.started
        if self.deadline is not None and now >= self.deadline - self.drain_s:
            return self._stop("deadline")
        if i < self.num_prompts or elapsed < self.window_s:
            return True
        if self.target_precision is not None and elapsed >= self.max_window_s:
            return self._stop("cap")  # the cap wins over the floor below: such a point states no precision
        if i < self.min_requests:
            return True
        if self.target_precision is None:
            return self._stop("duration" if self.window_s else "count")
        if now - self.last_check >= self.check_every_s:
            self.last_check = now
            start = _all_decoding(load.records, self.concurrency)
            self.last_halfwidth = (
                None
                if start is None
                else live_halfwidth(
                    start,
                    now,
                    load.token_times,
                    load.token_counts,
                    [r.end_time for r in load.records if r.phase == "measure" and r.end_time is not None],
                    self.concurrency,
                )
            )
        if self.last_halfwidth is not None and self.last_halfwidth <= self.target_precision:
            return self._stop("precision")
        return True

    @property
    def min_requests(self) -> int:
        """The fewest requests a closed loop sends, whatever num_prompts says: the first wave, then MIN_SUB_WINDOWS
        whole cycles of C completions inside the steady span, and one cycle of margin for the drain, so that every
        point can state its precision (cycle_edges); a smaller window would report a figure without one."""
        return (MIN_SUB_WINDOWS + 2) * max(self.concurrency, 1)

    def _stop(self, why: str) -> bool:
        self.stopped = self.stopped or why
        return False

    def record(self) -> dict:
        return {
            "requests": self.sent,
            "window_s": self.window_s,
            "target_precision": self.target_precision,
            "max_window_s": self.max_window_s,
            "stopped_by": self.stopped,
            "live_halfwidth": self.last_halfwidth,
        }


def _all_decoding(records: Sequence, concurrency: int) -> float | None:
    """When each of the measured phase's first C requests had its first token (None: not yet)."""
    first = first_of_each_slot([r for r in records if r.phase == "measure"], concurrency)
    if len(first) < concurrency or any(not r.chunk_times for r in first):
        return None
    return max(r.chunk_times[0] for r in first)
