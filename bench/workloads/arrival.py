"""When requests are sent: fixed concurrency, or a request rate with gamma burstiness, optional ramp-up, and a cap
on requests in flight, with the semantics of vLLM's `vllm bench serve` so the two can be set side by side.

The semantics (read in vllm/benchmarks/serve.py, `get_request` and `benchmark`, vLLM 0.32):
- request i's gap before it is drawn from Gamma(shape=burstiness, scale=1 / (rate_i * burstiness)): mean
  1 / rate_i, burstiness 1 = exponential (Poisson arrivals), < 1 burstier, inf = constant gaps of 1 / rate_i;
  the first request has a gap too (it is not sent at 0). A rate of inf gives gaps of 0: all at once.
- without ramp-up the cumulative offsets are rescaled so the last one is exactly n / rate (vLLM does this to
  remove the run-to-run spread of the sum of the gaps).
- ramp-up: rate_i goes from start to end over the requests, linearly (start + (end - start) * p) or
  exponentially (start * (end / start) ** p), p = i / (n - 1); no rescaling. A ramp-up replaces the rate.
- max concurrency: a request that is due waits for a free slot (a FIFO semaphore); its arrival is when it was
  due, its start when it got the slot, so the client-side queueing is visible.
- the offsets are absolute from the start of the run: a late send does not push the later ones back.

Fixed concurrency C (the suite's original load) is rate inf with max concurrency C. The draws come from a seeded
numpy Generator, so a schedule is reproducible, but it is not the same sequence of draws as vLLM's (vLLM draws
from numpy's global state after its dataset sampling has used it).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np
from pydantic import Field, model_validator

from bench.core.schema import Strict

INF = math.inf
T = TypeVar("T")


class RampUp(Strict):
    """The request rate grows from start_rps to end_rps over the run (vLLM: --ramp-up-strategy/-start-rps/-end-rps).
    A start of 0 is refused: vLLM's own check allows it for linear, then its generator asserts a positive rate."""

    strategy: Literal["linear", "exponential"]
    start_rps: float = Field(gt=0, allow_inf_nan=False)
    end_rps: float = Field(gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _rising(self):
        if self.start_rps > self.end_rps:
            raise ValueError("ramp-up start_rps must not exceed end_rps (as in vLLM)")
        return self


class Arrival(Strict):
    """How a workload's requests arrive. Defaults: all at once (rate inf), no cap."""

    request_rate: float = Field(default=INF, gt=0)  # requests/s; inf = no pacing
    burstiness: float = Field(default=1.0, gt=0)  # gamma shape: 1 = Poisson, inf = constant gaps
    ramp_up: RampUp | None = None
    max_concurrency: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_rate(self):
        if math.isnan(self.request_rate) or math.isnan(self.burstiness):
            raise ValueError("request_rate and burstiness must be numbers")
        if self.ramp_up is not None and self.request_rate != INF:
            raise ValueError("ramp_up sets the rate: leave request_rate out (as vLLM's --ramp-up-strategy)")
        return self

    @classmethod
    def fixed_concurrency(cls, concurrency: int) -> Arrival:
        """The suite's original load: every request due at once, `concurrency` in flight."""
        return cls(max_concurrency=concurrency)

    @property
    def paced(self) -> bool:
        return self.ramp_up is not None or self.request_rate != INF

    @property
    def label(self) -> str:
        """Short and stable, for point ids and report rows: `c8`, `r4-b1-c16`, `ramp-linear-1-8`."""
        cap = f"c{self.max_concurrency}" if self.max_concurrency else "cinf"
        if self.ramp_up is not None:
            r = self.ramp_up
            return f"ramp-{r.strategy}-{_num(r.start_rps)}-{_num(r.end_rps)}-b{_num(self.burstiness)}-{cap}"
        if self.request_rate == INF:
            return cap
        return f"r{_num(self.request_rate)}-b{_num(self.burstiness)}-{cap}"

    def vllm_bench_serve_args(self) -> list[str]:
        """The `vllm bench serve` arguments that ask for the same arrivals (vLLM takes integer ramp-up rates)."""
        args = ["--request-rate", _num(self.request_rate), "--burstiness", _num(self.burstiness)]
        if self.ramp_up is not None:
            r = self.ramp_up
            args = ["--burstiness", _num(self.burstiness), "--ramp-up-strategy", r.strategy]
            args += ["--ramp-up-start-rps", _num(r.start_rps), "--ramp-up-end-rps", _num(r.end_rps)]
        if self.max_concurrency is not None:
            args += ["--max-concurrency", str(self.max_concurrency)]
        return args


def _num(x: float) -> str:
    return "inf" if x == INF else f"{x:g}"


@dataclass(frozen=True)
class Schedule:
    """When each of n requests is due, in seconds from the start of the run (non-decreasing), the rate each was
    drawn at (inf: unpaced), and the cap on requests in flight (None: no cap)."""

    offsets: tuple[float, ...]
    rates: tuple[float, ...]
    max_concurrency: int | None

    def __len__(self) -> int:
        return len(self.offsets)


def request_rates(arrival: Arrival, n: int) -> np.ndarray:
    """The rate request i is drawn at: the fixed rate, or the ramp-up's rate at progress i / (n - 1)."""
    if arrival.ramp_up is None:
        return np.full(n, arrival.request_rate)
    r = arrival.ramp_up
    progress = np.arange(n) / max(n - 1, 1)
    if r.strategy == "linear":
        return r.start_rps + (r.end_rps - r.start_rps) * progress
    return r.start_rps * (r.end_rps / r.start_rps) ** progress


def schedule(arrival: Arrival, n: int, seed: int) -> Schedule:
    """The seeded send schedule of n requests (same arrival, n and seed: same offsets)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    rates = request_rates(arrival, n)
    if not arrival.paced:
        gaps = np.zeros(n)
    elif arrival.burstiness == INF:
        gaps = 1.0 / rates
    else:
        b = arrival.burstiness
        gaps = np.random.default_rng(seed).gamma(shape=b, scale=1.0 / (rates * b), size=n)
    offsets = np.cumsum(gaps)
    if arrival.ramp_up is None and n and offsets[-1] > 0:
        offsets = offsets * ((n / arrival.request_rate) / offsets[-1])
    return Schedule(tuple(float(x) for x in offsets), tuple(float(x) for x in rates), arrival.max_concurrency)


@dataclass(frozen=True)
class Paced(Generic[T]):
    """One request as the pacer ran it: when it was due (offset from the start), when it arrived (it was due and
    the pacer woke) and when it started (it had a slot under the cap), on the pacer's clock; and what `send`
    returned."""

    index: int
    due_s: float
    arrival_time: float
    start_time: float
    result: T


async def pace(
    plan: Schedule,
    send: Callable[[int], Awaitable[T]],
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Paced[T]]:
    """Call `send(i)` for every request of `plan`: each when it is due, at most `plan.max_concurrency` at a time
    (later ones wait in arrival order). Returns one Paced per request, in index order. If a `send` raises, the
    others are cancelled and the error propagates (a TaskGroup): `send` should record its own request errors."""
    slots = asyncio.Semaphore(plan.max_concurrency) if plan.max_concurrency else None
    results: list[Paced[T] | None] = [None] * len(plan)
    start = clock()

    async def one(i: int, arrived: float) -> None:
        if slots is None:
            results[i] = Paced(i, plan.offsets[i], arrived, clock(), await send(i))
            return
        async with slots:
            started = clock()
            results[i] = Paced(i, plan.offsets[i], arrived, started, await send(i))

    async with asyncio.TaskGroup() as group:
        for i, due in enumerate(plan.offsets):
            delay = start + due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(i, clock()))
    return [r for r in results if r is not None]
