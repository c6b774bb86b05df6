"""The whole-cycle headline and its interval on a scripted batch engine: one engine step serves every request in
flight, and a step that admits a new request carries its prefill (the whole batch waits for it), as on the Kimi
rank. The slots' phases (when each sends relative to the others) decide how the prefills fall, which is what made
the span's own rate phase-biased on short spans (docs/measurement.md)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.measure import window as W


def batch_engine(
    concurrency: int,
    requests: int,
    *,
    step: float = 0.01,
    prefill: float = 0.1,
    batched: float = 0.3,
    tokens: int = 40,
    offsets: list[float] | None = None,
    accept: int = 1,
    rng: np.random.Generator | None = None,
    stall: dict[int, float] | None = None,
    trial: int = 0,
) -> list[dict]:
    """Rows of a closed loop against one batch engine. Slot j sends its first request at offsets[j], then one as
    each of its requests ends, `requests` in all. Each step takes `step` s plus `prefill` s per request it admits
    (those get their first token at its end); every running request gets 1 token a step, or 1 to `accept` drawn
    uniformly (speculative decoding's random acceptance) when `accept` > 1. `stall[i]`: the step that ends request
    i takes that much longer."""
    rng = rng or np.random.default_rng(0)
    stall = stall or {}
    offsets = offsets or [0.0] * concurrency
    due = {j: offsets[j] for j in range(concurrency)}  # slot -> when its next request is sent
    running: dict[int, dict] = {}
    rows: list[dict] = []
    t = 0.0
    while len(rows) < requests or running:
        sent = [j for j, at in sorted(due.items(), key=lambda kv: kv[1]) if at <= t and len(rows) < requests]
        if not sent and not running:
            t = min(due.values())
            continue
        admitted = []
        for j in sent:
            row = {
                "index": len(rows),
                "slot": j,
                "phase": "measure",
                "send_time": due.pop(j),
                "chunk_times": [],
                "chunk_tokens": [],
                "status": "ok",
                "output_tokens": tokens,
                "prompt_len": 64,
                "prompt_tokens": 64,
                "error": None,
                "trial": trial,
                "end_time": None,
            }
            rows.append(row)
            admitted.append(row)
        ending = [r for r in running.values() if r["left"] <= accept]
        duration = (
            step
            + prefill * (1 + batched * (len(admitted) - 1)) * bool(admitted)
            + sum(stall.get(r["row"]["index"], 0.0) for r in ending)
        )
        t += duration
        for j, r in list(running.items()):
            n = min(r["left"], int(rng.integers(1, accept + 1)) if accept > 1 else 1)
            r["row"]["chunk_times"].append(t)
            r["row"]["chunk_tokens"].append(n)
            r["left"] -= n
            if r["left"] == 0:
                r["row"]["end_time"] = t
                del running[j]
                due[j] = t
        for row in admitted:
            row["chunk_times"].append(t)
            row["chunk_tokens"].append(1)
            running[row["slot"]] = {"row": row, "left": tokens - 1}
        if len(rows) >= requests:
            due.clear()
    return rows


def long_run_rate(concurrency: int, **kw) -> float:
    """The engine's rate over a long steady stretch of whole cycles (the truth a short run estimates)."""
    rows = batch_engine(concurrency, 400 * concurrency, **kw)
    out = W.steady([rows], concurrency)
    assert out is not None and out["cycles"] > 300
    return out["output_throughput"]


def test_lockstep_whole_cycles_hold_the_rate_wherever_the_span_ends():
    """Sent at once, every slot prefills in the same step each cycle: a short run's span rate moves with where its
    ends fall; the whole cycles' rate is the long-run one."""
    truth = long_run_rate(4)
    span_rates, cycle_rates = [], []
    for requests in range(22, 42):
        out = W.steady([batch_engine(4, requests)], 4)
        assert out is not None
        span_rates.append(out["span_throughput"])
        cycle_rates.append(out["output_throughput"])
    assert max(abs(r / truth - 1) for r in cycle_rates) < 0.003
    assert max(abs(r / truth - 1) for r in span_rates) > 0.02, "the span's own ends are phase-biased"


def test_the_headline_is_the_ratio_over_its_own_units_and_its_interval_contains_it():
    for seed in range(40):
        rng = np.random.default_rng(seed)
        rows = batch_engine(4, int(rng.integers(20, 60)), accept=4, rng=rng)
        out = W.steady([rows], 4)
        assert out is not None
        assert out["output_throughput"] == pytest.approx(out["cycle_tokens"] / out["cycle_s"])
        hw = out["precision"]["output_throughput_halfwidth"]
        if out["short"]:
            assert hw is None
        else:
            assert hw is not None and hw >= 0, "relative half-width about the headline: it contains it"


def test_mixed_acceptance_interval_covers_the_long_run_rate():
    truth = long_run_rate(4, accept=4, rng=np.random.default_rng(999))
    covered, known = 0, 0
    for seed in range(30):
        rows = batch_engine(4, 60, accept=4, rng=np.random.default_rng(seed))
        out = W.steady([rows], 4)
        hw = out["precision"]["output_throughput_halfwidth"]
        assert hw is not None
        known += 1
        covered += abs(out["output_throughput"] / truth - 1) <= hw
    assert known == 30
    assert covered >= 24, f"a 95% interval covered the long-run rate in {covered} of 30 short runs"


def test_a_stall_widens_the_interval_and_stays_inside_it():
    calm = W.steady([batch_engine(4, 60, accept=4)], 4)
    stalled = W.steady([batch_engine(4, 60, accept=4, stall={30: 2.0})], 4)
    assert stalled["output_throughput"] < calm["output_throughput"]
    assert stalled["precision"]["output_throughput_halfwidth"] > 2 * calm["precision"]["output_throughput_halfwidth"]


def test_fewer_than_three_whole_cycles_is_short_and_states_no_precision():
    out = W.steady([batch_engine(4, 14)], 4)
    assert out is not None
    assert out["cycles"] < W.MIN_SUB_WINDOWS and out["short"]
    assert out["precision"]["output_throughput_halfwidth"] is None
    assert out["precision"]["tpot_halfwidth"] is None
    assert out["output_throughput"] > 0, "a short point keeps a figure, marked, without precision"
    long = W.steady([batch_engine(4, 40)], 4)
    assert not long["short"] and long["cycles"] >= W.MIN_SUB_WINDOWS


def test_three_blocks_at_different_phases_make_the_blocks_the_units():
    """Fixed-length requests keep the phase they start with: three staggers of one loop run at different rates,
    each with no spread of its own. Sub-windows of one block would state a tiny interval; blocks as units carry the
    phase's share."""
    C, life = 4, 0.4 + 0.1 * 4
    staggers = [[0.0] * C, [j * life / C for j in range(C)], [0.0, 0.05, 0.1, 0.4]]
    blocks = [batch_engine(C, 60, offsets=o, trial=i) for i, o in enumerate(staggers)]
    rates = [W.steady([b], C)["output_throughput"] for b in blocks]
    assert max(rates) / min(rates) > 1.05, "the phase pattern changes the rate"
    single = W.steady([blocks[0]], C)["precision"]
    assert single["unit"] == "sub-window" and single["output_throughput_halfwidth"] < 0.01
    out = W.steady(blocks, C)
    p = out["precision"]
    assert p["unit"] == "block" and p["sub_windows"] == 3
    assert p["between_block_cv"] > 0.02
    assert p["within_block_cv"] is not None and p["within_block_cv"] < p["between_block_cv"]
    lo = out["output_throughput"] * (1 - p["output_throughput_halfwidth"])
    hi = out["output_throughput"] * (1 + p["output_throughput_halfwidth"])
    assert lo <= min(rates) and max(rates) <= hi, "the blocks' interval spans the phases it sampled"


def test_two_blocks_pool_their_sub_windows():
    blocks = [batch_engine(4, 40, accept=4, rng=np.random.default_rng(i), trial=i) for i in range(2)]
    p = W.steady(blocks, 4)["precision"]
    assert p["unit"] == "sub-window" and p["sub_windows"] >= 6
    assert p["between_block_cv"] is None


def test_ratio_interval_arithmetic():
    ratio, cv, hw = W.ratio_interval([10, 12, 14], [1, 1, 1])
    assert ratio == pytest.approx(12)
    assert cv == pytest.approx(2 / 12)
    assert hw == pytest.approx(4.302652729911275 * 2 / 12 / 3**0.5)
    assert W.ratio_interval([10, 20], [1, 2]) == (10.0, None, None), "below 3 units: the ratio, no spread"
    assert W.ratio_interval([], []) == (None, None, None)
