"""The known slowdown (bench/profiling/step_delay.py) and the A/B environments that carry it (bench/commands/ab.py)."""

from __future__ import annotations

import pytest

from bench.commands.ab import parse_env, parse_variables
from bench.core.errors import BenchError
from bench.profiling import step_delay as sd
from tests.helpers.extras import ENGINE, need


def test_delay_from_env():
    assert sd.delay_from_env({}) == 0.0
    assert sd.delay_from_env({sd.ENV: "30"}) == pytest.approx(0.030)
    for bad in ("-1", "x"):
        with pytest.raises(ValueError, match="milliseconds"):
            sd.delay_from_env({sd.ENV: bad})


def test_spin_waits_at_least_its_time_without_sleeping(monkeypatch):
    monkeypatch.setattr(sd.time, "sleep", lambda s: pytest.fail("the delay must not sleep"))
    t0 = sd.time.perf_counter()
    sd.spin(0.002)
    assert 0.002 <= sd.time.perf_counter() - t0 < 0.2


def test_waits_only_after_a_step_that_ran_the_model(monkeypatch):
    slept = []
    monkeypatch.setattr(sd, "spin", slept.append)

    class Core:
        def __init__(self, ran):
            self.ran = ran

        def step(self):
            return {}, self.ran

    step = sd.delayed(Core.step, 0.03)
    assert step(Core(True)) == ({}, True) and slept == [0.03]
    assert step(Core(False)) == ({}, False) and slept == [0.03]  # an idle step: no wait


def test_with_a_batch_queue_waits_once_a_step_when_a_batch_finishes(monkeypatch):
    """Async scheduling: one call schedules a batch and returns (None, True), the next takes the finished one off
    the queue (outputs, scheduled another?): one wait a step, on the second."""
    waited = []
    monkeypatch.setattr(sd, "spin", waited.append)
    results = iter([(None, True), ({0: "out"}, True), (None, True), ({}, False)])
    step = sd.delayed(lambda self: next(results), 0.001, sd.finished_a_batch)
    assert [step(None) for _ in range(4)] and waited == [0.001, 0.001]


def test_installs_on_vllms_engine_core_and_uninstalls():
    core = need("vllm.v1.engine.core", ENGINE)
    before = core.EngineCore.step
    sd.install(0.01)
    try:
        assert getattr(core.EngineCore.step, sd.MARK) == 0.01
        sd.install(0.02)  # idempotent
        assert getattr(core.EngineCore.step, sd.MARK) == 0.01
    finally:
        sd.uninstall()
    assert core.EngineCore.step is before


def test_ab_environments_carry_variables(tmp_path):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("")
    env = parse_env(f"{tmp_path}:patched", ["BENCH_STEP_DELAY_MS=30", "A=b=c"])
    assert env.variables == (("A", "b=c"), ("BENCH_STEP_DELAY_MS", "30")) and env.patch == "patched"
    assert env.label().endswith(":patched A=b=c BENCH_STEP_DELAY_MS=30")
    assert parse_env(str(tmp_path)).variables == ()
    with pytest.raises(BenchError, match="KEY=VALUE"):
        parse_variables(["novalue"])
