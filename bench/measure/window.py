"""The steady window of a closed-loop load: the span in which all C requests are in flight and decoding, and the
figures measured over it, with their precision. Pure functions over raw request rows (bench.load.loadgen records as
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
- the headline tok/s over whole cycles: a cycle of the loop is C successive completions (each slot finishes once and
  sends a fresh prompt, whose prefill stalls the batch). From the first completion inside the span to the last whole
  cycle, every slot has prefilled the same number of times, wherever in the cycle the span began; the span's own
  ends fall at arbitrary phases (it starts just after the first wave's last prefill, a stretch without prefills),
  and the span's rate read 1-6% high on short spans of the Kimi rank (docs/measurement.md). Tokens over time of those
  whole cycles is the headline; the span's own rate is kept beside it (`span_throughput`), labelled;
- precision: the same whole cycles cut into sub-windows (at most MAX_SUB_WINDOWS, each of whole cycles), or, with
  at least MIN_SUB_WINDOWS blocks (trials of the point, each drained and restarted at another phase), the blocks
  themselves: the ratio estimator's 95% t interval (tokens over time of each unit), centred on the headline, which
  is the same ratio over the same units. Fewer than MIN_SUB_WINDOWS whole cycles: the point is `short` and states
  no precision.
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


def completions(ends: Iterable[float], start: float, end: float) -> list[float]:
    """The completion times inside (start, end], sorted."""
    return sorted(t for t in ends if start < t <= end)


def whole_cycles(done: Sequence[float], concurrency: int) -> int:
    """Whole cycles between the first and the last of `done` (sorted completions): C completions each."""
    return (len(done) - 1) // max(concurrency, 1) if done else 0


def cycle_edges(
    ends: Sequence[float], start: float, end: float, concurrency: int, min_cycles: int = MIN_SUB_WINDOWS
) -> list[float]:
    """Sub-window edges over whole cycles of the closed loop. A cycle is C successive completions (in a steady loop,
    each slot finishes once), so a sub-window from one completion to the (b x C)-th after it holds whole cycles:
    cut at fixed durations instead, a loop that repeats a pattern (a prefill of each slot's new request per
    cycle) is cut mid-cycle, and the sub-windows differ by where the cut falls, not by noise (docs/measurement.md).
    b = ceil(cycles / MAX_SUB_WINDOWS); the edges start at the first completion inside (start, end] and end at the
    last whole cycle (the last sub-window takes the cycles left over: it holds b to 2b - 1); what lies outside
    counts in neither the headline nor the precision. [] below `min_cycles` whole cycles."""
    return _edges(completions(ends, start, end), concurrency, min_cycles)


def _edges(done: Sequence[float], concurrency: int, min_cycles: int) -> list[float]:
    """cycle_edges over `done`, the sorted completions inside the span."""
    per = max(concurrency, 1)
    cycles = whole_cycles(done, per)
    if cycles < max(min_cycles, 1):
        return []
    b = math.ceil(cycles / MAX_SUB_WINDOWS)
    return [done[i * b * per] for i in range(cycles // b)] + [done[cycles * per]]


@dataclass(frozen=True)
class Unit:
    """One unit of the ratio estimator: output tokens over seconds, and the chunk gaps (s) over the tokens they
    delivered (TPOT's ratio), over [start, end]."""

    start: float
    end: float
    tokens: float
    gap_s: float
    gap_tokens: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def units_between(
    rows: Sequence[dict], span: Span, edges: Sequence[float], gaps: Sequence[tuple[float, float, int]] | None = None
) -> list[Unit]:
    """The units between successive `edges` (inside `span`); `gaps`: step_gaps(rows, span) when already known."""
    gaps = step_gaps(rows, span) if gaps is None else gaps
    out = []
    for lo, hi in itertools.pairwise(edges):
        inside = [(g, n) for t, g, n in gaps if lo < t <= hi]
        out.append(Unit(lo, hi, tokens_in(rows, lo, hi), sum(g for g, _ in inside), sum(n for _, n in inside)))
    return out


def sub_windows(rows: Sequence[dict], span: Span, concurrency: int) -> list[dict]:
    """Throughput and TPOT (ms per token over the chunk gaps that end inside) of the sub-windows between
    cycle_edges, each with its edges (`start`, `end`)."""
    edges = cycle_edges(
        [r["end_time"] for r in rows if r.get("end_time") is not None], span.start, span.end, concurrency
    )
    return [
        {
            "start": u.start,
            "end": u.end,
            "output_throughput": u.tokens / u.seconds,
            "tpot_ms": u.gap_s * 1e3 / u.gap_tokens if u.gap_tokens else None,
        }
        for u in units_between(rows, span, edges)
    ]


def ratio_interval(num: Sequence[float], den: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(ratio, CV, relative half-width) of the ratio estimator sum(num) / sum(den) over units: the residuals
    num_i - R den_i give its standard error (the delta method; units of unequal size weigh by their size), and the
    CONFIDENCE t interval with n - 1 degrees of freedom is centred on R, so it always contains the headline that
    is the same ratio. CV: the residuals' spread relative to R x the mean unit (a unit's rate, its typical
    deviation). None where unknown: the ratio without units or denominator, the spread below MIN_SUB_WINDOWS units."""
    y, x = np.asarray(num, float), np.asarray(den, float)
    if y.size == 0 or x.sum() <= 0:
        return None, None, None
    ratio = float(y.sum() / x.sum())
    if y.size < MIN_SUB_WINDOWS or ratio == 0:
        return ratio, None, None
    n = y.size
    sd = math.sqrt(float(np.sum((y - ratio * x) ** 2)) / (n - 1))
    cv = sd / float(x.mean()) / abs(ratio)
    t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1))
    return ratio, cv, t * cv / math.sqrt(n)


@dataclass(frozen=True)
class Block:
    """One closed-loop run's whole cycles (a block: a trial of the point): its sub-windows, and the block as one
    unit spanning them all. `cycles` 0: none whole in its span (`whole` None)."""

    cycles: int
    subs: list[Unit]
    whole: Unit | None


def block_of(rows: Sequence[dict], span: Span, concurrency: int, gaps: Sequence[tuple[float, float, int]]) -> Block:
    """The whole cycles of one run's steady span (cycle_edges, from one whole cycle on); `gaps`: its step_gaps."""
    done = completions((r["end_time"] for r in rows if r.get("end_time") is not None), span.start, span.end)
    edges = _edges(done, concurrency, min_cycles=1)
    if not edges:
        return Block(0, [], None)
    subs = units_between(rows, span, edges, gaps)
    whole = Unit(
        edges[0],
        edges[-1],
        sum(u.tokens for u in subs),
        sum(u.gap_s for u in subs),
        sum(u.gap_tokens for u in subs),
    )
    return Block(whole_cycles(done, concurrency), subs, whole)


def precision(blocks: Sequence[Block]) -> dict:
    """What the whole cycles say about the headline's precision (relative values). Units: the blocks when at least
    MIN_SUB_WINDOWS of them have whole cycles (each restarted at its own phase, so their spread holds the phase's
    share of the noise as well as the engine's), else every block's sub-windows pooled. A point with fewer than
    MIN_SUB_WINDOWS whole cycles in all states none. `within_block_cv`: the sub-windows' spread inside the blocks
    (pooled residuals about each block's own rate); `between_block_cv`: the blocks' rates about the headline."""
    full = [b for b in blocks if b.whole is not None]
    by_block = len(full) >= MIN_SUB_WINDOWS
    units = [b.whole for b in full if b.whole is not None] if by_block else [u for b in full for u in b.subs]
    cv_tp = hw_tp = cv_tpot = hw_tpot = None
    if sum(b.cycles for b in blocks) >= MIN_SUB_WINDOWS:
        _, cv_tp, hw_tp = ratio_interval([u.tokens for u in units], [u.seconds for u in units])
        timed = [u for u in units if u.gap_tokens]
        _, cv_tpot, hw_tpot = ratio_interval([u.gap_s for u in timed], [u.gap_tokens for u in timed])
    return {
        "unit": "block" if by_block else "sub-window",
        "sub_windows": len(units),
        "confidence": CONFIDENCE,
        "output_throughput_cv": cv_tp,
        "output_throughput_halfwidth": hw_tp,
        "tpot_cv": cv_tpot,
        "tpot_halfwidth": hw_tpot,
        "within_block_cv": _within_block_cv(full),
        "between_block_cv": cv_tp if by_block else None,  # the blocks are the units: their spread
    }


def _within_block_cv(full: Sequence[Block]) -> float | None:
    """The sub-windows' rates about their own block's rate, pooled over the blocks, relative to the mean rate."""
    split = [b for b in full if b.whole is not None and len(b.subs) >= 2]
    dof = sum(len(b.subs) - 1 for b in split)
    if dof < MIN_SUB_WINDOWS - 1:
        return None
    residuals = sum(
        (u.tokens - b.whole.tokens / b.whole.seconds * u.seconds) ** 2 for b in split if b.whole for u in b.subs
    )
    seconds = sum(b.whole.seconds for b in split if b.whole)
    tokens = sum(b.whole.tokens for b in split if b.whole)
    mean_seconds = seconds / sum(len(b.subs) for b in split)
    return math.sqrt(residuals / dof) / mean_seconds / (tokens / seconds)


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
    """The steady figures of a point from its trials' measured rows (one closed-loop run, a block, each): the
    headline throughput over every block's whole cycles (module docstring), TPOT and step distributions, TTFT of the
    requests sent inside a span (prefill under load), and the precision from the same whole cycles. A point with
    fewer than MIN_SUB_WINDOWS whole cycles is `short`: its headline is the whole cycles' rate where it has one,
    else the spans' own, and it states no precision. None when no trial has a steady span."""
    spans, tokens, tpots, steps, itls, ttfts, blocks, measured = [], 0, [], [], [], [], [], []
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
        blocks.append(block_of(rows, span, concurrency, gaps))
    if not spans:
        return None
    length = sum(s.length for s in spans)
    span_rate = tokens / length if length > 0 else None
    whole = [b.whole for b in blocks if b.whole is not None]
    cycle_s = sum(u.seconds for u in whole)
    cycle_tokens = sum(u.tokens for u in whole)
    cycles = sum(b.cycles for b in blocks)
    tpot = distribution(tpots)
    step = distribution(steps)
    return {
        "spans": [[s.start, s.end] for s in spans],
        "span_s": length,
        "output_tokens": tokens,
        "output_throughput": cycle_tokens / cycle_s if cycle_s > 0 else span_rate,
        "span_throughput": span_rate,
        "cycles": cycles,
        "short": cycles < MIN_SUB_WINDOWS,
        "cycle_windows": [[u.start, u.end] for u in whole],
        "cycle_s": cycle_s,
        "cycle_tokens": cycle_tokens,
        "per_user_output_throughput": 1e3 / tpot["mean"] if tpot["mean"] else None,
        "tpot_ms": tpot,
        "step_ms": step,
        "stalls": _stall_summary(list(zip(measured, spans)), step["p50"]),
        "itl_ms": distribution(itls),
        "ttft_ms": distribution(ttfts),
        "precision": precision(blocks),
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
    and the completions so far (`ends`), over the same whole-cycle sub-windows and ratio estimator as the record
    (cycle_edges, ratio_interval; cheap enough to ask once a second while streams are read). None while too short
    to say."""
    edges = np.asarray(cycle_edges(ends, start, now, concurrency), float)
    if now <= start or len(edges) < MIN_SUB_WINDOWS + 1:
        return None
    t = np.asarray(times, float)
    n = np.asarray(tokens, float)
    inside = (t > edges[0]) & (t <= edges[-1])
    per_bin = np.histogram(t[inside], bins=edges, weights=n[inside])[0]
    return ratio_interval(list(per_bin), list(np.diff(edges)))[2]


DEFAULT_DRAIN_S = 30.0  # what a window cut by a deadline leaves its requests in flight, before a lifetime is known


@dataclass
class WindowRule:
    """When a measured closed loop stops sending: after `num_prompts` requests AND `window_s` seconds AND
    `min_requests` (enough whole cycles for a precision); then, with a `target_precision`, once the live half-width
    of the steady throughput is at most the target, or at `max_window_s` (which wins over `min_requests`).
    `more(i, load)` is bench.load.loadgen.ClosedLoop.more (i: requests sent so far; `load` has `records`, `token_times`,
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
