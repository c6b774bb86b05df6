"""The roofline against measurement and the speedup over k = 0, on synthetic inputs: the prefill overlap of raw
request records, the sentences, the baseline matching, and the byte models (kimi-rank's int4 experts against the
config-generic count, which agree where both apply)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bench.models import kimi_rank as K
from bench.models.models import FLAVORS, target_config
from bench.report import roofline as R
from bench.report.roofline_check import explain, measured_step, prefill_overlap
from bench.report.speedup import best, has_baseline, markdown_notes, speedups, with_speedups

# --- prefill overlap -----------------------------------------------------------------------------------------


def _raw(rows: list[tuple[float, list[float]]], phase: str = "measure") -> pd.DataFrame:
    return pd.DataFrame(
        [{"phase": phase, "status": "ok", "send_time": s, "chunk_times": c} for s, c in rows],
        columns=["phase", "status", "send_time", "chunk_times"],
    )


def test_prefill_overlap_by_hand():
    # A: sent 0, first token 1, decodes 1..11. B: sent 0, first token 3 (prefilling 0..3), decodes 3..13.
    # A's decode overlaps B's prefill for 2 s (1..3); B's decode overlaps no prefill. 2 / (10 + 10).
    raw = _raw([(0.0, [1.0, 5.0, 11.0]), (0.0, [3.0, 13.0])])
    assert prefill_overlap(raw) == pytest.approx(0.1)
    # one request alone: its own prefill is before its decode
    assert prefill_overlap(_raw([(0.0, [1.0, 2.0])])) == 0.0
    # warmup requests are not part of the window; a request with one chunk has no decode time
    assert prefill_overlap(pd.concat([raw, _raw([(0.5, [12.0, 14.0])], "warmup")])) == pytest.approx(0.1)
    assert prefill_overlap(_raw([(0.0, [1.0])])) is None


def test_overlapping_prefills_are_counted_once():
    # B and C prefill over 0..4 and 2..6: the union is 0..6; A decodes 1..11, overlapped 5 s of 10.
    raw = _raw([(0.0, [1.0, 11.0]), (0.0, [4.0]), (2.0, [6.0])])
    assert prefill_overlap(raw) == pytest.approx(0.5)


# --- sentences -----------------------------------------------------------------------------------------------


def test_explain_picks_the_reason_the_results_show():
    assert explain(concurrency=32, k=0, fraction=0.8).startswith("agrees: bandwidth-bound, 80% of peak")
    batch1 = explain(concurrency=1, k=3, fraction=0.2)
    assert batch1.startswith("latency-bound at batch 1: the step takes 5.0x") and "draft metadata" in batch1
    assert "draft" not in explain(concurrency=1, k=0, fraction=0.2)
    assert explain(concurrency=8, k=0, fraction=0.5).startswith("below the roofline (50% of peak)")
    assert explain(concurrency=8, k=0, fraction=0.1).startswith("far below the roofline (10% of peak)")
    assert explain(concurrency=8, k=0, fraction=1.2).startswith("faster than its modelled bytes allow (120%")
    down = {"asked": "FULL_AND_PIECEWISE", "ran": "PIECEWISE", "because_of": "TritonMLABackend"}
    assert "PIECEWISE CUDA graphs instead of FULL_AND_PIECEWISE" in explain(
        concurrency=1, k=3, fraction=0.05, downgrade=down
    )
    mixed = explain(concurrency=32, k=0, fraction=0.8, overlap=0.25)
    assert mixed.startswith("agrees") and "prefill mixed in: another request was prefilling during 25%" in mixed
    assert "prefill" not in explain(concurrency=32, k=0, fraction=0.8, overlap=0.05)
    assert "9.18 GB of the modelled bytes" in explain(concurrency=1, k=0, fraction=0.5, emulated_extra=9.18e9)


def test_measured_step_is_tpot_times_acceptance_length():
    assert measured_step(250.0, 2.0) == pytest.approx((4.0, 8.0))
    assert measured_step(None, 2.0) is None and measured_step(100.0, float("nan")) is None
    assert measured_step(0.0, 1.0) is None


# --- speedups ------------------------------------------------------------------------------------------------


def _pt(pid: str, k: int, conc: int, tok_s: float | None, per_user: float | None, status: str = "ok") -> dict:
    return {
        "point_id": pid,
        "status": status,
        "num_speculative_tokens": k,
        "concurrency": conc,
        "output_throughput": tok_s,
        "per_user_output_throughput": per_user,
        "tpot_p50_ms": 1e3 / per_user if per_user else None,
        "dcp_size": 1,
        "dcp_emulated": None,
        "input_len": 64,
        "output_len": 32,
    }


def test_a_tok_s_speedup_divides_figures_of_the_same_window():
    """A point without a steady span (window whole) against a steady baseline: both whole-window figures are
    divided, never a whole-window figure by a steady one."""
    base = _pt("b8", 0, 8, 400.0, 50.0) | {"window": "steady", "output_throughput_whole": 360.0}
    whole = _pt("s8", 3, 8, 500.0, 60.0) | {"window": "whole", "output_throughput_whole": 500.0}
    steady = _pt("t8", 3, 8, 480.0, 60.0) | {"window": "steady", "output_throughput_whole": 450.0}
    sp = speedups(pd.DataFrame([base, whole, steady])).set_index("point_id")
    assert sp.loc["s8", "speedup_output"] == pytest.approx(500 / 360)  # whole / whole, not 500 / 400
    assert sp.loc["t8", "speedup_output"] == pytest.approx(480 / 400)  # steady / steady


def test_a_tok_s_speedup_states_the_two_points_combined_precision():
    """The ratio's relative half-width is the root sum of squares of the two steady half-widths; the baseline's
    own 1.00x is exact, and a whole-window figure (no precision) gives the ratio none."""
    base = _pt("b8", 0, 8, 400.0, 50.0) | {"window": "steady", "throughput_halfwidth": 0.03}
    steady = _pt("t8", 3, 8, 480.0, 60.0) | {"window": "steady", "throughput_halfwidth": 0.04}
    whole = _pt("s8", 3, 8, 500.0, 60.0) | {"window": "whole", "throughput_halfwidth": None}
    unstated = _pt("u8", 2, 8, 450.0, 55.0) | {"window": "steady", "throughput_halfwidth": None}
    sp = speedups(pd.DataFrame([base, steady, whole, unstated])).set_index("point_id")
    assert sp.loc["t8", "speedup_output_halfwidth"] == pytest.approx(0.05)
    assert sp[["speedup_output_halfwidth"]].drop(index="t8").isna().all().all()
    lines = markdown_notes(with_speedups(pd.DataFrame([base, steady])))
    assert "root sum of squares" in lines[0] and "between starts" in lines[0]
    assert "root sum of squares" not in markdown_notes(with_speedups(pd.DataFrame([base, whole])))[0]


def test_speedups_are_over_the_same_shapes_baseline():
    pts = pd.DataFrame(
        [
            _pt("b1", 0, 1, 100.0, 100.0),
            _pt("b8", 0, 8, 400.0, 50.0),
            _pt("s1", 3, 1, 150.0, 200.0),
            _pt("s8", 3, 8, 300.0, 60.0),
            _pt("s2", 3, 2, 1.0, 1.0),  # no baseline at concurrency 2
            _pt("f8", 3, 8, None, None, status="failed"),
        ]
    )
    sp = speedups(pts).set_index("point_id")
    assert sp.loc["s1", "speedup_output"] == pytest.approx(1.5) and sp.loc["s1", "speedup_tpot"] == pytest.approx(2.0)
    assert sp.loc["s8", "speedup_output"] == pytest.approx(0.75) and sp.loc["s8", "speedup_tpot"] == pytest.approx(1.2)
    assert sp.loc["b8", "speedup_output"] == 1.0 and sp.loc["s8", "baseline_point_id"] == "b8"
    assert np.isnan(sp.loc["s2", "speedup_output"]) and pd.isna(sp.loc["s2", "baseline_point_id"])
    assert np.isnan(sp.loc["f8", "speedup_tpot"])  # failed: unknown, never a ratio of None
    assert best(with_speedups(pts)) == ("s1", pytest.approx(2.0))


def test_no_baseline_leaves_the_points_alone_and_two_baselines_give_unknown():
    pts = pd.DataFrame([_pt("s", 3, 1, 1.0, 1.0)])
    assert not has_baseline(pts) and with_speedups(pts) is pts and best(pts) == (None, None)
    twice = pd.DataFrame([_pt("s", 3, 1, 1.0, 1.0), _pt("b0", 0, 1, 1.0, 1.0), _pt("b1", 0, 1, 2.0, 2.0)])
    assert speedups(twice).speedup_output.isna().all()


# --- byte models ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [K.RankSpec(), K.RankSpec(tp=4, layers=8, experts="fp8"), K.RankSpec(dcp=8)])
def test_spec_is_read_back_from_a_stored_config(spec):
    stored = json.loads(json.dumps(K.target_config(spec)))
    assert K.spec_from_config(stored) == spec
    assert K.spec_from_config({**stored, "rms_norm_eps": 1e-6}) is None  # not the generator's: generic model
    assert K.spec_from_config(target_config(FLAVORS["gpu"])) is None and K.spec_from_config(None) is None


def test_bf16_rank_agrees_with_the_config_generic_count():
    """Two independent byte models of the same step: where both apply (bf16 experts) they agree to the router
    bias (fp32 in the rank's model, 2 bytes in the generic one: 60 layers x 384 x 2 bytes)."""
    spec = K.RankSpec(layers=8, experts="bf16")
    target, draft = K.target_config(spec), K.draft_config(spec)
    kw = dict(concurrency=8, context_len=3000.0, num_spec=3, target_kv_dtype="fp8", draft_kv_dtype="auto")
    for routing in ("top_k", "uniform"):
        rank = R.rank_step_bytes(spec, routing=routing, **kw)
        generic = R.step_bytes(target, draft, routing=routing, **kw)
        assert rank["bytes_per_step_per_gpu"] - generic["bytes_per_step_per_gpu"] == pytest.approx(7 * 384 * 2)
        assert rank["routed_experts_read"] == pytest.approx(generic["routed_experts_read"])


def test_int4_experts_are_counted_at_their_packed_size():
    """The generic count reads compressed-tensors int4 experts at the model dtype (2 bytes); the rank's model at
    0.5 byte + a bf16 scale per 32 weights: the difference is exactly the touched experts' weights x 1.4375."""
    spec = K.RankSpec(layers=8)
    kw = dict(concurrency=1, context_len=1024.0, num_spec=0, target_kv_dtype="fp8", draft_kv_dtype=None)
    rank = R.rank_step_bytes(spec, **kw)
    generic = R.step_bytes(K.target_config(spec), None, **kw)
    touched = 7 * 8 * 3 * 7168 * 256  # MoE layers x top-8 x gate/up/down weights of one expert
    assert generic["bytes_per_step_per_gpu"] - rank["bytes_per_step_per_gpu"] == pytest.approx(
        touched * (2 - 0.5625) - 7 * 384 * 2
    )
    assert rank["draft_weight_bytes"] == 0 and rank["draft_kv_bytes"] == 0  # k = 0: no draft read


def test_a_baseline_step_needs_no_draft_config():
    t = target_config(FLAVORS["gpu"])
    b = R.step_bytes(
        t, None, concurrency=4, context_len=100.0, num_spec=0, target_kv_dtype="auto", draft_kv_dtype="none"
    )
    assert (
        b["draft_weight_bytes"] == 0 and b["bytes_per_step_per_gpu"] == b["target_weight_bytes"] + b["target_kv_bytes"]
    )
    with pytest.raises(ValueError, match="draft"):
        R.step_bytes(t, None, concurrency=4, context_len=1.0, num_spec=3, target_kv_dtype="auto", draft_kv_dtype="auto")


# --- the measured ceiling and the measured step ----------------------------------------------------------------

GIB = 2**30
MEASURED = {
    "bytes_per_s": 4.0e12,
    "median_bytes_per_s": 3.9e12,
    "repeats": 10,
    "size_bytes": 2 * GIB,
    "bytes_counted": "read + write: 2 x size_bytes per copy",
}


def _point(**extra) -> dict:
    """One ok k = 3 point of the tiny GPU model: per-user 250 tok/s and acceptance length 2, so the derived step
    is 1000 / 250 x 2 = 8 ms."""
    return {
        "point_id": "p",
        "engine_id": "e",
        "label": "p",
        "status": "ok",
        "num_speculative_tokens": 3,
        "mean_acceptance_length": 2.0,
        "concurrency": 4,
        "input_len": 64,
        "output_len": 32,
        "draft_kv_cache_dtype": "auto",
        "dcp_size": 1,
        "server": {},
        "output_throughput": 1000.0,
        "per_user_output_throughput": 250.0,
        **extra,
    }


def _roofline(points: list[dict], environment_extra: dict | None = None, platform: str = "gpu"):
    from bench.models.models import draft_config
    from bench.report.roofline_points import roofline

    machine = {"platform": platform, "gpu_name": "NVIDIA H200" if platform == "gpu" else None}
    manifest = {"environment": {"machine": machine, **(environment_extra or {})}}
    models = {"e": (target_config(FLAVORS["gpu"]), draft_config(FLAVORS["gpu"]))}
    return roofline(pd.DataFrame(points), manifest, models)


def test_measured_bandwidth_reads_the_manifest():
    bw, text = R.measured_bandwidth({"bandwidth": MEASURED})
    assert bw == 4.0e12
    assert text == "4.00 TB/s: device-to-device copy of 2 GiB, read + write counted, best of 10 (median 3.90)"
    assert R.measured_bandwidth({"bandwidth": {"bytes_per_s": None, "reason": "CUDA error: busy"}}) == (
        None,
        "not measured: CUDA error: busy",
    )
    assert R.measured_bandwidth({}) == (None, "not measured (results from before bench.engine.bandwidth)")
    assert R.measured_bandwidth({"bandwidth": {"bytes_per_s": "nan"}})[0] is None


def test_the_roofline_shows_both_ceilings_and_the_achieved_share_of_each():
    roof, inputs, notes = _roofline([_point()], {"bandwidth": MEASURED})
    assert not notes
    (row,) = roof.itertuples()
    assert row.bandwidth_bytes_s == 4.8e12 and row.measured_bandwidth_bytes_s == 4.0e12
    assert row.achieved_bytes_s == pytest.approx(row.bytes_per_step_uniform / 8e-3)
    assert row.achieved_fraction == pytest.approx(row.achieved_bytes_s / 4.8e12)
    assert row.achieved_fraction_measured == pytest.approx(row.achieved_bytes_s / 4.0e12)
    shown = inputs.set_index("quantity").value
    assert shown["HBM bandwidth per GPU"].startswith("4.8 TB/s")
    assert shown["measured copy bandwidth per GPU"].startswith("4.00 TB/s: device-to-device copy")
    assert shown["measured copy bandwidth per GPU"].endswith("; 83% of the datasheet's 4.8 TB/s")


def test_a_point_without_a_fixed_concurrency_or_length_is_left_out_not_a_crash():
    """A rate-paced text point has no concurrency, a text point no fixed input length (NaN in the table): no
    roofline row for them, and a note says why (int(NaN) crashed the report before)."""
    points = [_point(), _point(concurrency=float("nan")), _point(input_len=float("nan"))]
    roof, _, notes = _roofline(points, {"bandwidth": MEASURED})
    assert len(roof) == 1 and any("2 ok point(s)" in n and "no fixed" in n for n in notes)


def test_without_a_measured_ceiling_the_datasheet_alone_is_used_and_the_reason_shown():
    for env, shown in (
        ({"bandwidth": {"bytes_per_s": None, "reason": "CUDA error: busy"}}, "not measured: CUDA error: busy"),
        ({}, "not measured (results from before bench.engine.bandwidth)"),
    ):
        roof, inputs, _ = _roofline([_point()], env)
        (row,) = roof.itertuples()
        assert row.achieved_fraction == pytest.approx(row.achieved_bytes_s / 4.8e12)
        assert row.measured_bandwidth_bytes_s is None and row.achieved_fraction_measured is None
        assert inputs.set_index("quantity").value["measured copy bandwidth per GPU"] == shown
    _, cpu_inputs, _ = _roofline([_point()], {}, platform="cpu")
    assert "measured copy bandwidth per GPU" not in set(cpu_inputs.quantity)


def test_the_steady_step_p50_is_the_measured_step_when_the_point_has_one():
    roof, _, _ = _roofline([_point(step_p50_ms=5.0, window="steady")])
    (row,) = roof.itertuples()
    assert row.step_ms == 5.0 and row.step_source == "steady step p50"
    assert row.tpot_mean_ms == pytest.approx(4.0)  # still shown: 1000 / per-user tok/s
    assert row.achieved_bytes_s == pytest.approx(row.bytes_per_step_uniform / 5e-3)
    # a column without a value for this point, or no column at all (tables before it): the derivation
    for point in (_point(step_p50_ms=None), _point()):
        (row,) = _roofline([point])[0].itertuples()
        assert row.step_ms == pytest.approx(8.0) and row.step_source == "mean TPOT x mean acceptance length"
    (row,) = _roofline([_point(step_p50_ms=6.0, window="whole")])[0].itertuples()
    assert row.step_ms == 6.0 and row.step_source == "step p50 (whole window)"


def test_step_measurement_without_any_measure():
    from types import SimpleNamespace

    from bench.report.roofline_check import step_measurement

    assert step_measurement(SimpleNamespace(per_user_output_throughput=None), 2.0) == (None, None, None)
    steady = SimpleNamespace(per_user_output_throughput=None, step_p50_ms=3.0)
    assert step_measurement(steady, 2.0) == (None, 3.0, "steady step p50")
    assert step_measurement(SimpleNamespace(per_user_output_throughput=None, step_p50_ms=float("nan")), 2.0)[1] is None
