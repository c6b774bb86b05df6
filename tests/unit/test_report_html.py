"""report.html and its analysis: known answers on the committed H200 results, the roofline byte count by hand,
and synthetic results directories with unknowns (None), failures only, a single point, a CPU machine."""

from __future__ import annotations

import base64
import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.models.models import FLAVORS, draft_config, target_config
from bench.report import analysis as A
from bench.report import result_fields
from bench.report import roofline as R
from bench.report.build import build_report
from bench.report.figures import draw_all
from bench.report.html import render_html
from bench.report.tables import point_row
from bench.results.records import PointRecord, new_point, parse
from bench.results.store import SweepStore
from tests.helpers.stored_models import with_stored_models, write_tiny_gpu_configs

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "data" / "results" / "tiny-gpu-h200"  # a copy of reports/examples/tiny-gpu-h200
BLOCK64 = REPO / "tests" / "data" / "results" / "tiny-block64-gpu-h200"
SECTIONS = [
    "decision",  # the opening view (bench.report.decision)
    "results",
    "throughput",
    "latency",
    "timeline",
    "acceptance",
    "heatmap",
    "roofline",
    "problems",
    "effective",
    "servers",
    "provenance",
]


class Page(HTMLParser):
    """Collects section ids, img attributes, table ids and the text of a page."""

    def __init__(self, text: str):
        super().__init__()
        self.sections, self.imgs, self.tables, self.scripts, self.links, self.text = [], [], [], [], [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id"))
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "table":
            self.tables.append(a.get("id"))
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "link":
            self.links.append(a)

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def example():
    return A.collect(EXAMPLE)


@pytest.fixture(scope="module")
def example_models(tmp_path_factory):
    """The committed example with the model configs stored as a sweep now stores them (its own has none)."""
    return with_stored_models(EXAMPLE, tmp_path_factory.mktemp("example") / "sweep")


@pytest.fixture(scope="module")
def example_roofline(example_models):
    return A.collect(example_models)


@pytest.fixture(scope="module")
def example_csv(tmp_path_factory, example_models):
    out = tmp_path_factory.mktemp("report")
    paths = build_report(example_models, out)
    return paths, pd.read_csv(paths["points_csv"])


# --- analysis on the committed example ------------------------------------------------------------------------


def test_heatmap_cells_are_the_best_throughput_at_the_largest_concurrency(example, example_csv):
    _, csv = example_csv
    heat = example.heatmap.set_index(["draft_attention_backend", "draft_kv_cache_dtype"])
    assert set(heat.concurrency) == {32}
    for kv in ("auto", "fp8"):
        rows = csv[
            (csv.status == "ok")
            & (csv.concurrency == 32)
            & (csv.draft_attention_backend == "TRITON_MLA")
            & (csv.draft_kv_cache_dtype == kv)
        ]
        assert heat.loc[("TRITON_MLA", kv), "value"] == pytest.approx(rows.output_throughput.max())
    assert heat.loc[("TRITON_MLA", "auto"), "value"] == pytest.approx(3841.8590473793415)
    assert heat.loc[("TRITON_MLA", "fp8"), "value"] == pytest.approx(3740.3528762227984)
    for kv in ("auto", "fp8"):
        assert np.isnan(heat.loc[("FLASHMLA", kv), "value"])
        assert heat.loc[("FLASHMLA", kv), "note"] == "failed: invalid-backend-combination"
        assert heat.loc[("FLASHMLA", kv), "n_failed"] == 3


def test_a_point_that_failed_above_every_ok_point_does_not_blank_the_heatmap():
    """One cell tried 64 users and failed there; every cell ran 32. The heatmap is at 32 (the largest concurrency
    any point ran at), with each cell's value, not blank cells that say "no ok point at concurrency 64"."""
    rows = [
        {
            "dcp_size": 1,
            "draft_attention_backend": b,
            "draft_kv_cache_dtype": "fp8",
            "concurrency": c,
            "status": "ok",
            "reason": None,
            "output_throughput": tok,
            "label": f"{b} c{c}",
        }
        for b, c, tok in (("FLASHMLA", 8, 100.0), ("FLASHMLA", 32, 300.0), ("TRITON_MLA", 32, 200.0))
    ]
    rows.append(rows[-1] | {"concurrency": 64, "status": "failed", "reason": "kv-cache-oom", "output_throughput": None})
    heat = A.heatmap_table(pd.DataFrame(rows)).set_index("draft_attention_backend")
    assert set(heat.concurrency) == {32}
    assert heat.value.to_dict() == {"FLASHMLA": 300.0, "TRITON_MLA": 200.0}
    assert heat.loc["TRITON_MLA", "n_failed"] == 1


def test_a_steady_point_whose_ttft_is_the_whole_windows_says_so():
    """A steady span into which no request was sent (one wave) has no TTFT of its own: bench.measure.metrics takes the whole
    window's, and the results tables say so in a `TTFT window` column shown only where that happened."""
    path = next((REPO / "tests" / "data" / "results" / "kimi-rank-dcp-h200" / "sweep" / "points").glob("*.json"))
    data = json.loads(path.read_text())
    assert data["metrics"]["window"] == "steady" and data["metrics"]["steady"]["ttft_window"] == "steady"
    own = point_row(parse(PointRecord, data, path))
    data["metrics"]["steady"]["ttft_window"] = "whole"
    fallback = point_row(parse(PointRecord, data, path))
    assert own["ttft_window"] is None and fallback["ttft_window"] == "whole"
    assert "ttft_window" not in result_fields.markdown_columns(pd.DataFrame([own]))
    assert "ttft_window" in result_fields.markdown_columns(pd.DataFrame([own, fallback]))
    assert "ttft_window" in result_fields.html_columns(pd.DataFrame([own, fallback]))


def test_pareto_membership(example):
    par = example.pareto.set_index("label")
    # Output tok/s vs per-user tok/s: fp8 wins at c1 and c8; at c32 auto has more total, fp8 more per user.
    assert set(par.index[par.pareto_user]) == {
        "TRITON_MLA/fp8 c1",
        "TRITON_MLA/fp8 c8",
        "TRITON_MLA/auto c32",
        "TRITON_MLA/fp8 c32",
    }
    # Output tok/s vs TPOT p50 (lower is better): fp8 c32 has higher TPOT and lower throughput than auto c32.
    assert set(par.index[par.pareto_tpot]) == {"TRITON_MLA/fp8 c1", "TRITON_MLA/fp8 c8", "TRITON_MLA/auto c32"}


GOLDEN_TABLES = REPO / "tests" / "data" / "golden" / "tiny-gpu-h200-analysis"
ANALYSIS_TABLES = [
    "throughput",
    "latency",
    "pareto",
    "acceptance",
    "heatmap",
    "problems",
    "effective",
    "roofline",
    "roofline_inputs",
]


@pytest.mark.parametrize("name", ANALYSIS_TABLES)
def test_analysis_table_matches_golden(example, example_roofline, name):
    """Every table the report derives, rendered to CSV (10 significant digits), against the committed golden file
    (the roofline's from the copy with stored model configs). BENCH_UPDATE_GOLDEN=1 rewrites the golden files
    (review their diff before committing)."""
    data = example_roofline if name.startswith("roofline") else example
    text = getattr(data, name).to_csv(index=False, float_format="%.10g", lineterminator="\n")
    golden = GOLDEN_TABLES / f"{name}.csv"
    if os.environ.get("BENCH_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()


def test_pareto_mask_by_hand():
    x = [1, 2, 3, 2, np.nan]
    y = [3, 2, 1, 1, 9]
    assert A.pareto_mask(x, y).tolist() == [True, True, True, False, False]
    # minimize x: (1, 3) dominates everything at y <= 3
    assert A.pareto_mask(x, y, maximize_x=False).tolist() == [True, False, False, False, False]
    assert A.pareto_mask([1, 1], [2, 2]).tolist() == [True, True]  # ties: neither dominates


def test_latency_and_acceptance_tables(example, example_csv):
    _, csv = example_csv
    lat = example.latency.set_index("label")
    ok = csv[csv.status == "ok"]
    assert len(lat) == len(ok) == 6
    row = ok[(ok.draft_kv_cache_dtype == "fp8") & (ok.concurrency == 32)].iloc[0]
    assert lat.loc["TRITON_MLA/fp8 c32", "ttft_p99_ms"] == pytest.approx(row.ttft_p99_ms)
    assert lat.loc["TRITON_MLA/fp8 c32", "itl_p90_ms"] == pytest.approx(12.739419500013582)  # from the record
    acc = example.acceptance.set_index("label")
    assert list(acc.columns[acc.columns.str.match(r"pos\d")]) == ["pos1", "pos2", "pos3"]
    assert acc.loc["TRITON_MLA/fp8 c32", "pos1"] == pytest.approx(0.6697169002001716)
    assert (acc.mean_acceptance_length - 1 - acc[["pos1", "pos2", "pos3"]].sum(axis=1)).abs().max() < 1e-9


def test_series_and_varied_axes(example):
    assert A.varied_axes(example.points) == ["draft_attention_backend", "draft_kv_cache_dtype", "concurrency"]
    assert set(example.throughput.series) == {"TRITON_MLA/auto", "TRITON_MLA/fp8"}
    assert example.throughput.groupby("series").concurrency.apply(list).to_dict() == {
        "TRITON_MLA/auto": [1, 8, 32],
        "TRITON_MLA/fp8": [1, 8, 32],
    }


def test_problems_carry_reasons_and_log_signature():
    data = A.collect(BLOCK64)
    probs = data.problems
    assert set(probs.reason) == {"engine-dead"} and len(probs) == 3
    # The log names the root cause that the run-time classification did not yet know.
    assert probs.log_signature.str.startswith("kernel-dtype-unsupported").all()
    heat = data.heatmap.set_index("draft_kv_cache_dtype")
    assert heat.loc["auto", "value"] == pytest.approx(3816.051269565517)
    assert heat.loc["fp8", "note"] == "failed: engine-dead"


# --- roofline ------------------------------------------------------------------------------------------------


def test_roofline_bytes_by_hand_for_the_tiny_gpu_model():
    t, d = target_config(FLAVORS["gpu"]), draft_config(FLAVORS["gpu"])
    hidden, heads, q_lora, kv_lora, rope, nope, v = 1024, 8, 1536, 512, 64, 128, 128
    # MLA attention: q_a + q_a norm + q_b, kv_a (with rope) + kv_a norm, kv_b, o
    attn = (
        hidden * q_lora
        + q_lora
        + q_lora * heads * (nope + rope)
        + hidden * (kv_lora + rope)
        + kv_lora
        + kv_lora * heads * (nope + v)
        + heads * v * hidden
    )
    assert attn == 6_621_184
    expert = 3 * hidden * 512  # gate/up/down of one expert, moe_intermediate_size 512
    target_params = (
        4 * (attn + 2 * hidden)  # 4 layers: attention + 2 RMSNorms
        + 3 * hidden * 2048  # layer 0 dense MLP (first_k_dense_replace = 1)
        + 3
        * (
            hidden * 16
            + 16  # 3 MoE layers: router (+ noaux_tc bias)
            + 1 * expert  # 1 shared expert
            + 4 * expert
        )  # top-4 routed experts
        + hidden
        + 2048 * hidden
    )  # final norm, lm_head (vocab 2048)
    assert target_params == 58_524_720
    draft_attn = (
        2 * hidden * q_lora
        + q_lora
        + q_lora * heads * (nope + rope)
        + 2 * hidden * (kv_lora + rope)
        + kv_lora
        + kv_lora * heads * (nope + v)
        + heads * v * hidden
    )  # layer 0 input: 2 x hidden
    draft_pass = draft_attn + 3 * hidden + 3 * hidden * 2048 + hidden + 2048 * hidden
    assert draft_pass == 17_176_576
    fc = 3 * hidden * hidden
    k, conc, ctx = 3, 32, 128 + 128 / 2
    weights = 2 * target_params + 2 * (k * draft_pass + fc)  # bf16
    kv = (
        4 * (kv_lora + rope) * 2 * ctx * conc  # target KV auto = bf16
        + k * 1 * (kv_lora + rope) * 1 * ctx * conc
    )  # draft KV fp8, 1 layer, k passes
    assert weights + kv == 265_328_736
    b = R.step_bytes(t, d, concurrency=conc, context_len=ctx, num_spec=k, target_kv_dtype="auto", draft_kv_dtype="fp8")
    assert b["bytes_per_step_per_gpu"] == 265_328_736
    assert b["target_weight_bytes"] == 2 * target_params and b["draft_kv_bytes"] == 10_616_832
    # TP halves the weights per GPU, DCP halves the KV per GPU.
    b2 = R.step_bytes(
        t, d, concurrency=conc, context_len=ctx, num_spec=k, target_kv_dtype="auto", draft_kv_dtype="fp8", tp=2, dcp=2
    )
    assert b2["bytes_per_step_per_gpu"] == pytest.approx(265_328_736 / 2)


def test_roofline_of_the_32_concurrency_fp8_point(example_roofline):
    example = example_roofline
    roof = example.roofline.set_index("label")
    r = roof.loc["TRITON_MLA/fp8 c32"]
    assert r.bytes_per_step_per_gpu == 265_328_736
    assert r.tokens_per_step == pytest.approx(32 * 2.3471547040320275)
    assert r.max_output_tok_s == pytest.approx(4.8e12 / 265_328_736 * 32 * 2.3471547040320275)
    assert r.fraction_of_max == pytest.approx(3740.3528762227984 / r.max_output_tok_s)
    assert 0 < r.fraction_of_max < r.fraction_of_max_uniform < 1
    assert r.uniform_experts_read == pytest.approx(16 * (1 - (1 - 4 / 16) ** 128))
    assert len(roof) == 6 and not example.roofline_notes


def test_kv_dtypes_and_bandwidth_table():
    cfg = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert R.kv_bytes_per_token_layer(cfg, "auto", 2) == 1152
    assert R.kv_bytes_per_token_layer(cfg, "fp8_e4m3", 2) == 576
    assert R.kv_bytes_per_token_layer(cfg, "fp8_ds_mla", 2) == 656
    assert R.gpu_bandwidth("NVIDIA H200")[0] == 4.8e12
    assert R.gpu_bandwidth("NVIDIA H100 80GB HBM3")[0] == 3.35e12
    assert R.gpu_bandwidth("NVIDIA H100 PCIe")[0] == 2.0e12
    assert R.gpu_bandwidth("NVIDIA B200")[0] == 8.0e12
    assert R.gpu_bandwidth(None) is None and R.gpu_bandwidth("Some CPU") is None


def test_old_results_without_stored_configs_have_no_roofline(example):
    """The committed example was swept before the configs were stored: unknown, not today's generated shapes."""
    assert R.model_configs(EXAMPLE) == {}
    assert example.roofline.empty
    assert any("model configs unknown" in n for n in example.roofline_notes), example.roofline_notes
    inputs = example.roofline_inputs.set_index("quantity")
    assert inputs.loc["model configs", "value"].startswith("unknown")
    assert not any(q.startswith(("target.", "draft.")) for q in inputs.index)


def test_stored_model_config_is_read_and_unwrapped(tmp_path):
    folder = tmp_path / "models" / "e1"
    folder.mkdir(parents=True)
    (folder / "target.json").write_text(
        '{"text_config": {"hidden_size": 7168}, "quantization_config": {"quant_method": "fp8"}}'
    )
    configs = R.model_configs(tmp_path)
    target, draft = configs["e1"]
    assert target["hidden_size"] == 7168 and R.linear_bytes(target) == 1.0
    assert draft is None  # not stored: unknown


# --- HTML ----------------------------------------------------------------------------------------------------


def test_html_has_every_section_and_only_data_uri_images(example_csv):
    paths, _ = example_csv
    text = paths["html"].read_text()
    page = Page(text)
    assert page.sections == SECTIONS  # no profiling tables in the example: no NVTX section
    assert len(page.imgs) == 6
    for im in page.imgs:
        assert im["src"].startswith("data:image/png;base64,")
        png = base64.b64decode(im["src"].split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert (paths[f"plot_{im['data-plot']}"]).read_bytes() == png
    assert not page.links and all("src" not in s for s in page.scripts)
    # The static CSS and the image-check script are inlined, once each.
    assert len(page.scripts) == 1 and "data-images-loaded" in text
    assert text.count("<style>") == 1 and "td.n{text-align:right" in text
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)  # nothing external
    assert {
        "results",
        "latency",
        "pareto",
        "acceptance",
        "heatmap",
        "roofline",
        "roofline-inputs",
        "problems",
        "effective",
    } <= set(page.tables)
    body = " ".join(page.text)
    for needle in (
        "invalid-backend-combination",
        "0.26.0",
        "draft-overrides: applied",
        "NVIDIA H200",
        "This is a model, not a measurement",
        "4.8 TB/s",
    ):
        assert needle in body, needle
    # existing outputs are kept
    assert {"summary", "points_csv", "points_parquet", "html"} <= set(paths)


# --- synthetic results directories ---------------------------------------------------------------------------


def manifest(platform: str = "gpu", gpu: str | None = "NVIDIA H200", target: str = "tiny") -> dict:
    machine = {
        "platform": platform,
        "gpus": 1 if platform == "gpu" else 0,
        "arch": "sm90" if gpu else None,
        "gpu_name": gpu,
        "driver": "1" if gpu else None,
        "cpu": "Test CPU",
        "cpu_count": 2,
        "gpu_memory_gib": None,
        "extra": {},
    }
    return {
        "created": "2026-01-01T00:00:00+00:00",
        "profile": {
            "name": "synthetic",
            "description": "test",
            "model": {"target": target, "draft": target, "flavor": "auto"},
        },
        "environment": {
            "bench_version": "0.1.0",
            "machine": machine,
            "python": "3.11",
            "suite_git": None,
            "vllm": {
                "vllm_version": None,
                "distribution": None,
                "vllm_root": None,
                "fixes": [],
                "problem": "vllm not importable",
            },
        },
    }


def record(
    pid: str,
    status: str,
    conc: int = 1,
    backend: str = "TRITON_MLA",
    kv: str = "auto",
    dcp: int = 1,
    metrics: dict | None = None,
    spec: dict | None = None,
    reason: str | None = None,
) -> dict:
    engine = {
        "target": "tiny",
        "draft": "tiny",
        "weights": "dummy",
        "server": {},
        "speculative": {},
        "draft_attention_backend": backend,
        "draft_kv_cache_dtype": kv,
        "dcp_size": dcp,
        "num_speculative_tokens": 3,
        "acceptance": {"mode": "real", "rates": None, "mean_length": None},
    }
    rec = {
        "point_id": pid,
        "engine_id": f"e-{backend}-{kv}-{dcp}",
        "status": status,
        "reason": reason,
        "config": {
            "engine": engine,
            "shape": {"concurrency": conc, "input_len": 64, "output_len": 32},
            "num_prompts": 4,
            "warmup_prompts": 1,
            "seed": 0,
        },
    }
    if metrics is not None:
        rec["metrics"] = metrics
    if spec is not None:
        rec["spec_decode"] = spec
    return rec


NONE_METRICS = {
    "output_throughput": None,
    "per_user_output_throughput": None,
    "request_throughput": None,
    "ttft_ms": {"p50": None, "p90": None, "p99": None},
    "tpot_ms": None,
    "itl_ms": {},
    "errors": None,
}
GOOD_METRICS = {
    "output_throughput": 100.0,
    "per_user_output_throughput": 50.0,
    "request_throughput": 1.0,
    "ttft_ms": {"p50": 10.0, "p90": 12.0, "p99": 15.0},
    "tpot_ms": {"p50": 5.0, "p90": 6.0, "p99": 7.0},
    "itl_ms": {"p50": 4.0, "p90": 5.0, "p99": 9.0},
    "errors": 0,
}


def make_dir(root: Path, records: list[dict], **kw) -> Path:
    """A results directory; a tiny target's model configs stored as a sweep stores them (a real model's that is
    not on this machine were not found, so not stored)."""
    store = SweepStore(root)
    store.write_manifest(manifest(**kw))
    for r in records:
        store.save_point(new_point(r))
    if kw.get("target", "tiny") == "tiny":
        write_tiny_gpu_configs(root, {r["engine_id"] for r in records})
    return root


def check_page(paths: dict, expect_imgs: int | None = None, decision: bool = True) -> Page:
    """`decision`: whether the page opens with the decision view (no point ran: nothing to decide, no view)."""
    page = Page(paths["html"].read_text())
    assert page.sections == (SECTIONS if decision else SECTIONS[1:])
    assert all(im["src"].startswith("data:image/png;base64,") for im in page.imgs)
    if expect_imgs is not None:
        assert len(page.imgs) == expect_imgs
    return page


def test_none_values_failed_and_skipped_on_a_cpu_machine(tmp_path):
    root = make_dir(
        tmp_path / "sweep",
        [
            record(
                "a",
                "ok",
                1,
                metrics=NONE_METRICS,
                spec={"acceptance_rate": None, "mean_acceptance_length": None, "per_position_acceptance": None},
            ),
            record(
                "b",
                "ok",
                4,
                metrics=GOOD_METRICS,
                spec={
                    "acceptance_rate": 1.0,
                    "mean_acceptance_length": 4.0,
                    "per_position_acceptance": [1.0, None, 1.0],
                },
            ),
            record("c", "failed", 4, kv="fp8", reason="crash"),
            record("d", "skipped", 4, backend="FLASHMLA", reason="FLASHMLA needs sm90"),
        ],
        platform="cpu",
        gpu=None,
    )
    paths = build_report(root)
    page = check_page(paths)
    body = " ".join(page.text)
    assert "CPU run: memory bandwidth unknown" in body and "FLASHMLA needs sm90" in body and "crash" in body
    data = A.collect(root)
    assert data.roofline.empty and data.roofline_notes
    heat = data.heatmap.set_index(["draft_attention_backend", "draft_kv_cache_dtype"])
    assert heat.loc[("TRITON_MLA", "auto"), "value"] == 100.0
    assert heat.loc[("TRITON_MLA", "fp8"), "note"] == "failed: crash"
    assert heat.loc[("FLASHMLA", "auto"), "note"] == "skipped: FLASHMLA needs sm90"
    assert np.isnan(data.acceptance.set_index("label").loc["TRITON_MLA/auto c4", "pos2"])
    assert data.pareto.pareto_user.tolist() == [False, True]  # the all-None point is never optimal


def test_recorded_text_is_escaped_not_run_as_markup(tmp_path):
    evil = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    root = make_dir(tmp_path / "sweep", [record("c", "failed", 1, reason=evil)])
    m = SweepStore(root).manifest()
    m["profile"]["description"] = evil
    SweepStore(root).write_manifest(m)
    page = check_page(build_report(root))
    assert len(page.scripts) == 1  # only the page's own
    assert all("data-plot" in im for im in page.imgs)  # only the plots
    body = "".join(page.text)
    assert body.count(evil) >= 3  # description, the problems table's reason and the heatmap's note, as text


def test_only_failed_and_skipped_points(tmp_path):
    root = make_dir(
        tmp_path / "sweep",
        [record("c", "failed", 1, reason="startup-timeout"), record("d", "skipped", 8, reason="tp % dcp")],
    )
    paths = build_report(root)
    page = check_page(paths, expect_imgs=1)  # only the heatmap (of reasons) has something to draw
    assert page.imgs[0]["data-plot"] == "heatmap"
    assert "No point ran successfully" in " ".join(page.text)
    assert not any(k.startswith("plot_") and k != "plot_heatmap" for k in paths)


def test_single_point_and_no_points(tmp_path):
    root = make_dir(
        tmp_path / "one",
        [
            record(
                "a",
                "ok",
                2,
                metrics=GOOD_METRICS,
                spec={
                    "acceptance_rate": 0.5,
                    "mean_acceptance_length": 2.5,
                    "per_position_acceptance": [0.7, 0.5, 0.3],
                },
            )
        ],
    )
    paths = build_report(root)
    # throughput, acceptance, heatmap, roofline; no raw request records: no latency CDF and no timeline
    page = check_page(paths, expect_imgs=4)
    assert {im["data-plot"] for im in page.imgs} == {"throughput", "acceptance", "heatmap", "roofline"}
    assert "No data to plot for this section (TPOT and ITL distributions per shape)" in " ".join(page.text)
    data = A.collect(root)
    assert data.pareto.pareto_user.tolist() == [True] and data.pareto.pareto_tpot.tolist() == [True]
    assert len(data.roofline) == 1 and data.roofline.fraction_of_max.iloc[0] > 0
    empty = make_dir(tmp_path / "none", [])
    check_page(build_report(empty), expect_imgs=0, decision=False)


def test_the_page_shows_the_measured_copy_ceiling_beside_the_datasheet(tmp_path):
    spec = {"acceptance_rate": 0.5, "mean_acceptance_length": 2.5, "per_position_acceptance": [0.7, 0.5, 0.3]}
    root = make_dir(tmp_path / "sweep", [record("a", "ok", 2, metrics=GOOD_METRICS, spec=spec)])
    store = SweepStore(root)
    m = store.manifest()
    m["environment"]["bandwidth"] = {"bytes_per_s": 4.0e12, "repeats": 10, "size_bytes": 2**31}
    store.write_manifest(m)
    body = " ".join(check_page(build_report(root)).text)
    assert "measured copy bandwidth per GPU" in body and "4.00 TB/s: device-to-device copy of 2 GiB" in body
    assert "83% of the datasheet's 4.8 TB/s" in body
    assert "of datasheet peak" in body and "of measured copy ceiling" in body and "measured step from" in body
    roof = A.collect(root).roofline
    assert roof.achieved_fraction_measured.iloc[0] == pytest.approx(roof.achieved_fraction.iloc[0] * 1.2)


def test_unknown_gpu_and_real_model_without_config(tmp_path):
    root = make_dir(
        tmp_path / "sweep",
        [
            record(
                "a",
                "ok",
                2,
                metrics=GOOD_METRICS,
                spec={
                    "acceptance_rate": 0.5,
                    "mean_acceptance_length": 2.5,
                    "per_position_acceptance": [0.7, 0.5, 0.3],
                },
            )
        ],
        gpu="Mystery GPU 9000",
        target="/nonexistent/model",
    )
    data = A.collect(root)
    assert data.roofline.empty
    assert any("Mystery GPU 9000" in n for n in data.roofline_notes)
    assert any("unknown" in n for n in data.roofline_notes)
    check_page(build_report(root))


def test_nvtx_section_from_profile_tables(tmp_path):
    root = make_dir(
        tmp_path / "sweep",
        [
            record(
                "a",
                "ok",
                2,
                metrics=GOOD_METRICS,
                spec={
                    "acceptance_rate": 0.5,
                    "mean_acceptance_length": 2.5,
                    "per_position_acceptance": [0.7, 0.5, 0.3],
                },
            )
        ],
    )
    folder = root / "profile" / "capture-e.analysis"
    folder.mkdir(parents=True)
    n = 6
    pd.DataFrame(
        {
            "range_id": range(n),
            "domain": "",
            "name": ["draft", "verify"] * 3,
            "kind": "push_pop",
            "pid": 1,
            "tid": 1,
            "global_tid": 1,
            "start_ns": np.arange(n) * 100,
            "end_ns": np.arange(n) * 100 + 50,
            "cpu_ns": 50,
            "api_calls": 2,
            "launches": 1,
            "kernels": 1,
            "memcpys": 0,
            "memsets": 0,
            "graphs": 0,
            "gpu_sum_ns": 40,
            "gpu_busy_ns": 40,
            "gpu_span_ns": 40,
        }
    ).to_parquet(folder / "nsys_ranges.parquet")
    data = A.collect(root)
    assert len(data.nvtx) == 1
    summary = data.nvtx[0][1].set_index("name")
    assert summary.loc["draft", "count"] == 3 and summary.loc["verify", "cpu_ns_total"] == 150
    page = Page(render_html(data, draw_all(data)))
    assert page.sections == SECTIONS[:8] + ["nvtx"] + SECTIONS[8:]
    assert any(im["data-plot"] == "nvtx0" for im in page.imgs)


def test_nvtx_section_shows_the_decode_step_shares_of_a_capture_that_has_decode_steps(tmp_path):
    """The capture's ranges (tests/unit/test_step_shares.py's synthetic engine steps) give the report a shares
    table under the capture's range table; a capture without decode steps gets none."""
    from tests.unit.test_step_shares import ranges

    root = make_dir(tmp_path / "sweep", [record("a", "ok", 2, metrics=GOOD_METRICS)])
    without_vllm_scopes = ranges()[~ranges().name.str.startswith("execute_context")]
    for name, df in (("capture-e.analysis", ranges()), ("capture-f.analysis", without_vllm_scopes)):
        folder = root / "profile" / name
        folder.mkdir(parents=True)
        gpu = df.gpu_busy_ns
        df.assign(api_calls=1, launches=1, kernels=1, gpu_sum_ns=gpu, gpu_span_ns=gpu).to_parquet(
            folder / "nsys_ranges.parquet"
        )
    data = A.collect(root)
    assert [p.name for p in data.step_shares] == ["capture-e.analysis"]
    html = render_html(data, draw_all(data))
    assert html.count("Where a decode step") == 1 and "3 of 5 engine steps were decode steps" in html
    assert ">3.0%<" in html and "bench.draft.attn_metadata" in html  # the metadata builds' share of step CPU
