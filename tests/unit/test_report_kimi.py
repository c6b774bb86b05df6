"""The committed H200 sweep of one Kimi K2.6 TP8 rank (reports/examples/kimi-rank-h200): its report's speedups over
the no-speculation baseline and its roofline checked against measurement, each recomputed here from the point
records by another path, the stored model configs' provenance, and goldens of the two new tables."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from bench.models import kimi_rank as K
from bench.report import analysis as A
from bench.results.records import dump_point
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "tests" / "data" / "results" / "kimi-rank-h200"  # a copy of reports/examples/kimi-rank-h200/results
GOLDEN = REPO / "tests" / "data" / "golden" / "kimi-rank-h200"
SPEC = K.RankSpec(tp=8, layers=61, experts="int4")


def spec_of(rec: dict) -> K.RankSpec:
    """The rank a point's server ran: SPEC, or SPEC with dcp=N for an emulated DCP-N rank's point."""
    return dataclasses.replace(SPEC, dcp=(rec["config"].get("emulation") or {}).get("dcp_size", 1))


@pytest.fixture(scope="module")
def data():
    return A.collect(RESULTS)


@pytest.fixture(scope="module")
def records():
    """The records as their files hold them (dump_point): the checks below compare them with what the servers ran."""
    return {pid: dump_point(r) for pid, r in SweepStore(RESULTS).records().items()}


def test_stored_model_configs_are_the_ones_the_servers_loaded(records):
    """models/ of the first sweep's engines was added after the run (a one-off script, see the example's README), the emulated DCP8 rank's by
    the sweep itself: each server's model folder name carries the hash of both generated configs, and today's
    generator gives the same folder and exactly these configs."""
    specs = {}
    for rec in records.values():
        argv = (rec.get("server") or {}).get("argv")
        if argv:
            specs[rec["engine_id"]] = spec_of(rec)
            assert Path(argv[argv.index("--model") + 1]).parent.name == K.cache_folder(Path("/x"), spec_of(rec)).name
    assert sorted(s.dcp for s in specs.values()) == [1] * 5 + [8] * 2
    for engine, spec in specs.items():
        stored = RESULTS / "models" / engine
        assert json.loads((stored / "target.json").read_text()) == json.loads(json.dumps(K.target_config(spec)))
        has_draft = any(
            r["engine_id"] == engine and r["config"]["engine"]["num_speculative_tokens"] for r in records.values()
        )
        assert (stored / "draft.json").is_file() == has_draft


def test_speedups_match_the_records(data, records):
    """Output tok/s and TPOT p50 ratios over the k = 0 point of the same shape (and the same emulated DCP rank or
    none), from the raw metrics."""
    pts = data.points[data.points.status == "ok"]

    def key(rec: dict) -> str:
        return json.dumps([rec["config"]["shape"], spec_of(rec).dcp])

    base = {
        key(r): r["metrics"]
        for r in records.values()
        if r["status"] == "ok" and r["config"]["engine"]["num_speculative_tokens"] == 0
    }
    assert len(base) == 8
    checked = 0
    for p in pts.itertuples():
        m = records[p.point_id]["metrics"]
        b = base[key(records[p.point_id])]
        assert p.speedup_output == pytest.approx(m["output_throughput"] / b["output_throughput"])
        assert p.speedup_tpot == pytest.approx(b["tpot_ms"]["p50"] / m["tpot_ms"]["p50"])
        checked += 1
    assert checked == 24
    by = pts.set_index("label")
    assert by.loc["FLASHMLA/fp8 k3 1x1024x256", "speedup_tpot"] == pytest.approx(6.834251 / 3.962527, rel=1e-6)
    assert by.loc["no-spec k0 32x1024x256", "speedup_output"] == 1.0
    emulated = by.loc["FLASHMLA/fp8 dcp8-emulated k3 1x1024x256", "speedup_tpot"]  # over the emulated k = 0
    assert emulated == pytest.approx(1.912183, rel=1e-5)  # TPOT p50 ratio of the two records


def test_every_ok_point_has_a_roofline_row_checked_against_its_records(data, records):
    roof = data.roofline.set_index("point_id")
    ok = [r for r in records.values() if r["status"] == "ok"]
    assert len(roof) == len(ok) == 24
    # the emulated DCP8 rank's configs have 64 heads: the report says the engines ran different models
    assert [n for n in data.roofline_notes if "ran different models" not in n] == []
    assert (roof.num_speculative_tokens == 0).sum() == 8  # the baselines have rows too
    assert set(roof.byte_model) == {"bench.models.kimi_rank.decode_step_bytes"}
    for rec in ok:
        eng, shape, row = rec["config"]["engine"], rec["config"]["shape"], roof.loc[rec["point_id"]]
        k = eng["num_speculative_tokens"]
        model = K.decode_step_bytes(
            spec_of(rec),
            concurrency=shape["concurrency"],
            context=shape["input_len"] + shape["output_len"] / 2,
            k=k,
            target_kv="fp8",
            draft_kv=eng["draft_kv_cache_dtype"],
        )
        mal = rec["spec_decode"]["mean_acceptance_length"] if k else 1.0
        step_s = rec["metrics"]["tpot_ms"]["mean"] / 1e3 * mal
        assert row.bytes_per_step_uniform == pytest.approx(model["total"])
        assert row.achieved_bytes_s == pytest.approx(model["total"] / step_s)
        assert row.achieved_fraction == pytest.approx(model["total"] / step_s / 4.8e12)


def test_model_and_measurement_side_by_side(data):
    roof = data.roofline.set_index("label")
    base32 = roof.loc["no-spec k0 32x1024x256"]
    assert 0.79 < base32.achieved_fraction < 0.81 and base32.note.startswith("agrees: bandwidth-bound, 80%")
    base1 = roof.loc["no-spec k0 1x1024x256"]
    assert 0.18 < base1.achieved_fraction < 0.19 and base1.note.startswith("latency-bound at batch 1")
    assert "prefill mixed in" in roof.loc["no-spec k0 32x8192x256", "note"]  # one wave of 32 x 8k prompts
    assert roof.loc["no-spec k0 32x8192x256", "prefill_overlap"] > 0.5
    triton = roof[roof.index.str.startswith("TRITON_MLA")]
    assert len(triton) == 8 and triton.note.str.contains("PIECEWISE CUDA graphs instead of FULL_AND_PIECEWISE").all()
    assert (triton.achieved_fraction < 0.3).all()


NEW_TABLES = {
    "speedups": ["label", "output_throughput", "per_user_output_throughput", "speedup_output", "speedup_tpot"],
    "roofline_check": [
        *("label", "bytes_per_step_uniform", "model_step_ms", "tpot_mean_ms", "mean_acceptance_length", "step_ms"),
        *("achieved_bytes_s", "achieved_fraction", "prefill_overlap", "note"),
    ],
}


@pytest.mark.parametrize("name", sorted(NEW_TABLES))
def test_new_tables_match_golden(data, name):
    """The speedup and model-vs-measurement tables of the example, as CSV (10 significant digits), against the
    committed golden files. BENCH_UPDATE_GOLDEN=1 rewrites them (review the diff before committing)."""
    source = data.points[data.points.status == "ok"] if name == "speedups" else data.roofline
    table = source.sort_values("label")[NEW_TABLES[name]]
    text = table.to_csv(index=False, float_format="%.10g", lineterminator="\n")
    golden = GOLDEN / f"{name}.csv"
    if os.environ.get("BENCH_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_html_shows_the_speedups_and_the_bandwidth_check(tmp_path):
    from bench.report.build import build_report

    text = build_report(RESULTS, tmp_path)["html"].read_text()
    assert 'id="roofline-check"' in text and "speedup TPOT (× k=0)" in text
    # the decision view names the best per shape, never one "largest" speedup or throughput across shapes
    assert "Largest speculative speedup" not in text and "Highest output throughput" not in text
    assert "At 1x1024x256, auto/fp8 draft k=3 is fastest: 1.59x no-spec (inconclusive: no precision" in text
    assert "latency-bound at batch 1" in text and "bench.models.kimi_rank.decode_step_bytes (kimi-rank:tp=8" in text
    assert "Emulated DCP points" in text  # the two DCP8-rank engines
