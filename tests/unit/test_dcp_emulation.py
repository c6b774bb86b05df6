"""DCP emulated on one GPU (bench/dcp_emulation.py): the per-rank arithmetic (context, heads, the extra projection
bytes), the generated configs, the profile's checks, and the "emulated" label in the plan, the dry run, the point
records and the report."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bench import dcp_emulation as D
from bench import kimi_rank as K
from bench.errors import BenchError
from bench.hardware import Machine
from bench.launch import describe_plan
from bench.plan import make_plan
from bench.profile import parse_profile
from bench.report.build import build_report
from bench.report.markdown import summary_markdown
from bench.report.tables import point_row, points_table, provenance
from bench.store import SweepStore

H200 = Machine("gpu", 1, "sm90", "NVIDIA H200", gpu_memory_gib=143771 / 1024)


def _profile(dcp_emulated=(1, 8), target="kimi-rank:layers=4", **axes) -> dict:
    return {
        "name": "e",
        "model": {"target": target, "draft": "kimi-rank", "weights": "dummy"},
        "server": {"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.85, "max_model_len": 4096},
        "axes": {
            "draft_attention_backend": ["FLASHMLA"],
            "draft_kv_cache_dtype": ["fp8"],
            "num_speculative_tokens": [0, 3],
            "shapes": ["1x1024x256", "8x1000x64"],
            "dcp_emulated": list(dcp_emulated),
        }
        | axes,
        "acceptance": {"mode": "synthetic", "rates": [0.65, 0.4, 0.25]},
    }


# --- arithmetic and configs ----------------------------------------------------------------------------------


def test_rank_share_of_the_prompt_is_rank_zeros():
    assert D.rank_input_len(32768, 8) == 4096
    assert D.rank_input_len(1000, 8) == 125 and D.rank_input_len(1001, 8) == 126  # ceil: rank 0 holds the most
    assert D.rank_input_len(5, 8) == 1 and D.rank_input_len(1024, 1) == 1024


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
    assert D.emulated_target("kimi-rank:layers=4", 2) == "kimi-rank:tp=8,layers=4,experts=int4,dcp=2"
    assert D.emulated_target("/some/model", 1) == "/some/model"
    with pytest.raises(BenchError, match="kimi-rank"):
        D.emulated_target("/some/model", 2)
    assert D.dcp_emulated("kimi-rank:dcp=4") == 4 and D.dcp_emulated("tiny") == 1


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


# --- profile and plan ----------------------------------------------------------------------------------------


def test_profile_refuses_what_cannot_be_emulated():
    with pytest.raises(BenchError, match="kimi-rank target"):
        parse_profile({"name": "x", "axes": {"dcp_emulated": [1, 2]}}, "gpu", "x.toml")
    with pytest.raises(BenchError, match="dcp_size"):
        parse_profile(_profile(dcp_size=[1, 2]), "gpu", "x.toml")
    with pytest.raises(BenchError, match="divide"):
        parse_profile(_profile(dcp_emulated=[1, 3]), "gpu", "x.toml")
    with pytest.raises(BenchError, match=">= 1"):
        parse_profile(_profile(dcp_emulated=[0]), "gpu", "x.toml")


def test_plan_labels_emulated_engines_and_points():
    plan = make_plan(parse_profile(_profile(), "gpu", "e.toml"), H200)
    assert not plan.skipped
    labels = [e.label() for e, _ in plan.groups]
    assert labels == [
        "no-spec dcp1 k0",
        "no-spec dcp8-emulated k0",
        "FLASHMLA/fp8 dcp1 k3",
        "FLASHMLA/fp8 dcp8-emulated k3",
    ]
    emulated = [p for e, pts in plan.groups if e.dcp_emulated == 8 for p in pts]
    assert {p.shape.input_len for p in emulated} == {128, 125}  # 1024 / 8, ceil(1000 / 8)
    assert all(p.engine.dcp_size == 1 and K.parse_spec(p.engine.target).dcp == 8 for p in emulated)
    point = next(p for p in emulated if p.shape.concurrency == 8)
    assert point.label == "8x125x64 [DCP8 rank of 8x1000x64, emulated]"
    record = point.to_dict()["emulation"]
    assert record["label"] == "emulated" and record["full_shape"]["input_len"] == 1000
    assert (record["rank_input_len"], record["rank_heads"], record["kernel_heads"]) == (125, 8, 64)
    assert record["not_modelled"] == list(D.NOT_MODELLED)


def test_the_emulated_axis_keeps_the_plain_points_ids():
    """Adding dcp_emulated = [1, N] to a profile adds points; the plain rank's point ids stay those of before."""
    without = make_plan(parse_profile(_profile(dcp_emulated=[1]), "gpu", "e.toml"), H200)
    with_it = make_plan(parse_profile(_profile(), "gpu", "e.toml"), H200)
    plain = {p.id for p in with_it.runnable if p.emulation is None}
    assert plain == {p.id for p in without.runnable} and len(with_it.runnable) == 2 * len(without.runnable)
    assert all("emulation" not in p.to_dict() for p in without.runnable)


def test_dry_run_shows_the_emulation_and_what_it_leaves_out():
    plan = make_plan(parse_profile(_profile(), "gpu", "e.toml"), H200)
    text = describe_plan(plan)
    assert "[no-spec dcp8-emulated k0]" in text and "[DCP8 rank of 1x1024x256, emulated]" in text
    assert "emulated: one DCP8 rank on one GPU: 64 query heads in the decode kernel (rank's 8 x 8)" in text
    assert "not modelled: all-gather, LSE reduce-scatter, prefill" in text
    assert "kimi-rank-tp8-l4-int4-dcp8-" in text  # its own generated model


def test_cli_dry_run_for_a_gpu_shows_the_shipped_profiles_emulated_points(capsys):
    from bench.cli import main

    assert main(["sweep", "kimi-k2.6-rank-h200", "--dry-run", "--platform", "gpu"]) == 0
    out = capsys.readouterr().out
    assert "[FLASHMLA/fp8 dcp8-emulated k3]" in out
    assert "shape 1x4096x256 [DCP8 rank of 1x32768x256, emulated]" in out


# --- records and report --------------------------------------------------------------------------------------


def _record(point, metrics: dict | None, spec: dict | None) -> dict:
    return {
        "point_id": point.id,
        "engine_id": point.engine.id,
        "status": "ok",
        "reason": None,
        "config": point.to_dict(),
        "label": {"engine": point.engine.label(), "shape": point.label},
        "metrics": metrics,
        "spec_decode": spec,
    }


def test_records_and_summary_say_emulated(tmp_path):
    plan = make_plan(parse_profile(_profile(), "gpu", "e.toml"), H200)
    store = SweepStore(tmp_path)
    store.write_manifest(_manifest(plan))
    spec = {"acceptance_rate": 0.43, "mean_acceptance_length": 2.3, "per_position_acceptance": [0.65, 0.4, 0.25]}
    for p in plan.runnable:  # the emulated rank twice as fast as the plain one; speculation 1.5x on both
        tok_s = 100.0 * (2 if p.emulation else 1) * (1.5 if p.engine.num_speculative_tokens else 1)
        metrics = {"output_throughput": tok_s, "per_user_output_throughput": tok_s / 2, "tpot_ms": {"p50": 2e3 / tok_s}}
        store.save_point(_record(p, metrics, spec if p.engine.num_speculative_tokens else None))
    rows = {r["point_id"]: r for r in map(point_row, store.points().values())}
    assert {rows[p.id]["dcp_emulated"] for p in plan.runnable} == {None, 8}
    summary = summary_markdown(points_table(tmp_path), provenance(tmp_path))
    assert "| FLASHMLA | fp8 | 8 (emulated) | 3 | 1 | 128 | 256 |" in summary
    assert "| FLASHMLA | fp8 | 1 | 3 | 1 | 1024 | 256 |" in summary
    assert "DCP `N (emulated)`: one DCP-N rank emulated on one GPU" in summary and D.NOT_MODELLED[0] in summary
    # an emulated point's speedup is over the emulated baseline of the same rank shape, not the plain one's
    assert summary.count("| 1.50x | 1.50x |") == 4 and summary.count("| 1.00x | 1.00x |") == 4
    html = build_report(tmp_path)["html"].read_text()
    assert "Emulated DCP points" in html and "FLASHMLA/fp8 dcp8-emulated k3" in html and D.NOT_MODELLED[1] in html
    assert "left out of this heatmap" in html


def _manifest(plan) -> dict:
    machine = dataclasses.asdict(H200)
    return {
        "created": "2026-01-01T00:00:00+00:00",
        "profile": json.loads(plan.profile.model_dump_json()),
        "environment": {"bench_version": "0", "machine": machine, "python": "3", "suite_git": None, "vllm": {}},
    }
