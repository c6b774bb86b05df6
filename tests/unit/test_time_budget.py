"""sweep --time-budget, the executor's side: which starts still fit the budget (bench.run.executor.SweepContext)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from bench.run.executor import MIN_POINT_MARGIN_S, SweepContext


def _ctx(left_s: float | None, window_s: float = 15.0, ready_s=()) -> SweepContext:
    plan = SimpleNamespace(profile=SimpleNamespace(run=SimpleNamespace(window_s=window_s)))
    deadline = None if left_s is None else time.perf_counter() + left_s
    return SweepContext(store=None, progress=None, plan=plan, deadline=deadline, ready_s=list(ready_s))  # type: ignore[arg-type]


def test_no_budget_always_fits():
    assert _ctx(None).can_start(server=True) and _ctx(None).can_start(server=False)


def test_a_point_needs_its_minimum_window_and_a_margin():
    need = 15.0 + MIN_POINT_MARGIN_S
    assert _ctx(need + 5).can_start(server=False)
    assert not _ctx(need - 5).can_start(server=False)


def test_a_server_also_needs_the_longest_start_seen_else_a_minute():
    need = 15.0 + MIN_POINT_MARGIN_S
    assert not _ctx(need + 30).can_start(server=True), "no start known: 60 s assumed"
    assert _ctx(need + 65).can_start(server=True)
    slow = _ctx(need + 100, ready_s=[40.0, 150.0])
    assert not slow.can_start(server=True) and slow.can_start(server=False)
