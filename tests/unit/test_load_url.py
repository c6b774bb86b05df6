"""`bench load --url` against a stand-in server: what it learns of the server and records, the same point ids
as a sweep of the profile, per-request or per-window acceptance per category, the mismatch flags, and the
refusals (unreachable URL, several engine configurations, an unknown model) before anything is written."""

from __future__ import annotations

import pytest

from bench import cli
from bench.commands.load_url import LoadRequest, load_url, plan_for_url, remote_effective
from bench.config.plan import make_plan
from bench.config.profile import load_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.engine.server import free_port
from bench.results.store import SweepStore
from tests.helpers.openai_standin import StandIn, serve

PROFILE_TEXT = """
name = "url"
[model]
weights = "dummy"  # the stand-in serves; no weights are written (zero-final-norm's need torch)
[server]
attention_backend = "CPU_MLA"
max_model_len = 4096
[axes]
draft_attention_backend = ["CPU_MLA"]
num_speculative_tokens = [3]
[run]
num_prompts = 4
warmup_prompts = 1
stall_timeout_s = 10
repeat = 1  # one block: the dataset below is sized for one pass of the notes point
[workloads.notes]
dataset = { kind = "jsonl", path = "JSONL" }
sampling = { temperature = 0, max_tokens = 6 }
concurrency = [2]
num_prompts = 6
[workloads.random]
shapes = ["2x8x5"]
"""


@pytest.fixture
def profile(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATASETS_CACHE", str(tmp_path / "cache"))
    jsonl = tmp_path / "data.jsonl"
    # 6 a category: the point's 1 + 6 conversations take rounds 0-3 of each category's order, none sent twice
    rows = [f'{{"category": "{c}", "prompt": "{c} question {i}"}}' for c in ("a", "b") for i in range(6)]
    jsonl.write_text("\n".join(rows) + "\n")
    path = tmp_path / "url.toml"
    path.write_text(PROFILE_TEXT.replace("JSONL", str(jsonl)))
    return path


def run(profile, standin: StandIn, out, **kw) -> SweepStore:
    outcome = load_url(LoadRequest(url=standin.url, profile=str(profile), out=out, quiet=True, **kw))
    assert outcome.counts == {"ok": 2, "failed": 0, "skipped": 0}
    return SweepStore(outcome.root)


@pytest.mark.parametrize("request_spec", [True, False])
def test_records_points_of_the_sweep_and_acceptance_per_category(profile, tmp_path, request_spec):
    standin, loop = serve(StandIn(request_spec=request_spec))
    try:
        store = run(profile, standin, tmp_path / "out")
    finally:
        loop.call_soon_threadsafe(loop.stop)
    sweep_ids = {p.id for p in make_plan(load_profile(str(profile), "cpu"), Machine("cpu")).runnable}
    points = store.records()
    assert set(points) == sweep_ids
    facts = store.manifest()["server_url"]
    assert (
        facts["served_model"] == "m" and facts["version"] == {"version": "0.0-standin"} and facts["root"] == "/models/m"
    )
    assert facts["speculative"] and facts["spec_positions"] == 3 and facts["request_spec"] is request_spec
    text = next(p for p in points.values() if p.label["workload"] == "notes")
    assert text.effective is not None and text.effective.source == "running server (load --url)"
    assert text.mismatch == []
    load = text.trials[0].load
    assert load is not None and load.model_extra["samples"] == {"start_round": 0, "repeated": 0, "conversations": 12}
    assert load.model_extra["prefix_cache_reset"] is False  # the stand-in has no /reset_prefix_cache
    cats = {c["category"]: c for c in text.categories or []}
    assert set(cats) == {"a", "b"}
    for c in cats.values():  # the stand-in accepts 2 of 3 draft tokens per step
        if request_spec:
            assert c["acceptance_source"] == "per-request"
            assert c["mean_acceptance_length"] == 3.0 and c["per_position_acceptance"] == [1.0, 1.0, 0.0]
        else:  # one window for both categories (as the baseline's): its /metrics counts cannot be split
            assert c["acceptance_source"] is None and c["mean_acceptance_length"] is None
    assert text.spec_decode is not None and text.spec_decode.mean_acceptance_length == 3.0
    windows = {r["window"] for r in store.raw(text.point_id) if r["phase"] == "measure"}
    assert windows == {None}
    assert (store.root / "report" / "summary.md").exists()
    asked = {b.get("model") for b in standin.bodies}
    assert asked == {"m"}


def test_mismatches_are_flagged():
    engine = {"num_speculative_tokens": 3, "server": {"max_model_len": 4096}}
    facts = {"url": "u", "served_model": "m", "speculative": True, "spec_positions": 2, "max_model_len": 8192}
    _, flags = remote_effective(facts, engine)
    assert flags == [
        "num_speculative_tokens: asked 3, the server counts 2 positions",
        "max_model_len: asked 4096, the server has 8192",
    ]
    _, flags = remote_effective({**facts, "speculative": False, "spec_positions": None}, engine)
    assert flags[0] == "num_speculative_tokens: asked 3, the server's /metrics has no spec_decode counters"
    swept = {"num_speculative_tokens": 2, "server": {}, "axes": {"max_model_len": 1024}}  # [axes.server]
    _, flags = remote_effective(facts, swept)
    assert flags == ["max_model_len: asked 1024, the server has 8192"]


def test_an_unreachable_url_is_one_error_and_writes_nothing(profile, tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["load", str(profile), "--url", f"http://127.0.0.1:{free_port()}", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: --url http://127.0.0.1:") and "/v1/models" in err
    assert err.count("\n") == 1 and not out.exists()


def test_engine_axes_it_cannot_change_are_refused_by_name(profile, tmp_path):
    varied = profile.read_text().replace("num_speculative_tokens = [3]", "num_speculative_tokens = [2, 3]")
    varied = varied.replace('draft_attention_backend = ["CPU_MLA"]', 'draft_attention_backend = ["CPU_MLA", "auto"]')
    profile.write_text(varied)
    with pytest.raises(BenchError) as err:
        plan_for_url(LoadRequest(url="http://x", profile=str(profile)))
    message = str(err.value)
    assert "cannot change the server's engine configuration" in message
    assert "draft_attention_backend (CPU_MLA, auto)" in message and "num_speculative_tokens (2, 3)" in message
    assert "dcp_size" not in message and "--points" in message


def test_an_unknown_model_or_several_models_are_refused(profile, tmp_path):
    standin, loop = serve(StandIn())
    try:
        with pytest.raises(BenchError, match="has no model 'other'; it serves m"):
            load_url(LoadRequest(url=standin.url, profile=str(profile), out=tmp_path / "o", model="other"))
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert not (tmp_path / "o").exists()
