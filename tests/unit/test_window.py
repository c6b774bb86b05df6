"""The steady window's arithmetic on a scripted clock: a closed loop simulated exactly (ramp-up, steady state,
drain, a stalled last request), the figures over the span, the precision of sub-windows, the window rule."""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

from bench.measure import metrics as M
from bench.measure import window as W


def closed_loop(
    concurrency: int,
    requests: int,
    *,
    ttft: float = 0.5,
    step: float = 0.1,
    tokens: int = 10,
    per_chunk: int = 1,
    stall: dict[int, float] | None = None,
    slow: dict[int, float] | None = None,
) -> list[dict]:
    """Rows of a closed loop on a scripted clock: C slots; a slot sends its next request when its last one ends.
    A request's first chunk comes `ttft` after its send, then one chunk of `per_chunk` tokens every `step`
    (`slow[i]`: request i's step instead); `stall[i]`: request i's last chunk comes that much later."""
    stall, slow = stall or {}, slow or {}
    free = [0.0] * concurrency
    rows = []
    for i in range(requests):
        slot = min(range(concurrency), key=lambda s: free[s])
        send = free[slot]
        chunks = tokens // per_chunk
        times = [send + ttft + j * slow.get(i, step) for j in range(chunks)]
        times[-1] += stall.get(i, 0.0)
        rows.append(
            {
                "index": i,
                "phase": "measure",
                "send_time": send,
                "end_time": times[-1],
                "chunk_times": times,
                "chunk_tokens": [per_chunk] * chunks,
                "status": "ok",
                "output_tokens": tokens,
                "prompt_len": 64,
                "prompt_tokens": 64,
                "error": None,
                "trial": 0,
            }
        )
        free[slot] = times[-1]
    return rows


SLOT_RATE = 10 / 1.4  # tokens per second of one slot: 10 tokens per 0.5 s prefill + 9 steps of 0.1 s


def test_span_starts_when_every_first_request_decodes_and_ends_at_the_drain():
    rows = closed_loop(4, 40)
    span = W.steady_span(rows, 4)
    assert span is not None
    assert span.start == pytest.approx(0.5), "the last of the first 4 requests got its first token at 0.5 s"
    last_send = max(r["send_time"] for r in rows)
    first_end_after = min(r["end_time"] for r in rows if r["end_time"] >= last_send)
    assert span.end == pytest.approx(first_end_after)
    assert span.end < max(r["end_time"] for r in rows), "the drain (fewer than 4 in flight) is left out"


def test_steady_throughput_is_the_slots_rate_and_the_whole_window_is_lower():
    rows = closed_loop(4, 40)
    steady = W.steady([rows], 4)
    assert steady["output_throughput"] == pytest.approx(4 * SLOT_RATE, rel=1e-9), "whole cycles: the slots' rate"
    assert steady["span_throughput"] > 1.02 * steady["output_throughput"], (
        "the span starts after the first wave's prefills: its own rate over-counts the stretch without them"
    )
    whole = M.summarize(rows)
    assert whole["output_throughput"] <= steady["output_throughput"] * (1 + 1e-9)
    assert steady["step_ms"]["p50"] == pytest.approx(100.0)
    assert steady["tpot_ms"]["p50"] == pytest.approx(100.0)


def test_a_stalled_last_request_does_not_move_the_steady_figures():
    plain, stalled = closed_loop(4, 40), closed_loop(4, 40, stall={39: 5.0})
    a, b = W.steady([plain], 4), W.steady([stalled], 4)
    assert b["output_throughput"] == pytest.approx(a["output_throughput"])
    assert M.summarize(stalled)["output_throughput"] < 0.8 * M.summarize(plain)["output_throughput"]


def test_one_wave_spans_from_the_last_first_token_to_the_first_end():
    rows = closed_loop(8, 8, ttft=0.5, step=0.1, tokens=20)
    span = W.steady_span(rows, 8)
    assert span == W.Span(0.5, 0.5 + 19 * 0.1)
    steady = W.steady([rows], 8)
    assert steady["output_throughput"] == pytest.approx(8 / 0.1, rel=0.01), "8 requests, one token each per 0.1 s"
    assert steady["ttft_ms"]["n"] == 0, "no request was sent inside the span: no TTFT under load"


def test_no_span_without_enough_requests_or_a_first_token():
    rows = closed_loop(4, 3)
    assert W.steady_span(rows, 4) is None
    rows = closed_loop(2, 6)
    rows[1]["chunk_times"], rows[1]["chunk_tokens"] = [], []
    assert W.steady_span(rows, 2) is None
    assert W.steady([rows], 2) is None


def test_speculative_chunks_count_their_tokens_and_one_gap_per_step():
    rows = closed_loop(2, 20, tokens=12, per_chunk=3, step=0.2)
    steady = W.steady([rows], 2)
    assert steady["step_ms"]["p50"] == pytest.approx(200.0), "a chunk of 3 tokens is one engine step"
    assert steady["tpot_ms"]["p50"] == pytest.approx(200.0 / 3)
    assert steady["itl_ms"]["p50"] == pytest.approx(200.0 / 3)


def test_precision_is_tight_for_a_regular_loop_and_wide_for_an_irregular_one():
    regular = W.steady([closed_loop(4, 200)], 4)["precision"]
    assert W.MIN_SUB_WINDOWS < regular["sub_windows"] <= W.MAX_SUB_WINDOWS
    assert regular["output_throughput_halfwidth"] < 0.02
    slow = {i: 0.3 for i in range(200) if (i // 20) % 2}  # every other block of 20 requests decodes 3x slower
    irregular = W.steady([closed_loop(4, 200, slow=slow)], 4)["precision"]
    assert irregular["output_throughput_halfwidth"] > 5 * regular["output_throughput_halfwidth"]
    assert irregular["tpot_halfwidth"] > regular["tpot_halfwidth"]


def test_sub_windows_hold_whole_cycles_of_c_completions():
    assert W.cycle_edges([1.0, 2.0, 3.0], 0.0, 10.0, 1) == [], "2 cycles: too few to state a precision"
    assert W.cycle_edges([1.0, 2.0, 3.0, 4.0, 11.0], 0.0, 10.0, 1) == [1.0, 2.0, 3.0, 4.0], "ends after the span: out"
    ends = [float(i) for i in range(7)]
    assert W.cycle_edges(ends, -1.0, 10.0, 2) == [0.0, 2.0, 4.0, 6.0], "C completions a cycle, from the first one"
    many = W.cycle_edges([float(i) for i in range(41)], -1.0, 100.0, 2)  # 20 cycles: 2 per sub-window
    assert many == [float(i) for i in range(0, 41, 4)] and len(many) == W.MAX_SUB_WINDOWS + 1


def test_a_periodic_loop_cut_at_whole_cycles_is_precise_where_fixed_durations_alias():
    """Two slots half a cycle apart repeat one pattern (a prefill, then decode) forever: its throughput is known
    exactly. Sub-windows of fixed length cut the pattern at different phases and report a spread that is only
    the phase of the cut; whole-cycle sub-windows report none."""
    one, other = closed_loop(1, 16), closed_loop(1, 16)
    for r in other:
        r["send_time"] += 0.7
        r["end_time"] += 0.7
        r["chunk_times"] = [t + 0.7 for t in r["chunk_times"]]
    rows = sorted(one + other, key=lambda r: r["send_time"])
    span = W.steady_span(rows, 2)
    cut = np.linspace(span.start, span.end, W.MAX_SUB_WINDOWS + 1)
    fixed = [W.tokens_in(rows, lo, hi) for lo, hi in itertools.pairwise(cut)]
    assert W.ratio_interval(fixed, list(np.diff(cut)))[2] > 0.01
    assert W.steady([rows], 2)["precision"]["output_throughput_halfwidth"] < 1e-3


def test_too_short_a_span_states_no_precision():
    steady = W.steady([closed_loop(4, 4, tokens=4)], 4)
    assert steady["precision"]["output_throughput_halfwidth"] is None


def test_equal_units_give_the_t_interval_of_their_mean():
    _, cv, hw = W.ratio_interval([9.0, 10.0, 11.0], [1.0, 1.0, 1.0])
    assert cv == pytest.approx(0.1)
    assert hw == pytest.approx(4.302653 * 1.0 / 3**0.5 / 10.0, rel=1e-5)
    assert W.ratio_interval([1.0, 2.0], [1.0, 1.0])[1:] == (None, None)


def test_summarize_puts_the_steady_figures_in_the_headline_and_keeps_the_whole_window():
    rows = closed_loop(4, 40, stall={39: 3.0})
    out = M.summarize(rows, concurrency=4)
    assert out["window"] == "steady"
    assert out["output_throughput"] == pytest.approx(W.steady([rows], 4)["output_throughput"])
    assert out["whole"]["output_throughput"] == pytest.approx(M.summarize(rows)["output_throughput"])
    assert out["step_ms"]["p50"] == pytest.approx(100.0)
    assert out["precision"]["sub_windows"] >= W.MIN_SUB_WINDOWS
    assert 0 < out["steady"]["fraction_of_window"] < 1
    assert out["steady"]["ttft_window"] == "steady" and out["ttft_ms"]["p50"] == pytest.approx(500.0)
    assert M.summarize(rows)["window"] == "whole", "no concurrency (open loop): the whole window, labelled"


def test_trials_add_their_spans():
    a, b = closed_loop(4, 40), closed_loop(4, 40, step=0.2)
    for r in b:
        r["trial"] = 1
    out = W.steady([a, b], 4)
    assert len(out["spans"]) == 2
    one, two = W.steady([a], 4), W.steady([b], 4)
    assert out["output_throughput"] == pytest.approx(
        (one["cycle_tokens"] + two["cycle_tokens"]) / (one["cycle_s"] + two["cycle_s"])
    ), "the blocks' whole cycles pooled: tokens over seconds"
    assert out["cycles"] == one["cycles"] + two["cycles"]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _load(rows: list[dict], until: float):
    """What WindowRule.more reads of a running load: records (attribute access) and chunk arrivals up to `until`."""
    records = [
        types.SimpleNamespace(
            phase=r["phase"],
            chunk_times=[t for t in r["chunk_times"] if t <= until],
            end_time=r["end_time"] if r["end_time"] <= until else None,
        )
        for r in rows
    ]
    pairs = sorted((t, n) for r in rows for t, n in zip(r["chunk_times"], r["chunk_tokens"]) if t <= until)
    return types.SimpleNamespace(records=records, token_times=[t for t, _ in pairs], token_counts=[n for _, n in pairs])


def test_window_rule_sends_num_prompts_then_stops_by_count_or_duration():
    clock = Clock()
    rule = W.WindowRule(12, 2, clock=clock)
    load = _load([], 0)
    assert [rule.more(i, load) for i in range(13)] == [True] * 12 + [False]
    assert rule.record()["stopped_by"] == "count"
    rule = W.WindowRule(5, 2, clock=clock)  # 5 requests at 2 users: fewer than the 3 cycles a precision needs
    assert rule.min_requests == 10 == (W.MIN_SUB_WINDOWS + 2) * 2
    assert [rule.more(i, load) for i in range(11)] == [True] * 10 + [False]
    clock.t = 0.0
    rule = W.WindowRule(1, 2, window_s=10.0, clock=clock)
    assert rule.more(0, load) and rule.more(5, load)
    clock.t = 10.0
    assert rule.more(6, load), "10 s passed but only 6 requests: below the floor"
    assert not rule.more(10, load) and rule.record()["stopped_by"] == "duration"


def test_window_rule_runs_until_the_target_precision_or_the_cap():
    rows = closed_loop(4, 400)
    clock = Clock()
    rule = W.WindowRule(4, 4, target_precision=0.02, max_window_s=1000.0, clock=clock)
    assert rule.more(0, _load(rows, 0.0))
    clock.t = 2.0
    assert rule.more(10, _load(rows, 2.0)), "2 s in: too few steps to state a precision"
    clock.t = 60.0
    assert not rule.more(100, _load(rows, 60.0))
    assert rule.record()["stopped_by"] == "precision" and rule.record()["live_halfwidth"] <= 0.02
    irregular = closed_loop(4, 400, slow={i: 0.4 for i in range(400) if (i // 8) % 2})
    clock.t = 0.0
    rule = W.WindowRule(4, 4, target_precision=0.001, max_window_s=30.0, clock=clock)
    assert rule.more(0, _load(irregular, 0.0))
    clock.t = 29.0
    assert rule.more(50, _load(irregular, 29.0))
    clock.t = 30.0
    assert not rule.more(51, _load(irregular, 30.0)) and rule.record()["stopped_by"] == "cap"


def test_a_lockstep_loop_stalls_the_whole_batch_at_each_prefill_and_a_staggered_one_does_not():
    """Slots of equal length sent together finish together and prefill together: each cycle has one gap of the
    prefill (0.5 s, over 4 x the 0.1 s step) in which no request gets a token. Shifted by half a cycle, one slot
    decodes while the other prefills: no stall of the whole batch."""
    lockstep = closed_loop(2, 20)
    steady = W.steady([lockstep], 2)
    stalls = steady["stalls"]
    assert stalls["threshold_ms"] == pytest.approx(400.0)
    assert stalls["p50_ms"] == pytest.approx(500.0) and stalls["max_ms"] == pytest.approx(500.0)
    cycles = (W.steady_span(lockstep, 2).length) / 1.4
    assert stalls["count"] == pytest.approx(cycles, abs=1)
    assert stalls["share"] == pytest.approx(0.5 / 1.4, rel=0.15)

    one, other = closed_loop(1, 10), closed_loop(1, 10)
    for r in other:
        r["send_time"] += 0.7
        r["end_time"] += 0.7
        r["chunk_times"] = [t + 0.7 for t in r["chunk_times"]]
    staggered = W.steady([sorted(one + other, key=lambda r: r["send_time"])], 2)
    assert staggered["stalls"]["count"] == 0 and staggered["stalls"]["share"] == 0.0
    assert staggered["output_throughput"] == pytest.approx(steady["output_throughput"], rel=0.1)


def test_the_cap_wins_over_the_floor():
    """A point too slow to fill its cycles before max_window_s stops there (and states no precision), rather than
    running on without bound."""
    clock = Clock()
    rule = W.WindowRule(1, 8, target_precision=0.02, max_window_s=5.0, clock=clock)
    assert rule.more(0, _load([], 0.0))
    clock.t = 5.0
    assert not rule.more(3, _load([], 5.0)) and rule.record()["stopped_by"] == "cap"


def test_a_deadline_stops_sending_one_drain_before_it_whatever_the_floors_say():
    """sweep --time-budget: the window stops once the time left is at most one request's lifetime (drain_s), even
    below num_prompts, window_s and the 5 x C floor, and says so; without a deadline the same calls go on."""
    clock = Clock()
    rule = W.WindowRule(100, 4, window_s=60.0, target_precision=0.02, deadline=50.0, drain_s=8.0, clock=clock)
    free = W.WindowRule(100, 4, window_s=60.0, target_precision=0.02, clock=clock)
    assert rule.more(0, _load([], 0.0)) and free.more(0, _load([], 0.0))
    clock.t = 41.9
    assert rule.more(10, _load([], 41.9))
    clock.t = 42.0
    assert not rule.more(11, _load([], 42.0)) and rule.record()["stopped_by"] == "deadline"
    assert free.more(11, _load([], 42.0)) and free.record()["stopped_by"] is None


def test_a_precision_stop_is_final():
    """Once stopped for precision, a later look whose half-width is wider must not restart the loop: the workers
    that already quit would leave it sending at fewer than C in flight."""
    clock, rows = Clock(), closed_loop(4, 400)
    rule = W.WindowRule(4, 4, target_precision=0.02, max_window_s=1000.0, clock=clock)
    clock.t = 60.0
    assert not rule.more(100, _load(rows, 60.0)) and rule.stopped == "precision"
    rule.target_precision = 1e-9  # any later half-width now reads as too wide
    clock.t = 62.0
    assert [rule.more(101 + i, _load(rows, 62.0)) for i in range(3)] == [False] * 3
    assert rule.record()["stopped_by"] == "precision"


def test_staggered_slots_the_span_starts_when_every_slots_first_request_decodes():
    """Slot 0 starts at once with a fast first request, slot 3 starts late: slot 0's second request goes out
    before slot 3's first. The first C sends are then not one per slot; the recorded slot says which are."""
    rows = []
    for slot, (send, first_token) in enumerate([(0.0, 0.2), (0.5, 0.7), (1.0, 1.2), (2.0, 2.5)]):
        rows.append({"send_time": send, "chunk_times": [first_token, first_token + 0.3], "end_time": 9.0 - slot})
        rows[-1]["slot"] = slot
    rows[0]["end_time"] = 0.6  # slot 0's first request ends; its second goes out before slot 3's first
    rows.append({"send_time": 0.6, "chunk_times": [0.8, 1.0], "end_time": 9.5, "slot": 0})
    rows.append({"send_time": 9.0, "chunk_times": [9.2, 9.4], "end_time": 9.4, "slot": 1})
    span = W.steady_span(rows, 4)
    assert span is not None and span.start == 2.5  # slot 3's first token, not slot 0's second request's 0.8
    unslotted = [{k: v for k, v in r.items() if k != "slot"} for r in rows]
    assert W.steady_span(unslotted, 4).start == 1.2  # without slots: the first four sends, the old rule
    records = [types.SimpleNamespace(phase="measure", **r) for r in sorted(rows, key=lambda r: r["send_time"])]
    assert W._all_decoding(records, 4) == 2.5


def test_chunks_read_together_share_their_gap():
    """Two chunks that the client read in one go carry one time: two steps of half the gap each, not a 0 ms step
    beside one of the whole gap."""
    rows = [{"chunk_times": [0.0, 0.1, 0.2, 0.4, 0.4, 0.5], "chunk_tokens": [1, 1, 1, 2, 1, 1]}]
    gaps = W.step_gaps(rows, W.Span(0.0, 1.0))
    assert [round(g * 1e3, 6) for _, g, _ in gaps] == [100, 100, 100, 100, 100]
    assert [n for _, _, n in gaps] == [1, 1, 2, 1, 1]
    assert W.step_gaps([{"chunk_times": [0.0, 0.0, 0.2], "chunk_tokens": [1, 1, 1]}], W.Span(0.0, 1.0)) == [
        (0.2, pytest.approx(0.2), 1)
    ]


def test_categories_measured_apart_are_separate_runs():
    """Two categories, each its own closed-loop window drained before the next, 5 s apart: the steady figure is
    over each window's own span, not one span across both with the drain, the pause and the ramp-up between."""
    a = closed_loop(4, 40)
    b = closed_loop(4, 40)
    shift = max(r["end_time"] for r in a) + 5.0
    for r in b:
        r["send_time"] += shift
        r["end_time"] += shift
        r["chunk_times"] = [t + shift for t in r["chunk_times"]]
    for r in a:
        r["window"] = "code"
    for r in b:
        r["window"] = "chat"
    out = M.summarize(a + b, concurrency=4)
    assert out["window"] == "steady" and len(out["steady"]["spans"]) == 2
    alone = M.summarize(a, concurrency=4)
    assert out["output_throughput"] == pytest.approx(alone["output_throughput"])  # the same loop twice
    assert [len(run) for run in M.closed_runs(a + b)] == [40, 40]
