"""Workloads as a profile axis: the [workloads.<id>] syntax and its errors, the points it plans (ids, labels, the
default that keeps earlier point ids), the datasets read before anything starts, and the dry run."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from bench.config.plan import load_datasets, make_plan
from bench.config.profile import load_profile, parse_profile, parse_profile_variants
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.engine.launch import describe_plan

REPO = Path(__file__).resolve().parents[2]
JSONL = REPO / "tests" / "data" / "workloads-cpu.jsonl"
BASE = {
    "name": "w",
    "model": {"weights": "zero-final-norm"},
    "server": {"attention_backend": "CPU_MLA"},
    "axes": {"draft_attention_backend": ["CPU_MLA"], "shapes": ["1x16x8", "4x16x8"]},
}


def plan_of(workloads: dict | None, source: str = str(REPO / "profiles" / "w.toml"), **extra):
    data = {**BASE, **extra} if workloads is None else {**BASE, "workloads": workloads, **extra}
    return make_plan(parse_profile(data, "cpu", source), Machine("cpu"))


@pytest.mark.parametrize("example", ["tiny-gpu-h200", "tiny-block64-gpu-h200", "cpu-ab-a-a-round-0"])
def test_profiles_without_workloads_keep_their_point_ids(example):
    """No [workloads]: the random workload at axes.shapes, and the same point ids as the committed results."""
    manifest = json.loads((REPO / "tests" / "data" / "results" / example / "manifest.json").read_text())
    machine = manifest["machine_planned_for"]
    variants = parse_profile_variants(tomllib.loads(manifest["profile_text"]), manifest["profile"]["source"])
    plan = make_plan(variants[machine["platform"]], Machine(**machine))
    assert {p.id for p in plan.runnable + plan.skipped} == {p["point_id"] for p in manifest["plan"]}
    assert all(p.workload.is_default and "workload" not in p.to_dict() for p in plan.runnable)


def test_an_explicit_random_workload_is_the_default_and_a_paced_one_a_new_point():
    default = plan_of(None)
    named = plan_of({"random": {}})
    assert [p.id for p in named.runnable] == [p.id for p in default.runnable]
    paced = plan_of({"poisson": {"shapes": ["4x16x8"], "arrival": {"request_rate": 8}}})
    (point,) = paced.runnable
    assert point.arrival.max_concurrency == 4 and point.arrival.request_rate == 8  # the shape's concurrency caps it
    assert point.label == "poisson 4x16x8 r8-b1-c4" and point.id not in {p.id for p in default.runnable}
    assert point.to_dict()["workload"]["arrival"]["burstiness"] == 1.0


def test_text_workload_points_per_sampling_and_arrival():
    plan = plan_of(
        {
            "mt": {
                "dataset": {"kind": "mt-bench", "categories": ["math"]},
                "sampling": [{"temperature": 0, "max_tokens": 32}, {"temperature": 1.0, "top_p": 0.95}],
                "concurrency": [1, 8],
                "num_prompts": 4,
                "chat_template_kwargs": {"thinking": True},
            }
        }
    )
    labels = [p.label for p in plan.runnable]
    assert labels == ["mt t0-max32 c1", "mt t0-max32 c8", "mt t1-p0.95 c1", "mt t1-p0.95 c8"]
    assert [p.num_prompts for p in plan.runnable] == [4, 8, 4, 8]  # at least the concurrency
    assert all(p.shape is None and p.concurrency in (1, 8) for p in plan.runnable)
    config = plan.runnable[2].to_dict()
    assert "shape" not in config
    assert config["workload"]["sampling"]["top_p"] == 0.95
    assert config["workload"]["chat_template_kwargs"] == {"thinking": True}
    assert len({p.id for p in plan.runnable}) == 4


def test_the_workload_id_names_points_but_is_not_hashed():
    a = plan_of({"mt": {"dataset": {"kind": "mt-bench"}}}).runnable[0]
    b = plan_of({"other": {"dataset": {"kind": "mt-bench"}}}).runnable[0]
    assert a.id == b.id and a.label != b.label


@pytest.mark.parametrize(
    "workloads, message",
    [
        ({"a": {"bogus": 1}}, "workloads.a.bogus: unknown key; allowed here: arrival, chat_template_kwargs"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "arrival": {"rate": 1}}}, "arrival.0.rate: unknown key; allowed"),
        ({"a": {"dataset": {"kind": "nope"}}}, "workloads.a.dataset: kind: must be one of humaneval, mt-bench"),
        ({"a": {"dataset": {"kind": "jsonl"}}}, "workloads.a.dataset: path: Field required"),
        ({"a": {"sampling": {"temperature": 1}}}, "random token ids are greedy with EOS ignored"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "shapes": ["1x2x3"]}}, "shapes apply to random workloads"),
        ({"a": {"arrival": {"request_rate": 2, "max_concurrency": 3}}}, "leave arrival.max_concurrency out"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "concurrency": [1], "arrival": {}}}, "either concurrency or arrival"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "concurrency": [0]}}, "values must be >= 1"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "sampling": {"top_p": 2}}}, "sampling.0.top_p"),
        ({"a": {"dataset": {"kind": "mt-bench"}, "arrival": {"burstiness": 0}}}, "arrival.0.burstiness"),
        ({"a b": {}}, "workload ids ['a b'] must be letters"),
    ],
)
def test_bad_workload_tables_are_one_line_errors_naming_the_key(workloads, message):
    with pytest.raises(BenchError) as err:
        parse_profile({**BASE, "workloads": workloads}, "cpu", "t.toml")
    assert str(err.value).startswith("t.toml: ") and message in str(err.value) and "\n" not in str(err.value)


def test_two_workloads_with_the_same_load_are_refused():
    with pytest.raises(BenchError, match="workloads repeat the same load"):
        plan_of({"a": {"dataset": {"kind": "mt-bench"}}, "b": {"dataset": {"kind": "mt-bench"}}})


def test_datasets_load_before_anything_runs_and_bad_ones_are_one_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATASETS_CACHE", str(tmp_path / "cache"))
    source = str(REPO / "tests" / "data" / "w.toml")  # relative dataset paths start at the profile's folder
    plan = load_datasets(plan_of({"n": {"dataset": {"kind": "jsonl", "path": "workloads-cpu.jsonl"}}}, source))
    (dataset,) = plan.datasets.values()
    assert dataset.provenance.categories == {"garden": 3, "sums": 3, "trains": 3}
    missing = plan_of({"n": {"dataset": {"kind": "jsonl", "path": "nope.jsonl"}}}, source)
    assert describe_plan(missing).count("MISSING") == len(missing.runnable)  # the dry run says so beforehand
    assert "MISSING" not in describe_plan(plan)
    with pytest.raises(BenchError, match=r"workloads\.n: .*nope.jsonl.*--points"):
        load_datasets(missing)
    bad = plan_of({"n": {"dataset": {"kind": "jsonl", "path": str(JSONL), "categories": ["boats"]}}}, source)
    with pytest.raises(BenchError, match="unknown category 'boats'; known: garden, sums, trains"):
        load_datasets(bad)


def test_kimi_profile_dry_run_shows_the_text_workloads():
    profile = load_profile("kimi-k2.6-eagle3-tp8", "gpu")
    text = {wid: t for wid, t in profile.workloads.items() if t.dataset is not None}
    kinds = {t.dataset["kind"] for t in text.values()}
    assert {"mt-bench", "humaneval"} <= kinds and kinds & {"spec-bench", "speed-bench"}
    temperatures = {s.temperature for t in text.values() for s in t.sampling or ()}
    assert len(temperatures) >= 2
    plan = make_plan(profile, Machine("gpu", 8, "sm90"))
    shown = describe_plan(plan)
    for wid in text:
        assert f"workload {wid} " in shown
    assert "kind=mt-bench" in shown and "kind=humaneval" in shown
    # Kimi K2.5+ templates think by default; instant mode is the `thinking` switch set false
    modes = {json.dumps(t.chat_template_kwargs or {}, sort_keys=True) for t in text.values()}
    assert modes == {"{}", '{"thinking": false}'}


def test_shipped_cpu_workload_profile_plans_text_and_paced_points():
    plan = make_plan(load_profile("tiny-text", "cpu"), Machine("cpu"))
    labels = [p.label for p in plan.runnable]
    assert any(lbl.startswith("mt-bench ") for lbl in labels) and any(lbl.startswith("notes t1") for lbl in labels)
    assert any(" r8-b1-" in lbl for lbl in labels) and not plan.skipped


def test_a_sweep_with_a_bad_dataset_is_one_error_and_writes_nothing(tmp_path, capsys, monkeypatch):
    from bench import cli

    monkeypatch.setenv("BENCH_DATASETS_CACHE", str(tmp_path / "cache"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "fine"}\n{"category": "x"}\n')
    profile = tmp_path / "bad.toml"
    profile.write_text(f'name = "bad"\n[workloads.rows]\ndataset = {{ kind = "jsonl", path = "{rows.name}" }}\n')
    out = tmp_path / "out"
    assert cli.main(["sweep", str(profile), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{rows}:2" in err and err.count("\n") == 1
    assert not out.exists() and not (tmp_path / "cache").exists()
