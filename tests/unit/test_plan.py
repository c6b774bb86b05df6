import pytest

from bench.config.plan import make_plan
from bench.config.profile import load_profile, parse_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine

H200 = Machine("gpu", 8, "sm90", "NVIDIA H200")
CPU = Machine("cpu")


def test_kimi_profile_plans_fully_for_an_h200_node():
    plan = make_plan(load_profile("kimi-k2.6-eagle3-tp8", "gpu"), H200)
    counts = plan.counts()
    # 5 random shapes + 3 text workloads x 2 temperatures per engine config
    assert counts["points"] == 3 * 2 * 4 * (5 + 7) and counts["servers"] == 24 and counts["skipped"] == 0
    for engine, points in plan.groups:  # one server serves every shape and workload of its engine config
        assert len(points) == 5 + 7 and {p.engine.id for p in points} == {engine.id}


def test_constraints_skip_with_reasons():
    data = {
        "name": "c",
        "server": {"tensor_parallel_size": 4},
        "axes": {
            "draft_attention_backend": ["TRITON_MLA", "FLASH_ATTN_MLA", "FLASHINFER_MLA"],
            "draft_kv_cache_dtype": ["fp8"],
            "dcp_size": [1, 3],
            "shapes": ["1x8x8"],
        },
    }
    plan = make_plan(parse_profile(data, "gpu", "c.toml"), Machine("gpu", 2, "sm90"))
    reasons = {(p.engine.draft_attention_backend, p.engine.dcp_size): p.skip_reason for p in plan.skipped}
    assert reasons[("TRITON_MLA", 3)] == "dcp_size 3 does not divide tensor_parallel_size 4"
    assert reasons[("TRITON_MLA", 1)] == "needs 4 GPUs, the machine has 2"
    plan8 = make_plan(parse_profile(data, "gpu", "c.toml"), Machine("gpu", 8, "sm90"))
    reasons8 = {(p.engine.draft_attention_backend, p.engine.dcp_size): p.skip_reason for p in plan8.skipped}
    assert reasons8[("FLASH_ATTN_MLA", 1)] == "backend FLASH_ATTN_MLA has no fp8 KV cache"
    assert reasons8[("FLASHINFER_MLA", 1)] == "backend FLASHINFER_MLA needs sm100/sm103, the GPU is sm90"
    assert [p.engine.draft_attention_backend for p in plan8.runnable] == ["TRITON_MLA"]


def test_cpu_constraints():
    data = {
        "name": "c",
        "axes": {
            "draft_attention_backend": ["CPU_MLA", "TRITON_MLA"],
            "draft_kv_cache_dtype": ["auto", "fp8"],
            "shapes": ["1x8x8"],
        },
        "acceptance": {"mode": "real"},
    }
    plan = make_plan(parse_profile(data, "cpu", "c.toml"), CPU)
    assert [(p.engine.draft_attention_backend, p.engine.draft_kv_cache_dtype) for p in plan.runnable] == [
        ("CPU_MLA", "auto")
    ]
    assert {p.skip_reason.split(" (")[0] for p in plan.skipped} == {
        "CPU has no fp8 KV cache",
        "backend TRITON_MLA does not run on CPU",
    }
    synthetic = dict(data, acceptance={"mode": "synthetic", "mean_length": 2.5})
    assert (
        "synthetic acceptance not supported"
        in make_plan(parse_profile(synthetic, "cpu", "c.toml"), CPU).skipped[0].skip_reason
    )


def test_point_ids_are_stable_and_config_sensitive():
    a = make_plan(load_profile("tiny", "gpu"), H200)
    b = make_plan(load_profile("tiny", "gpu"), H200)
    assert [p.id for p in a.runnable] == [p.id for p in b.runnable]
    assert len({p.id for p in a.runnable}) == len(a.runnable)
    assert a.runnable[0].id == "99d6159b2f0e"  # a stable hash: changing it orphans stored results


def test_synthetic_rates_fill_to_k():
    data = {
        "name": "s",
        "axes": {"num_speculative_tokens": [5], "shapes": ["1x8x8"]},
        "acceptance": {"mode": "synthetic", "rates": [0.65, 0.40, 0.25]},
    }
    ((engine, _),) = make_plan(parse_profile(data, "gpu", "s.toml"), H200).groups
    spec = engine.speculative_config("/d")
    assert spec["synthetic_acceptance_rates"] == [0.65, 0.40, 0.25, 0.25, 0.25]
    assert spec["rejection_sample_method"] == "synthetic" and spec["num_speculative_tokens"] == 5


def test_dcp_profile_needs_two_gpus_and_select_keeps_only_the_asked_points():
    two = make_plan(load_profile("tiny-dcp", "gpu"), Machine("gpu", 2, "sm90"))
    assert two.counts() == {"points": 16, "runnable": 16, "skipped": 0, "servers": 8}
    assert {p.engine.dcp_size for p in two.runnable} == {1, 2}
    one = make_plan(load_profile("tiny-dcp", "gpu"), Machine("gpu", 1, "sm90"))
    assert one.counts()["runnable"] == 0 and {p.skip_reason for p in one.skipped} == {"needs 2 GPUs, the machine has 1"}
    target = next(
        p
        for p in two.runnable
        if p.engine.dcp_size == 2
        and p.engine.draft_attention_backend == "TRITON_MLA"
        and p.engine.draft_kv_cache_dtype == "auto"
        and p.shape.concurrency == 8
    )
    picked = two.select([target.id[:6]])
    assert [p.id for p in picked.runnable] == [target.id] and picked.counts()["servers"] == 1
    both = two.select([target.id, two.runnable[-1].id])
    assert len(both.runnable) == 2 and len(two.runnable) == 16  # the original plan is left as it was
    assert [p.id for p in one.select([target.id]).skipped] == [target.id]
    with pytest.raises(BenchError, match="no point 'zzz' in tiny-dcp; points: .*TRITON_MLA/auto dcp2"):
        two.select(["zzz"])
