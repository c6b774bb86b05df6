"""The removed DCP emulation, as its committed records are still read (bench/models/dcp_emulation.py): the widened rank's
arithmetic (heads, the extra projection bytes the roofline counts), and the refusals that point new work at the
loopback DCP group (axes.dcp_size)."""

from __future__ import annotations

import pytest

from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.models import dcp_emulation as D
from bench.models import kimi_rank as K

H200 = Machine("gpu", 1, "sm90", "NVIDIA H200", gpu_memory_gib=143771 / 1024)


def _profile(target="kimi-rank:layers=4", **axes) -> dict:
    return {
        "name": "e",
        "model": {"target": target, "draft": "kimi-rank", "weights": "dummy"},
        "server": {"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.85, "max_model_len": 4096},
        "axes": {
            "draft_attention_backend": ["FLASHMLA"],
            "draft_kv_cache_dtype": ["fp8"],
            "num_speculative_tokens": [0, 3],
            "shapes": ["1x1024x256"],
        }
        | axes,
        "acceptance": {"mode": "synthetic", "rates": [0.65, 0.4, 0.25]},
    }


# --- arithmetic and configs ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("tp", "dcp"), [(8, 8), (8, 2), (4, 4), (16, 8)])
def test_emulating_configs_change_only_the_heads(tp, dcp):
    """A DCP-N rank's decode kernel sees 64/TP x N heads (vLLM all-gathers the query heads over the DCP group);
    the generated configs change num_attention_heads and nothing else."""
    plain, emulated = K.RankSpec(tp=tp), K.RankSpec(tp=tp, dcp=dcp)
    for make in (K.target_config, K.draft_config):
        a, b = make(plain), make(emulated)
        assert b["num_attention_heads"] == b["num_key_value_heads"] == 64 // tp * dcp
        assert {k: v for k, v in a.items() if "heads" not in k} == {k: v for k, v in b.items() if "heads" not in k}
    assert emulated.heads == 64 // tp and emulated.attention_heads == 64 // tp * dcp
    assert K.estimate(emulated).target_kv_per_token == K.estimate(plain).target_kv_per_token  # latent KV: no heads


def test_spec_names_and_refusals():
    assert K.parse_spec("kimi-rank:dcp=8") == K.RankSpec(dcp=8)
    assert K.RankSpec(dcp=8).name == "kimi-rank:tp=8,layers=61,experts=int4,dcp=8"
    assert K.RankSpec().name == "kimi-rank:tp=8,layers=61,experts=int4"  # no dcp key for a plain rank
    with pytest.raises(BenchError, match="must divide tp"):
        K.RankSpec(tp=8, dcp=3)


def test_extra_projection_bytes_by_hand():
    """At TP8 x DCP8 the emulated rank's MLA projections are sized for 64 heads instead of 8: q_b (1536 x heads x
    192), kv_b (512 x heads x 256) and o_proj (heads x 128 x 7168) grow by 56 heads, in bf16, in every target
    layer and (per draft pass) in the draft's layer."""
    per_head = 1536 * 192 + 512 * 256 + 128 * 7168
    extra_heads = 64 - 8
    target = 61 * extra_heads * per_head * 2
    assert D.excess_projection_bytes("kimi-rank:dcp=8", 0) == pytest.approx(target)
    assert D.excess_projection_bytes("kimi-rank:dcp=8", 3) == pytest.approx(target + 3 * extra_heads * per_head * 2)
    assert D.excess_projection_bytes("kimi-rank", 3) == 0.0
    assert 9.1e9 < D.excess_projection_bytes("kimi-rank:dcp=8", 0) < 9.3e9


def test_the_emulated_rank_still_fits_an_h200():
    est = K.estimate(K.RankSpec(dcp=8))
    assert est.weights - K.estimate(K.RankSpec()).weights == pytest.approx(
        D.excess_projection_bytes("kimi-rank:dcp=8", 1), rel=1e-9
    )
    assert K.fit_problem(K.RankSpec(dcp=8), 143771 * 1024**2, utilization=0.85, max_model_len=34816) is None


# --- the emulation is gone: the loopback takes its place ---------------------------------------------------------


def test_profile_refuses_the_removed_axis_and_says_what_replaced_it():
    with pytest.raises(BenchError, match="dcp_emulated was removed.*axes.dcp_size"):
        parse_profile(_profile(dcp_emulated=[1, 8]), "gpu", "x.toml")


def test_plan_refuses_a_widened_target_and_runs_dcp_on_the_loopback():
    widened = make_plan(parse_profile(_profile(target="kimi-rank:layers=4,dcp=8"), "gpu", "x.toml"), H200)
    assert not widened.runnable and all("removed DCP emulation" in p.skip_reason for p in widened.skipped)
    plan = make_plan(parse_profile(_profile(dcp_size=[1, 8]), "gpu", "x.toml"), H200)
    labels = sorted(e.label() for e, _ in plan.groups)
    assert labels == [
        "FLASHMLA/fp8 dcp1 k3",
        "FLASHMLA/fp8 dcp8-loopback k3",
        "no-spec dcp1 k0",
        "no-spec dcp8-loopback k0",
    ]
    assert all(e.dcp_loopback == (e.dcp_size == 8) for e, _ in plan.groups)
    assert all(K.parse_spec(e.target).dcp == 1 for e, _ in plan.groups)  # the rank's own heads, never widened
    tp3 = make_plan(parse_profile(_profile(dcp_size=[3]), "gpu", "x.toml"), H200)
    assert all("does not divide the deployment's tensor_parallel_size 8" in p.skip_reason for p in tp3.skipped)
