"""Statistics on data with a known answer. The unit is the server start (one results directory per start)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from bench.cli import main
from bench.config.run_options import Run
from bench.core.errors import BenchError, ExitCode
from bench.results.records import new_point
from bench.results.store import SweepStore
from bench.verdicts.compare import compare_dirs, compare_markdown, outcome, regressions
from bench.verdicts.stats import (
    CPU_AA_BETWEEN_CV,
    compare_servers,
    log_threshold,
    paired_sd_from_cv,
    plan_design,
    plan_rounds,
    to_slowdown,
)

LABEL = {"engine": "CPU_MLA/auto dcp1 k3", "shape": "4x8x29"}


def write_start(
    root: Path, throughputs: list[float], tpot_ms: float, rng, point_id="p1", status="ok", run=None, window="whole"
) -> Path:
    """One results directory = one server start: one point, one trial per throughput, 16 requests per trial;
    `run` is the profile's [run] table in its manifest, `window` the headline's window."""
    store = SweepStore(root)
    profile = {"name": "synthetic", **({"run": run} if run is not None else {})}
    store.write_manifest({"created": "t", "profile": profile, "plan": [], "counts": {}, "environment": {}})
    if status != "ok":
        store.save_point(
            new_point(
                {
                    "point_id": point_id,
                    "engine_id": "e",
                    "status": status,
                    "config": {"engine": {}},
                    "label": LABEL,
                    "reason": "engine-dead" if status == "failed" else None,
                    "detail": "EngineCore died",
                }
            )
        )
        return root
    rows, trials = [], []
    for t, thr in enumerate(throughputs):
        for i in range(16):
            send, step = 100.0 * t + i, rng.normal(tpot_ms, tpot_ms * 0.01) / 1e3
            times = [send + 0.05 + step * 4 * k for k in range(8)]
            rows.append(
                {
                    "index": i,
                    "phase": "measure",
                    "prompt_len": 8,
                    "max_tokens": 29,
                    "send_time": send,
                    "end_time": times[-1],
                    "chunk_times": times,
                    "chunk_tokens": [1] + [4] * 7,
                    "prompt_tokens": 8,
                    "output_tokens": 29,
                    "status": "ok",
                    "error": None,
                    "trial": t,
                }
            )
        trials.append(
            {
                "trial": t,
                "metrics": {"output_throughput": thr, "request_throughput": thr / 29},
                "spec_decode": {"mean_acceptance_length": 4.0},
            }
        )
    store.save_raw(point_id, rows)
    store.save_point(
        new_point(
            {
                "point_id": point_id,
                "engine_id": "e",
                "status": "ok",
                "config": {"engine": {}},
                "label": LABEL,
                "metrics": {"window": window},
                "spec_decode": {},
                "trials": trials,
            }
        )
    )
    return root


def write_side(root: Path, per_start: list[list[float]], tpot_ms: float, rng, **kw) -> Path:
    for r, trials in enumerate(per_start):
        write_start(root / f"round-{r}", trials, tpot_ms, rng, **kw)
    return root


@pytest.fixture
def rng():
    return np.random.default_rng(1)


def test_two_starts_a_side_give_no_bound_and_say_so(tmp_path, rng):
    base = write_side(tmp_path / "a", [[1000.0]] * 2, 10.0, rng)
    cand = write_side(tmp_path / "b", [[500.0]] * 2, 20.0, rng)  # halved: still no verdict at n = 2
    t = compare_dirs(base, cand)["table"].set_index("metric")
    assert set(t.verdict) == {"insufficient data"} and t.loc["output_throughput", "ratio"] == pytest.approx(0.5)
    assert "insufficient data (needs 3 rounds, has 2/2)" in compare_markdown(compare_dirs(base, cand))
    assert main(["compare", str(base), str(cand)]) == ExitCode.INCONCLUSIVE  # no verdict: neither pass nor fail
    three = write_side(tmp_path / "c", [[500.0]] * 3, 20.0, rng)
    assert main(["compare", str(write_side(tmp_path / "d", [[1000.0]] * 3, 10.0, rng)), str(three)]) == 4


def test_trials_of_one_server_are_not_independent(tmp_path, rng):
    """A/A where servers differ a lot (as on the H200) but trials inside one agree: pooling trials would call a
    change; averaging per start does not."""
    means_a, means_b = [800, 900, 1000, 1100, 1200], [900, 1000, 1100, 1200, 1300]  # CV 16%, a 9% draw apart
    starts_a = [[m * (1 + rng.normal(0, 0.01)) for _ in range(10)] for m in means_a]
    starts_b = [[m * (1 + rng.normal(0, 0.01)) for _ in range(10)] for m in means_b]
    pooled_p = mannwhitneyu(np.concatenate(starts_a), np.concatenate(starts_b)).pvalue  # the old, wrong unit
    assert pooled_p < 0.05
    r = compare_servers(starts_a, starts_b, False, min_effect=0.02, alpha=0.05, paired=False)
    assert r.verdict == "inconclusive" and r.p_value > 0.05 and r.n_base == 5
    assert r.between_cv > 0.05 > r.within_cv and r.upper > 0.1


def test_ten_percent_slowdown_with_five_starts_a_side_is_found(tmp_path, rng, capsys):
    base = write_side(tmp_path / "a", [[x, x * 1.01] for x in rng.normal(1000, 15, 5)], 10.0, rng)
    cand = write_side(tmp_path / "b", [[x, x * 1.01] for x in rng.normal(900, 14, 5)], 11.0, rng)
    result = compare_dirs(base, cand)
    t = result["table"].set_index("metric")
    assert t.loc["output_throughput", "verdict"] == "slower" and t.loc["output_throughput", "n_base"] == 5
    assert t.loc["output_throughput", "ratio"] == pytest.approx(0.9, abs=0.02)
    assert t.loc["output_throughput", "lower"] > 0.05 and t.loc["output_throughput", "slowdown"] == pytest.approx(
        0.1, abs=0.02
    )
    assert t.loc["tpot_ms", "verdict"] == "slower" and t.loc["tpot_ms", "ratio"] == pytest.approx(1.1, abs=0.01)
    assert t.loc["mean_acceptance_length", "verdict"] == "no regression"  # same acceptance: it is system time
    d = result["decomposition"].iloc[0]
    assert d.acceptance_factor == 1.0 and d.system_factor == pytest.approx(d.throughput_ratio)
    row = next(line for line in compare_markdown(result).splitlines() if line.startswith(f"| {LABEL['engine']}"))
    assert "| 5/5 | 0.9" in row and row.endswith("| slower |")
    assert main(["compare", str(base), str(cand)]) == 4
    assert main(["compare", str(base), str(cand), "--no-gate"]) == 0
    assert main(["compare", str(cand), str(base)]) == 0  # the reverse is faster, not a regression
    assert main(["compare", str(base), str(cand), "--unpaired"]) == 4


def test_small_but_significant_slowdown_below_min_effect_is_not_a_regression():
    base = [[100.0], [100.1], [99.9], [100.05], [99.95], [100.02]]
    cand = [[99.0], [99.1], [98.9], [99.05], [98.95], [99.02]]  # 1% slower, clearly significant
    r = compare_servers(base, cand, True, min_effect=0.02, alpha=0.05)
    assert r.p_value < 0.01 and r.verdict == "no regression" and r.upper < 0.02
    assert compare_servers(base, cand, True, min_effect=0.005, alpha=0.05).verdict == "slower"
    assert compare_servers(cand, base, True, min_effect=0.005, alpha=0.05).verdict == "faster"


def test_all_failed_candidate_fails_the_gate(tmp_path, rng, capsys):
    base = write_side(tmp_path / "a", [[1000.0]] * 4, 10.0, rng)
    cand = write_side(tmp_path / "b", [[0.0]] * 4, 10.0, rng, status="failed")
    result = compare_dirs(base, cand)
    assert result["table"].empty and len(regressions(result)) == 1
    md = compare_markdown(result)
    assert "failed in 4 of 4 server starts" in md and "engine-dead" in md
    assert main(["compare", str(base), str(cand)]) == 4


def test_a_crash_in_one_start_or_a_missing_point_gates_but_a_shared_failure_does_not(tmp_path, rng):
    base = write_side(tmp_path / "a", [[1000.0]] * 4, 10.0, rng)
    write_start(tmp_path / "a" / "round-0", [1000.0], 10.0, rng, point_id="p2")  # only the baseline has p2
    cand = write_side(tmp_path / "b", [[1000.0]] * 3, 10.0, rng)
    write_start(cand / "round-3", [0.0], 10.0, rng, status="failed")
    f = compare_dirs(base, cand)["failures"].set_index("point_id")
    assert f.loc["p1", "problem"] == "failed in 1 of 4 server starts" and f.loc["p1", "gated"]
    assert f.loc["p2", "problem"] == "missing in candidate" and f.loc["p2", "gated"]
    both_a = write_side(tmp_path / "c", [[0.0]] * 2, 10.0, rng, status="failed")
    both_b = write_side(tmp_path / "d", [[0.0]] * 2, 10.0, rng, status="failed")
    result = compare_dirs(both_a, both_b)
    assert not result["failures"].gated.any() and "baseline failed too" in result["failures"].problem.iloc[0]
    assert list(regressions(result).verdict) == ["nothing compared"]  # a gate that compared nothing passes nothing


def test_design_arithmetic():
    assert to_slowdown(log_threshold(0.05, True), True) == pytest.approx(0.05)
    assert to_slowdown(log_threshold(0.05, False), False) == pytest.approx(0.05)
    assert log_threshold(0.05, True) > log_threshold(0.05, False)  # 1/0.95 - 1 > 5%: throughput's is wider
    # two independent starts' logs, each with sd ~ CV 0.02: their difference has sd sqrt(0.02^2 + 0.02^2) = 0.02828427
    assert paired_sd_from_cv(0.02) == pytest.approx(0.02828427, rel=1e-7)
    few, many = plan_rounds(0.02, 0.05, 0.05), plan_rounds(0.04, 0.05, 0.05)
    assert few is not None and many is not None and 3 <= few < many
    assert plan_rounds(0.02, 0.05, 0.05, paired=False) > few, "unpaired, the same sd: two sides' means"


def test_ab_refuses_fewer_than_three_rounds_before_running(tmp_path, capsys):
    out = tmp_path / "ab"
    args = ["ab", "tiny", "--baseline", sys.executable, "--candidate", sys.executable, "--out", str(out)]
    assert main([*args, "--rounds", "2"]) == 1
    assert "a t bound needs at least 3 rounds" in capsys.readouterr().err and not out.exists()
    need, text = plan_design(5, 0.05, paired_sd_from_cv(CPU_AA_BETWEEN_CV), 0.05)
    assert need is not None and need > 5 and f"{need} let an A/A pass --max-effect 5%" in text


def _quiet_pass(tmp_path, rng) -> tuple[Path, Path]:
    """5 starts a side of p1, equal and quiet: a pass (exit 0) on its own."""
    base = write_side(tmp_path / "a", [[x] for x in rng.normal(1000, 2, 5)], 10.0, rng)
    cand = write_side(tmp_path / "b", [[x] for x in rng.normal(1000, 2, 5)], 10.0, rng)
    return base, cand


def test_a_point_without_an_ok_baseline_makes_the_outcome_inconclusive_not_a_pass(tmp_path, rng):
    """Found in review: a point the baseline failed or lacks dropped out of the comparison unmentioned, and one that
    failed on both sides did not gate: each exited 0 although nothing judged the candidate there."""
    base, cand = _quiet_pass(tmp_path, rng)
    assert main(["compare", str(base), str(cand)]) == ExitCode.OK
    cases = {
        "failed in baseline": ("failed", "ok"),
        "missing in baseline": (None, "ok"),
        "failed on both sides": ("failed", "failed"),
    }
    for problem, (b_status, c_status) in cases.items():
        b, c = _quiet_pass(tmp_path / problem.replace(" ", "-"), rng)
        for r in range(5):
            if b_status:
                write_start(b / f"round-{r}", [1000.0], 10.0, rng, point_id="p2", status=b_status)
            write_start(c / f"round-{r}", [1000.0], 10.0, rng, point_id="p2", status=c_status)
        result = compare_dirs(b, c)
        assert list(result["no_baseline"].problem) == [problem]
        code, line = outcome(result)
        assert (
            code == ExitCode.INCONCLUSIVE and f"1 point(s) without an ok baseline to judge against ({problem})" in line
        )
        assert "### Not judged: no ok baseline" in compare_markdown(result)


def test_a_significant_slowdown_below_min_effect_passes_with_its_bound_and_min_above_max_is_refused(tmp_path, rng):
    """A significant 1.8% slowdown below --min-effect 2% is not a regression; the pass states the bound the code
    computed (about 2%), not a detectable effect."""
    base = write_side(tmp_path / "a", [[x] for x in rng.normal(1000, 2, 7)], 10.0, rng)
    cand = write_side(tmp_path / "b", [[x] for x in rng.normal(982, 2, 7)], 10.0, rng)
    result = compare_dirs(base, cand)
    t = result["table"].set_index("metric")
    assert t.loc["output_throughput", "verdict"] == "no regression" and t.loc["output_throughput", "p_adjusted"] < 0.01
    code, line = outcome(result)
    bound = result["table"][result["table"].metric.isin(["output_throughput", "tpot_ms"])].upper.max()
    assert code == ExitCode.OK and line.startswith(f"no regression larger than 5.0% (upper 95% bound {bound:.1%}")
    assert 0.018 < bound < 0.05
    with pytest.raises(BenchError, match="--min-effect 10.0% is larger than --max-effect 5.0%"):
        compare_dirs(base, cand, min_effect=0.1, max_effect=0.05)


def test_noise_no_number_of_rounds_can_pass_is_said_not_an_endless_loop(tmp_path, monkeypatch):
    """Found in review (permutation era): a level no design reached hung the search for the starts needed. Now the
    plan looks up to 1000 rounds and says so; ab with no --rounds refuses such a plan."""
    from bench.commands import ab
    from bench.verdicts.stats import sequential_levels

    need, text = plan_design(5, 0.05, 0.9, 0.05)
    assert need is None and "no number of rounds up to 1000" in text
    levels = sequential_levels(4, 20, 0.000005)
    # O'Brien-Fleming by hand (scipy.stats.norm.sf / isf, once): spent(t) = 2 sf(z_{1 - 0.0000025} / sqrt(t)), z =
    # 4.5648; the last looks' shares spent(n / 20) - spent((n - 1) / 20)
    assert levels and min(levels) >= 4 and levels[20] == pytest.approx(2.17808e-06, rel=1e-5)
    assert levels[19] == pytest.approx(1.32546e-06, rel=1e-5) and levels[12] == pytest.approx(3.03979e-09, rel=1e-5)
    env = ab.Env("python", None)
    with pytest.raises(BenchError, match="no number of rounds up to 1000"):
        ab.run_ab("tiny", env, env, rounds=None, out=tmp_path / "ab", expected_noise=0.9)


def test_ab_calibrate_with_a_candidate_is_refused(tmp_path, capsys):
    """Found in review: `ab --calibrate --candidate X` ran an A/B, exited 0 when inconclusive and stored the A/B's
    spread, treatment included, as this machine's noise."""
    out = tmp_path / "ab"
    args = ["ab", "tiny", "--baseline", sys.executable, "--candidate", sys.executable, "--calibrate"]
    assert main([*args, "--candidate-env", "BENCH_STEP_DELAY_MS=5", "--out", str(out)]) == 1 and not out.exists()
    assert "ab --calibrate runs an A/A of the baseline" in capsys.readouterr().err


def test_sides_measured_differently_are_refused_unless_asked_and_then_listed(tmp_path, rng, capsys):
    """Found in review (stop 34): `[run] prompt_ids` is a run option, not part of the point id, and compare matched
    points measured with different prompt styles without a word. Now every key marked as defining the figures
    (bench.config.run_options.figure_keys) and the headline's window must match across every start of both sides."""
    run = Run().model_dump()
    base = tmp_path / "a"
    for r, x in enumerate(rng.normal(1000, 2, 5)):
        write_start(base / f"round-{r}", [x], 10.0, rng, run=run)
    cand = tmp_path / "b"
    for r, x in enumerate(rng.normal(1000, 2, 5)):
        mixed = {**run, "prompt_ids": "consecutive"} if r == 4 else run  # one start of five is enough to refuse
        write_start(cand / f"round-{r}", [x], 10.0, rng, run=mixed, window="steady" if r == 0 else "whole")
    with pytest.raises(BenchError, match="prompt_ids: baseline uniform, candidate consecutive / uniform") as exc:
        compare_dirs(base, cand)
    assert "headline window: baseline whole, candidate steady / whole" in str(exc.value)
    assert main(["compare", str(base), str(cand)]) == ExitCode.USER_ERROR
    assert "--across-methods" in capsys.readouterr().err
    result = compare_dirs(base, cand, across_methods=True)
    assert sorted(result["method_differences"].key) == ["headline window", "prompt_ids"]
    assert "### Measured differently (--across-methods" in compare_markdown(result)
    assert main(["compare", str(base), str(cand), "--across-methods"]) == ExitCode.OK
    # the same method on both sides, and keys that only change duration or precision, compare as before
    longer = {**run, "num_prompts": 64, "window_s": 30.0, "prompt_salt": "x"}
    same = write_side(tmp_path / "c", [[x] for x in rng.normal(1000, 2, 5)], 10.0, rng, run=longer)
    assert compare_dirs(base, same)["method_differences"].empty
    # results of a bench before a key existed: "not recorded", a difference too (the older bench may have measured
    # otherwise); the flag still compares them
    old = {k: v for k, v in run.items() if k != "stagger"}
    older = write_side(tmp_path / "d", [[x] for x in rng.normal(1000, 2, 5)], 10.0, rng, run=old)
    with pytest.raises(BenchError, match="stagger: baseline not recorded, candidate true"):
        compare_dirs(older, base)
