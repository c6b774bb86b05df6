"""Arrival schedules and the pacer: the distributions vLLM's `bench serve` draws from (checked with KS tests that
can also reject), its rescaling and ramp-up, determinism, and pacing under a cap on a virtual clock."""

import asyncio
import math
import time

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from bench.workloads.arrival import Arrival, RampUp, pace, request_rates, schedule

INF = math.inf


def gaps(offsets):
    return np.diff(np.concatenate([[0.0], offsets]))


def test_poisson_gaps_match_the_asked_rate_and_not_another():
    rate, n = 5.0, 2000
    g = gaps(schedule(Arrival(request_rate=rate), n, seed=1).offsets)
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue > 0.01
    assert stats.kstest(g, "expon", args=(0, 1 / (1.3 * rate))).pvalue < 1e-6  # the test can tell a 30% error


def test_gamma_burstiness_has_the_asked_shape():
    rate, b, n = 2.0, 0.5, 2000
    g = gaps(schedule(Arrival(request_rate=rate, burstiness=b), n, seed=2).offsets)
    assert stats.kstest(g, "gamma", args=(b, 0, 1 / (rate * b))).pvalue > 0.01
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue < 1e-6  # burstier than Poisson, and seen so
    assert np.std(g) / np.mean(g) == pytest.approx(1 / math.sqrt(b), rel=0.15)  # CV of a gamma: 1/sqrt(shape)


def test_without_ramp_up_the_last_request_is_due_at_n_over_rate():
    """vLLM rescales the drawn offsets so that the run lasts n / rate exactly."""
    for seed in range(3):
        s = schedule(Arrival(request_rate=8.0), 100, seed)
        assert s.offsets[-1] == pytest.approx(100 / 8.0)
        assert s.offsets[0] > 0  # the first request has its own gap, as in vLLM
        assert all(b >= a for a, b in zip(s.offsets, s.offsets[1:]))


def test_infinite_burstiness_is_a_constant_rate():
    s = schedule(Arrival(request_rate=4.0, burstiness=INF), 10, seed=0)
    assert np.allclose(gaps(s.offsets), 0.25)


def test_fixed_concurrency_is_everything_due_at_once_under_a_cap():
    arrival = Arrival.fixed_concurrency(4)
    s = schedule(arrival, 6, seed=0)
    assert s.offsets == (0.0,) * 6 and s.max_concurrency == 4
    assert not arrival.paced and arrival.label == "c4"
    assert arrival.vllm_bench_serve_args() == ["--request-rate", "inf", "--burstiness", "1", "--max-concurrency", "4"]


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_rates_rise_from_start_to_end(strategy):
    arrival = Arrival(ramp_up=RampUp(strategy=strategy, start_rps=1, end_rps=16), burstiness=INF)
    rates = request_rates(arrival, 50)
    assert rates[0] == pytest.approx(1) and rates[-1] == pytest.approx(16)
    assert np.all(np.diff(rates) > 0)
    g = gaps(schedule(arrival, 50, seed=0).offsets)
    assert np.all(np.diff(g) < 0)  # constant-rate gaps shrink as the rate rises
    assert np.allclose(g, 1 / rates)  # no rescaling under ramp-up (as in vLLM)
    if strategy == "exponential":
        assert np.allclose(rates[1:] / rates[:-1], rates[1] / rates[0])  # a constant ratio
    else:
        assert np.allclose(np.diff(rates), rates[1] - rates[0])


def test_poisson_ramp_up_offsets_are_monotone_and_seeded():
    arrival = Arrival(ramp_up=RampUp(strategy="linear", start_rps=2, end_rps=20))
    a, b = schedule(arrival, 200, seed=7), schedule(arrival, 200, seed=7)
    assert a == b and all(y >= x for x, y in zip(a.offsets, a.offsets[1:]))
    assert a.rates == tuple(request_rates(arrival, 200))
    assert schedule(arrival, 200, seed=8).offsets != a.offsets


def test_same_seed_same_schedule_other_seed_other_schedule():
    arrival = Arrival(request_rate=3.0, burstiness=0.7, max_concurrency=8)
    assert schedule(arrival, 64, seed=3) == schedule(arrival, 64, seed=3)
    assert schedule(arrival, 64, seed=3).offsets != schedule(arrival, 64, seed=4).offsets
    assert schedule(arrival, 0, seed=3).offsets == ()


@pytest.mark.parametrize(
    "fields",
    [
        {"request_rate": 0},
        {"burstiness": 0},
        {"burstiness": -1},
        {"max_concurrency": 0},
        {"request_rate": 4, "ramp_up": {"strategy": "linear", "start_rps": 1, "end_rps": 2}},
        {"ramp_up": {"strategy": "linear", "start_rps": 0, "end_rps": 2}},
        {"ramp_up": {"strategy": "linear", "start_rps": 3, "end_rps": 2}},
        {"ramp_up": {"strategy": "cubic", "start_rps": 1, "end_rps": 2}},
        {"request_rate": float("nan")},
        {"rate": 4},
    ],
)
def test_impossible_arrivals_are_refused(fields):
    with pytest.raises(ValidationError):
        Arrival(**fields)


def test_labels_and_vllm_arguments():
    a = Arrival(request_rate=4, max_concurrency=16)
    assert a.label == "r4-b1-c16"
    assert a.vllm_bench_serve_args() == ["--request-rate", "4", "--burstiness", "1", "--max-concurrency", "16"]
    ramp = Arrival(ramp_up={"strategy": "exponential", "start_rps": 1, "end_rps": 8}, burstiness=INF)
    assert ramp.label == "ramp-exponential-1-8-binf-cinf"
    assert "--request-rate" not in ramp.vllm_bench_serve_args()
    assert ramp.vllm_bench_serve_args()[-4:] == ["--ramp-up-start-rps", "1", "--ramp-up-end-rps", "8"]


def run_virtual(coro_fn):
    """Run a coroutine on an event loop whose clock is virtual: waiting advances the clock instead of sleeping,
    so timing logic is checked exactly and fast (the pacer gets `clock=loop.time`)."""
    loop = asyncio.new_event_loop()
    now = [0.0]
    loop.time = lambda: now[0]  # type: ignore[method-assign]
    select = loop._selector.select  # type: ignore[attr-defined]

    def virtual_select(timeout=None):
        if timeout:
            now[0] += timeout
        return select(0)

    loop._selector.select = virtual_select  # type: ignore[attr-defined]
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


def test_pacer_sends_on_schedule_and_queues_under_the_cap():
    plan = schedule(Arrival(request_rate=10.0, burstiness=INF, max_concurrency=2), 6, seed=0)  # due 0.1 .. 0.6

    async def main(loop):
        in_flight, peak = [0], [0]

        async def send(i):
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            await asyncio.sleep(0.25)  # each request takes 0.25 s: a cap of 2 cannot keep up with 10/s
            in_flight[0] -= 1
            return i * 10

        return await pace(plan, send, clock=loop.time), peak[0]

    done, peak = run_virtual(main)
    assert peak == 2
    assert [p.result for p in done] == [0, 10, 20, 30, 40, 50]
    assert [round(p.arrival_time, 6) for p in done] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # due times kept
    assert [round(p.start_time, 6) for p in done] == [0.1, 0.2, 0.35, 0.45, 0.6, 0.7]  # waited for a slot
    assert all(p.start_time >= p.arrival_time for p in done)


def test_pacer_without_cap_starts_each_request_when_due():
    plan = schedule(Arrival(request_rate=4.0), 20, seed=5)

    async def main(loop):
        async def send(i):
            await asyncio.sleep(10.0)  # long requests never delay later ones without a cap
            return i

        return await pace(plan, send, clock=loop.time)

    done = run_virtual(main)
    assert [p.start_time for p in done] == pytest.approx(list(plan.offsets), abs=1e-9)


def test_pacer_error_cancels_the_rest():
    plan = schedule(Arrival(request_rate=1.0, burstiness=INF, max_concurrency=2), 4, seed=0)  # due 1, 2, 3, 4 s
    started, finished = [], []

    async def main(loop):
        async def send(i):
            started.append(i)
            await asyncio.sleep(1.5)
            if i == 0:
                raise RuntimeError("server died")
            finished.append(i)
            return i

        return await pace(plan, send, clock=loop.time)

    with pytest.raises(ExceptionGroup) as info:
        run_virtual(main)
    assert info.group_contains(RuntimeError, match="server died")
    assert started == [0, 1] and finished == []  # request 1 in flight was cancelled, 2 and 3 never sent


def test_measured_poisson_arrivals_on_the_real_clock_pass_a_ks_test():
    """What a load generator sees: the pacer's real arrival times at 40 requests/s, against the asked rate."""
    rate, n = 40.0, 160
    plan = schedule(Arrival(request_rate=rate), n, seed=11)

    async def send(i):
        return time.perf_counter()

    done = asyncio.run(pace(plan, send))
    measured = np.diff([p.arrival_time for p in done])
    assert stats.kstest(measured, "expon", args=(0, 1 / rate)).pvalue > 0.01
    lateness = np.array([p.arrival_time - done[0].arrival_time for p in done]) - (
        np.array(plan.offsets) - plan.offsets[0]
    )
    assert np.median(np.abs(lateness)) < 0.005  # absolute targets: lateness does not pile up
