"""A known slowdown for testing verdicts (issue 20): with BENCH_STEP_DELAY_MS=X in a server's environment, every
engine step that ran the model is followed by X ms of sleep in the EngineCore process (`EngineCore.step` and
`step_with_batch_queue` wrapped). Decode gets slower by a fixed, known amount per step, with no other change:
the candidate of an A/B that the gate must catch (`bench ab --candidate-env BENCH_STEP_DELAY_MS=X`).

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


def delayed(fn: Any, seconds: float) -> Any:
    """`fn` (a step returning (outputs, model_executed)), then a sleep when the model ran."""

    @functools.wraps(fn)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        if isinstance(result, tuple) and len(result) == 2 and result[1]:
            time.sleep(seconds)
        return result

    setattr(step, MARK, seconds)
    return step


def install(seconds: float) -> None:
    """Wrap the EngineCore's step functions in this process (idempotent; nothing when seconds is 0)."""
    if _INSTALLED or seconds <= 0:
        return
    from vllm.v1.engine import core

    for name in ("step", "step_with_batch_queue"):
        fn = getattr(core.EngineCore, name, None)
        if fn is not None and not hasattr(fn, MARK):
            _INSTALLED.append((core.EngineCore, name, fn))
            setattr(core.EngineCore, name, delayed(fn, seconds))
    logger.info(
        "bench step delay: %.1f ms after every engine step that ran the model (pid %d)", seconds * 1e3, os.getpid()
    )


def uninstall() -> None:
    for owner, name, fn in _INSTALLED:
        setattr(owner, name, fn)
    _INSTALLED.clear()
