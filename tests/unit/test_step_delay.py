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


def test_sleeps_only_after_a_step_that_ran_the_model(monkeypatch):
    slept = []
    monkeypatch.setattr(sd.time, "sleep", slept.append)

    class Core:
        def __init__(self, ran):
            self.ran = ran

        def step(self):
            return {}, self.ran

    step = sd.delayed(Core.step, 0.03)
    assert step(Core(True)) == ({}, True) and slept == [0.03]
    assert step(Core(False)) == ({}, False) and slept == [0.03]  # an idle step: no sleep


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
