"""The PR gate's outcomes (docs/verdicts.md): regression (4), no regression larger than --max-effect with the upper
bound stated (0), inconclusive (6) when the bound is above it; one-sided t bounds on log ratios, paired by round by
default; the multiplicity adjustment of the regression side; the locked design of `bench ab`, its sequential looks
and futility stop, and the rounds --calibrate plans. Results directories are synthetic: one value per server start
(tests/unit/test_compare.py writes them)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from bench.core.errors import BenchError, ExitCode
from bench.verdicts.compare import compare_dirs, compare_markdown, judge, outcome
from bench.verdicts.stats import (
    benjamini_hochberg,
    compare_servers,
    holm,
    obrien_fleming_spent,
    per_test_alpha,
    plan_design,
    plan_rounds,
    sd_upper_bound,
    sequential_levels,
)
from tests.unit.test_compare import write_start

REPO = Path(__file__).resolve().parents[2]


def side(root, means, tpot_ms, rng, points=("p1",)):
    for r, m in enumerate(means):
        for pid in points:
            write_start(root / f"round-{r}", [m], tpot_ms, rng, point_id=pid)
    return root


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def exact_logs(mean: float, sd: float, n: int) -> np.ndarray:
    """n log ratios with exactly this mean and sample sd."""
    z = np.arange(n) - (n - 1) / 2
    return mean + sd * z / np.std(z, ddof=1)


def rounds_with(log_slowdowns: np.ndarray) -> tuple[list[list[float]], list[list[float]]]:
    """Latency starts (lower is better) whose per-round log ratios are exactly `log_slowdowns`."""
    base = [[100.0 * (1 + 0.01 * i)] for i in range(len(log_slowdowns))]
    return base, [[b[0] * math.exp(d)] for b, d in zip(base, log_slowdowns)]


def test_holm_and_bh_against_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005, None]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02, None])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02, None])
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.3, 0.4]) == pytest.approx([0.6, 0.6]), "monotone: a larger p never gets a smaller adjusted p"
    assert per_test_alpha(0.05, 40, "holm") == pytest.approx(0.00125) and per_test_alpha(0.05, 40, "none") == 0.05


# --- the bounds, by hand ---------------------------------------------------------------------------------------


def test_paired_bound_is_the_t_bound_on_the_mean_log_ratio():
    """5 rounds whose log ratios have mean 0.01 and sd 0.02: the upper bound of the log slowdown is
    0.01 + t_{0.95,4} x 0.02 / sqrt(5), the lower 0.01 - t_{0.975,4} x ..., the p scipy's one-sided t test's."""
    d = exact_logs(0.01, 0.02, 5)
    base, cand = rounds_with(d)
    c = compare_servers(base, cand, False, min_effect=0.02, max_effect=0.05, alpha=0.025, pass_alpha=0.05)
    se = 0.02 / math.sqrt(5)
    assert c.upper == pytest.approx(math.expm1(0.01 + sps.t.ppf(0.95, 4) * se))
    assert c.lower == pytest.approx(math.expm1(0.01 - sps.t.ppf(0.975, 4) * se))
    assert c.p_value == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    assert c.ratio == pytest.approx(math.exp(0.01)) and c.slowdown == pytest.approx(math.expm1(0.01))
    # a throughput (higher is better): the same starts read as 1% faster; its log slowdown is -0.01
    up = compare_servers(base, cand, True, min_effect=0.02, max_effect=0.05, alpha=0.025, pass_alpha=0.05)
    s_upper = -0.01 + sps.t.ppf(0.95, 4) * se
    assert up.slowdown == pytest.approx(-math.expm1(0.01)) and up.upper == pytest.approx(-math.expm1(-s_upper))


def test_unpaired_bound_is_welch_on_the_mean_logs():
    b = [[x] for x in (100.0, 104.0, 97.0, 101.0)]
    c = [[x] for x in (106.0, 109.0, 103.0, 111.0, 104.0)]
    found = compare_servers(b, c, False, min_effect=0.02, max_effect=0.05, alpha=0.05, paired=False)
    lb, lc = np.log([x[0] for x in b]), np.log([x[0] for x in c])
    welch = sps.ttest_ind(lc, lb, equal_var=False, alternative="greater")
    assert found.p_value == pytest.approx(welch.pvalue)
    ci = sps.ttest_ind(lc, lb, equal_var=False).confidence_interval(0.90)  # its ends: the one-sided 95% bounds
    assert found.upper == pytest.approx(math.expm1(ci.high)) and found.lower == pytest.approx(math.expm1(ci.low))


@pytest.mark.parametrize(
    ("mean", "sd", "verdict"),
    [
        (0.00, 0.01, "no regression"),  # upper = 0 + 2.13 x 0.0045 = 1.0% < 5%
        (0.00, 0.06, "inconclusive"),  # upper = e^(2.13 x 0.06 / sqrt(5)) - 1 = 5.9% > 5%
        (0.03, 0.01, "slower"),  # p = t_4(6.7) ~ 0.001 < 0.025, slowdown 3.0% >= 2%
        (0.015, 0.005, "no regression"),  # significant but 1.5% < --min-effect 2%: not counted; upper 2.0% < 5%
        (0.04, 0.04, "inconclusive"),  # p = 0.044 > 0.025 (alpha / 2 tests); upper 8.1% > 5%
        (-0.05, 0.01, "faster"),
    ],
)
def test_tost_verdicts_on_constructed_rounds(mean, sd, verdict):
    """Known answers: a pass needs the upper bound below 5%, a regression the one-sided p below the level and a
    slowdown of at least 2%; else inconclusive. The bounds checked against the formula."""
    d = exact_logs(mean, sd, 5)
    base, cand = rounds_with(d)
    found = compare_servers(base, cand, False, min_effect=0.02, max_effect=0.05, alpha=0.025, pass_alpha=0.05)
    upper = math.expm1(mean + sps.t.ppf(0.95, 4) * sd / math.sqrt(5))
    assert found.upper == pytest.approx(upper) and found.verdict == verdict


def test_judge_tost_pass_inconclusive_and_fail(tmp_path):
    """One point, 6 rounds, through compare's judge and outcome: each way the gate can end, its line naming the
    bound the code computed."""

    def point(mean, sd):
        d = exact_logs(mean, sd, 6)
        base = [{"output_throughput": [1000.0], "tpot_ms": [10.0]} for _ in d]
        cand = [{"output_throughput": [1000.0 * math.exp(-x)], "tpot_ms": [10.0 * math.exp(x)]} for x in d]
        return [("p1", "P", base, cand)]

    passed = judge(point(0.0, 0.01), paired=True)
    code, line = outcome(passed)
    tp = passed["table"].set_index("metric").loc["tpot_ms"]
    expected = math.expm1(sps.t.ppf(0.95, 5) * 0.01 / math.sqrt(6))
    assert code == ExitCode.OK and tp.upper == pytest.approx(expected)
    assert line.startswith(f"no regression larger than 5.0% (upper 95% bound {expected:.1%}: TPOT at P")
    code, line = outcome(judge(point(0.0, 0.06), paired=True))
    assert code == ExitCode.INCONCLUSIVE and "above max effect 5.0%" in line and "more rounds would settle it" in line
    code, line = outcome(judge(point(0.10, 0.03), paired=True))
    assert code == ExitCode.GATE_FAILED and line.startswith("regression: TPOT at P slower by 10.5% (lower 97.5% bound")
    code, line = outcome(judge(point(0.08, 0.0001), paired=True, min_effect=0.05, max_effect=0.1))
    assert code == ExitCode.GATE_FAILED  # 8.3% >= --min-effect 5%: a regression though under --max-effect 10%
    with pytest.raises(BenchError, match="--min-effect 10.0% is larger than --max-effect 5.0%"):
        judge(point(0.0, 0.01), min_effect=0.1, max_effect=0.05)


def test_the_bound_covers_at_its_nominal_rate():
    """The one-sided 95% upper bound of compare_servers, 4 rounds, normal noise: at or above the true slowdown
    (5%) in 95% of 2,000 draws (the binomial 99.9% range: 93.3-96.5%)."""
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(2000):
        base = [[1000.0 * math.exp(e)] for e in rng.normal(0, 0.03, 4)]
        cand = [[1000.0 * 0.95 * math.exp(e)] for e in rng.normal(0, 0.03, 4)]
        found = compare_servers(base, cand, True, min_effect=0.02, alpha=0.05)
        covered += found.upper >= 0.05 - 1e-12
    assert 0.933 <= covered / 2000 <= 0.965


# --- compare over results directories -----------------------------------------------------------------------


def test_a_clear_regression_fails_the_gate(tmp_path, rng):
    base = side(tmp_path / "a", rng.normal(1000, 10, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(800, 8, 6), 12.5, rng)
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    assert code == ExitCode.GATE_FAILED and line.startswith("regression")
    gated = result["table"][result["table"].metric.isin(["output_throughput", "tpot_ms"])]
    assert set(gated.verdict) == {"slower"} and result["paired"], "round-N folders on both sides: paired"
    assert (gated.p_adjusted >= gated.p_value).all(), "Holm never lowers a p"


def test_a_quiet_aa_passes_with_its_bound_stated(tmp_path, rng):
    base = side(tmp_path / "a", rng.normal(1000, 3, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(1000, 3, 6), 10.0, rng)
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    worst = result["table"][result["table"].metric.isin(["output_throughput", "tpot_ms"])].upper.max()
    assert code == ExitCode.OK and line.startswith(f"no regression larger than 5.0% (upper 95% bound {worst:.1%}")
    assert f"**Outcome: {line}**" in compare_markdown(result)


def test_a_pass_over_a_flagged_server_start_is_inconclusive(tmp_path, rng):
    """The quiet A/A above, with one candidate start whose record carries a flag (bench.run.executor._flags): its figures
    stay in the test (a change that contaminates windows must not be dropped from its own comparison), so the
    pass becomes inconclusive and compare.md names the start. A regression stays a regression."""
    base = side(tmp_path / "a", rng.normal(1000, 3, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(1000, 3, 6), 10.0, rng)
    record = cand / "round-2" / "points" / "p1.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "flags": ["window contaminated (jit-compile) after 1 re-measure(s)"]}))
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    assert (
        code == ExitCode.INCONCLUSIVE
        and line == "inconclusive: 1 flagged server start(s) in the comparison (compare.md lists them)"
    )
    text = compare_markdown(result)
    assert "### Flagged server starts" in text and "| candidate | round-2 | window contaminated (jit-compile)" in text
    slower = side(tmp_path / "c", rng.normal(800, 3, 6), 12.5, rng)
    record = slower / "round-1" / "points" / "p1.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "flags": ["prefix cache hit 20.0%"]}))
    assert outcome(compare_dirs(base, slower))[0] == ExitCode.GATE_FAILED


def test_a_noisy_aa_is_inconclusive_not_a_pass(tmp_path, rng):
    base = side(tmp_path / "a", [1000, 1200, 850, 1100, 950, 1050], 10.0, rng)
    cand = side(tmp_path / "b", [1100, 900, 1000, 1250, 870, 1000], 10.0, rng)  # CV ~13%, means 1.3% apart
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    assert code == ExitCode.INCONCLUSIVE and "above max effect 5.0%" in line
    assert "Outcome: inconclusive" in compare_markdown(result)
    assert outcome(compare_dirs(base, cand, max_effect=0.9))[0] == ExitCode.OK, "a looser bound the data meets"


def test_too_few_rounds_is_insufficient_data_and_holm_guards_the_regression_side(tmp_path, rng):
    """2 rounds: no bound (insufficient data, inconclusive). Four points' eight gated tests: a 3% slowdown at one
    point with p ~ 0.004 one-sided is a regression alone (correction none) but not after Holm (x 8)."""
    base = side(tmp_path / "a", [1000.0, 1001.0], 10.0, rng)
    cand = side(tmp_path / "b", [700.0, 701.0], 14.0, rng)
    code, line = outcome(compare_dirs(base, cand))
    assert code == ExitCode.INCONCLUSIVE and "too few rounds (needs 3, has 2)" in line
    d = exact_logs(0.04, 0.02, 4)  # t = 4 on 3 df: p = 0.014 (x 8 = 0.11); upper 6.6% > 5%
    quiet = exact_logs(0.0, 0.001, 4)
    points = []
    for k in range(4):
        logs = d if k == 0 else quiet
        b = [{"output_throughput": [1000.0], "tpot_ms": [10.0]} for _ in logs]
        c = [{"output_throughput": [1000.0 * math.exp(-x)], "tpot_ms": [10.0 * math.exp(x)]} for x in logs]
        points.append((f"p{k}", f"P{k}", b, c))
    holm_result = judge(points, paired=True)
    assert holm_result["gated_tests"] == 8 and outcome(holm_result)[0] == ExitCode.INCONCLUSIVE
    assert outcome(judge(points, paired=True, correction="none"))[0] == ExitCode.GATE_FAILED


# --- paired by round -----------------------------------------------------------------------------------------------


def test_pairing_removes_round_drift_that_hides_a_regression(tmp_path, rng):
    """Each round shifts both sides alike (machine state); the candidate is 4% slower within every round. The
    unpaired test drowns in the drift, the paired one (compare's default for round-N folders) sees it."""
    drift = rng.normal(0, 120, 8)
    base = side(tmp_path / "a", 1000 + drift, 10.0, rng)
    cand = side(tmp_path / "b", (1000 + drift) * 0.96 + rng.normal(0, 2, 8), 10.0, rng)
    unpaired = compare_dirs(base, cand, correction="none", paired=False)
    paired = compare_dirs(base, cand, correction="none")
    row = {
        name: r[r.metric == "output_throughput"].iloc[0]
        for name, r in (("u", unpaired["table"]), ("p", paired["table"]))
    }
    assert row["u"].verdict == "inconclusive" and row["p"].verdict == "slower" and paired["paired"]
    assert row["p"].upper - row["p"].lower < 0.02 < row["u"].upper - row["u"].lower
    assert "paired by round" in compare_markdown(paired) and "unpaired" in compare_markdown(unpaired)


def test_pairing_needs_rounds_both_sides_ran(tmp_path, rng):
    base = side(tmp_path / "a", [1000, 1010, 990, 1005, 995, 1000], 10.0, rng)
    write_start(tmp_path / "b" / "other", [1000.0], 10.0, rng)
    with pytest.raises(BenchError, match="--paired needs the rounds"):
        compare_dirs(base, tmp_path / "b", paired=True)
    assert not compare_dirs(base, tmp_path / "b")["paired"], "by default: unpaired where the folders are not rounds"


def test_only_round_folders_pair_and_a_point_without_common_rounds_is_inconclusive(tmp_path, rng):
    """Folders that merely share a name are not rounds of one `ab`: they never pair. A point that has no round on
    both sides (it ran only in rounds the other side lost) is insufficient data, so the comparison ends
    inconclusive (6) instead of aborting with a user error."""
    for name in ("start-a", "start-b", "start-c"):
        write_start(tmp_path / "a" / name, [1000.0], 10.0, rng)
        write_start(tmp_path / "b" / name, [900.0], 10.0, rng)
    with pytest.raises(BenchError, match="--paired needs the rounds"):
        compare_dirs(tmp_path / "a", tmp_path / "b", paired=True)
    base = side(tmp_path / "c", [1000.0] * 12, 10.0, rng)
    cand = side(tmp_path / "d", [1000.0] * 12, 10.0, rng)
    for r in range(6):  # point p2 ran in the baseline's rounds 0-5 and the candidate's 6-11 only
        write_start(tmp_path / "c" / f"round-{r}", [1000.0], 10.0, rng, point_id="p2")
        write_start(tmp_path / "d" / f"round-{r + 6}", [1000.0], 10.0, rng, point_id="p2")
    result = compare_dirs(base, cand, paired=True, correction="none")
    p2 = result["table"][result["table"].point_id == "p2"]
    assert len(p2) and (p2.verdict == "insufficient data").all()
    assert outcome(result)[0] == ExitCode.INCONCLUSIVE


def test_ab_pairs_by_round_unless_told_otherwise(monkeypatch):
    from bench.cli import main
    from bench.commands import ab

    seen: dict = {}
    monkeypatch.setattr(ab, "run_ab", lambda *args, **kw: seen.update(kw) or 0)
    monkeypatch.setattr(ab, "parse_env", lambda spec, extra=None: spec)
    assert main(["ab", "tiny", "--baseline", "a", "--candidate", "b"]) == 0 and seen["paired"] is True
    assert seen["rounds"] is None, "planned from the noise"
    assert main(["ab", "tiny", "--baseline", "a", "--candidate", "b", "--unpaired"]) == 0 and seen["paired"] is False


# --- sequential rounds -------------------------------------------------------------------------------------------


def test_obrien_fleming_spending_by_hand():
    z = sps.norm.ppf(0.975)
    assert obrien_fleming_spent(0.5, 0.05) == pytest.approx(2 - 2 * sps.norm.cdf(z / 0.5**0.5))  # 0.0056
    assert obrien_fleming_spent(1.0, 0.05) == pytest.approx(0.05)
    assert obrien_fleming_spent(0.0, 0.05) == 0.0
    spent = [obrien_fleming_spent(n / 10, 0.05) for n in range(1, 11)]
    assert spent == sorted(spent) and spent[0] < 1e-6  # spends little early, monotone


def test_sequential_looks_spend_exactly_alpha_one_look_a_round():
    for rounds, max_rounds in ((4, 12), (3, 10), (6, 20), (5, 5)):
        levels = sequential_levels(rounds, max_rounds, 0.05)
        assert list(levels) == list(range(max(rounds, 3), max_rounds + 1))
        assert sum(levels.values()) == pytest.approx(0.05) and all(v > 0 for v in levels.values())
    assert sequential_levels(1, 4, 0.05).keys() == {3, 4}, "no look before 3 rounds: a t bound needs them"


def test_futility_rule_by_hand():
    """At 4 of 10 rounds: a spread the 10th round's bound cannot bring under 5% stops (inconclusive); the same with
    a small spread, or with a slowdown whose lower bound at 10 rounds would clear 0, does not."""
    from bench.commands.ab import futile

    def result(mean, sd):
        d = exact_logs(mean, sd, 4)
        base = [{"output_throughput": [1000.0], "tpot_ms": [10.0]} for _ in d]
        cand = [{"output_throughput": [1000.0 * math.exp(-x)], "tpot_ms": [10.0 * math.exp(x)]} for x in d]
        return judge([("p1", "P", base, cand)], paired=True, alpha=0.002)

    last = sequential_levels(4, 10, 0.05)[10]
    # projected upper at 10 rounds: 0 + t_{1-last, 9} x sd_low / sqrt(10), sd_low the 95% lower bound of 0.12 on
    # 3 df (0.12 x sqrt(3 / chi2_0.95(3)) = 0.074): 6.5% > log(1.05): futile; from 0.06 (sd_low 0.037, 3.2%): not
    low = 0.12 * math.sqrt(3 / sps.chi2.ppf(0.95, 3))
    assert sps.t.ppf(1 - last, 9) * low / math.sqrt(10) > math.log(1.05) and futile(result(0.0, 0.12), 10, last)
    assert not futile(result(0.0, 0.06), 10, last), "an optimistic spread could still pass: keep going"
    assert not futile(result(0.0, 0.02), 10, last)  # 1.7% at 10 rounds: a pass is in reach
    assert not futile(result(0.15, 0.12), 10, last), "a regression in sight: keep going"


@pytest.mark.parametrize(
    ("slowdown", "noise", "code"),
    [
        (0.7, 5, ExitCode.GATE_FAILED),  # a 30% regression: the first look (4 rounds) decides
        (1.0, 5, ExitCode.OK),  # a quiet A/A: the upper bound under 5% at the first look, a pass
        (1.0, 120, ExitCode.INCONCLUSIVE),  # a noisy A/A: futile at the first look, no more rounds run
        (1.0, 25, ExitCode.OK),  # 2.5% noise: not yet at 4 rounds, not futile, a pass at a later look
    ],
)
def test_ab_sequential_loop_stops_at_the_first_deciding_or_futile_look(
    tmp_path, monkeypatch, rng, slowdown, noise, code
):
    """bench ab --rounds 4 --max-rounds 10 on the tiny profile (2 points, 4 gated tests), its rounds replaced by
    synthetic server starts."""
    from bench.commands import ab

    made = []

    def fake_round(r, total, a, b, out, profile, repeat, ray, warm=None, extra=None):
        made.append(r)
        for side_name, factor in (("baseline", 1.0), ("candidate", slowdown)):
            for pid in ("p1", "p2"):
                write_start(
                    out / side_name / f"round-{r}", [rng.normal(1000, noise) * factor], 10.0 / factor, rng, point_id=pid
                )

    monkeypatch.setattr(ab, "_round", fake_round)
    env = ab.Env("python", None)
    got = ab.run_ab("tiny", env, env, rounds=4, out=tmp_path / "ab", max_rounds=10, expected_noise=0.05)
    looks = json.loads((tmp_path / "ab" / "looks.json").read_text())
    assert got == code and looks[-1]["exit"] == code and looks[0]["rounds"] == 4
    assert len(made) == looks[-1]["rounds"] and sum(k["level"] for k in looks) <= 0.05
    if noise == 25:
        assert 4 < len(made) <= 10 and not any(k["futile"] for k in looks)
    else:
        assert len(made) == 4
    assert looks[-1]["futile"] == (noise == 120)
    text = (tmp_path / "ab" / "compare.md").read_text()
    assert "## Sequential looks" in text and (noise != 120 or "futility stop" in text)
    design = json.loads((tmp_path / "ab" / "design.json").read_text())
    # O'Brien-Fleming levels by hand: spent(t) = 2 sf(z_{0.975} / sqrt(t)) at t = n / 10, each look the difference
    # (computed once with scipy.stats.norm.sf / isf, not with bench.verdicts.stats)
    spent_by_hand = {
        4: 0.00194191,
        5: 0.00363268,
        6: 0.00582182,
        7: 0.00775322,
        8: 0.00927999,
        9: 0.0104004,
        10: 0.01117,
    }
    assert design["looks"] == {str(n): pytest.approx(v, rel=1e-5) for n, v in spent_by_hand.items()}


# --- the locked design -----------------------------------------------------------------------------------------


def test_a_resumed_ab_keeps_its_locked_design(tmp_path, monkeypatch, rng):
    """design.json is written before the first round; --resume with another design exits 1 naming each changed key
    and both values (nothing more runs), with the same design it continues, and without --rounds it takes the
    locked rounds."""
    from bench.cli import main
    from bench.commands import ab

    made = []

    def fake_round(r, total, a, b, out, profile, repeat, ray, warm=None, extra=None):
        made.append(r)
        for side_name in ("baseline", "candidate"):
            if not (out / side_name / f"round-{r}").exists():  # a finished sweep resumes as a no-op
                write_start(out / side_name / f"round-{r}", [rng.normal(1000, 30)], 10.0, rng)

    monkeypatch.setattr(ab, "_round", fake_round)
    env = ab.Env("python", None)
    out = tmp_path / "ab"
    ab.run_ab("tiny", env, env, rounds=4, out=out, expected_noise=0.05)
    design = json.loads((out / "design.json").read_text())
    assert design["rounds"] == 4 and design["paired"] is True and design["max_effect"] == 0.05
    assert design["gated"] == ["output_throughput", "tpot_ms"] and design["profile"].startswith("tiny (")
    made.clear()
    with pytest.raises(BenchError) as exc:
        ab.run_ab("tiny", env, env, rounds=6, out=out, expected_noise=0.05, max_effect=0.1, resume=True)
    assert "rounds: locked 4, given 6" in str(exc.value) and "max_effect: locked 0.05, given 0.1" in str(exc.value)
    assert "alpha" not in str(exc.value) and not made
    with pytest.raises(BenchError, match=r"max_rounds: locked null, given 8; looks: locked \{\}, given"):
        ab.run_ab("tiny", env, env, rounds=4, out=out, expected_noise=0.05, max_rounds=8, resume=True)
    with pytest.raises(BenchError, match="paired: locked true, given false"):
        ab.run_ab("tiny", env, env, rounds=4, out=out, expected_noise=0.05, paired=False, resume=True)
    args = ["ab", "tiny", "--baseline", "python", "--candidate", "python", "--out", str(out), "--resume"]
    monkeypatch.setattr(ab, "parse_env", lambda spec, extra=None: env)
    assert main([*args, "--alpha", "0.1"]) == ExitCode.USER_ERROR
    assert ab.run_ab("tiny", env, env, rounds=4, out=out, expected_noise=0.05, resume=True) in (0, 6)
    assert ab.run_ab("tiny", env, env, rounds=None, out=out, expected_noise=0.05, resume=True) in (0, 6)
    assert made == [0, 1, 2, 3, 0, 1, 2, 3], "an unchanged resume runs (each finished round resumes as a no-op)"


# --- planning and calibration ----------------------------------------------------------------------------------


def test_planned_rounds_by_hand_and_their_power():
    """plan_rounds: the fewest n with (t_{0.95,n-1} + t_{0.8,n-1}) x sd / sqrt(n) <= log(1.05); at that n an A/A's
    upper bound falls under 5% in about 80% of draws (the real compare_servers, 600 draws)."""
    sd = 0.03
    n = plan_rounds(sd, 0.05, 0.05, higher_better=False)
    assert n is not None
    ok = [(sps.t.ppf(0.95, m - 1) + sps.t.ppf(0.8, m - 1)) * sd / math.sqrt(m) <= math.log(1.05) for m in (n - 1, n)]
    assert ok == [False, True] and n == 5
    assert plan_rounds(0.7, 0.05, 0.05) is None, "beyond 1000 rounds: none"
    rng = np.random.default_rng(11)
    passes = 0
    for _ in range(600):
        d = rng.normal(0, sd, n)
        base, cand = rounds_with(d)
        passes += compare_servers(base, cand, False, min_effect=0.02, alpha=0.05).verdict == "no regression"
    assert 0.74 <= passes / 600 <= 0.86
    need, text = plan_design(4, 0.05, sd, 0.05)
    assert need == 5 and "4 will most likely end inconclusive" in text


def test_the_planning_noise_is_an_upper_bound_of_the_sd():
    """80% one-sided chi-square bound: sd x sqrt(df / chi2_{0.2}(df)); it shrinks toward sd as df grows."""
    # chi2_{0.2}(4) = 1.64877662: the root of 1 - exp(-x / 2) (1 + x / 2) = 0.2 (4 df), by bisection; 0.02 x sqrt(4 / it)
    assert sd_upper_bound(0.02, 4) == pytest.approx(0.03115151, rel=1e-6)
    assert sd_upper_bound(0.02, 4) > sd_upper_bound(0.02, 40) > 0.02


def test_ab_without_rounds_runs_the_rounds_the_noise_plans(tmp_path, monkeypatch, rng):
    from bench.commands import ab
    from bench.verdicts.stats import paired_sd_from_cv

    made = []

    def fake_round(r, total, a, b, out, profile, repeat, ray, warm=None, extra=None):
        made.append(r)
        for side_name in ("baseline", "candidate"):
            for pid in ("p1", "p2"):
                write_start(out / side_name / f"round-{r}", [rng.normal(1000, 10)], 10.0, rng, point_id=pid)

    monkeypatch.setattr(ab, "_round", fake_round)
    env = ab.Env("python", None)
    ab.run_ab("tiny", env, env, rounds=None, out=tmp_path / "ab", expected_noise=0.02)
    planned = plan_rounds(paired_sd_from_cv(0.02), 0.05, 0.05, higher_better=False)
    assert len(made) == planned and json.loads((tmp_path / "ab" / "design.json").read_text())["rounds"] == planned
    with pytest.raises(BenchError, match="at least 3 rounds"):
        ab.run_ab("tiny", env, env, rounds=2, out=tmp_path / "ab2", expected_noise=0.02)


def test_ab_resume_continues_a_cut_run_and_reruns_only_what_is_missing(tmp_path, monkeypatch, rng):
    """An A/B cut by a time limit in round 3 (its candidate sweep never ran): `ab --resume` passes `sweep --resume`
    for every round folder that holds a manifest (a finished sweep starts no server), a fresh sweep for the rest, and
    judges all 5 rounds. Without --resume the folder is refused."""
    from bench.commands import ab
    from bench.core.errors import BenchError

    calls: list[tuple[str, bool]] = []
    cut = {"at": ("candidate", 2)}

    def fake_run(env, args):
        if args[0] != "sweep":
            return 0
        out = Path(args[args.index("--out") + 1])
        side, r = out.parent.name, int(out.name.split("-")[1])
        calls.append((f"{side}-{r}", "--resume" in args))
        if (side, r) == cut["at"]:
            raise BenchError("the call's time limit")
        if not (out / "points").is_dir():  # what a finished sweep --resume would leave alone
            write_start(out, [rng.normal(1000, 5) * (0.7 if side == "candidate" else 1.0)], 10.0, rng)
        return 0

    monkeypatch.setattr(ab, "_run", fake_run)
    env = ab.Env("python", None)
    with pytest.raises(BenchError, match="time limit"):
        ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05)
    assert calls == [("baseline-0", False), ("candidate-0", False), ("candidate-1", False), ("baseline-1", False),
                     ("baseline-2", False), ("candidate-2", False)]  # fmt: skip
    with pytest.raises(BenchError, match="already holds an A/B run"):
        ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05)
    with pytest.raises(BenchError, match="needs --out"):
        ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "none", expected_noise=0.05, resume=True)
    calls.clear()
    cut["at"] = None
    got = ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, resume=True)
    resumed = dict(calls)
    assert len(calls) == 10 and all(resumed[f"{s}-{r}"] for s in ("baseline", "candidate") for r in (0, 1))
    assert resumed["baseline-2"] and not resumed["candidate-2"]  # the cut sweep had written nothing
    assert not any(resumed[f"{s}-{r}"] for s in ("baseline", "candidate") for r in (3, 4))
    assert got == ExitCode.GATE_FAILED  # a 30% slower candidate over all 5 rounds


def test_ab_sends_both_sides_of_a_round_the_same_prompts_and_each_round_fresh_ones(tmp_path, monkeypatch, rng):
    """Each `ab` round passes one `--prompt-salt` to both sides' sweeps (a text workload's sides get the same
    conversations), a new one the next round; `ab --resume` keeps the A/B's salt, so a cut round's missing side
    is sent what its other side was."""
    from bench.commands import ab
    from bench.core.errors import BenchError

    salts: dict[str, str] = {}
    cut = {"at": ("candidate", 1)}

    def fake_run(env, args):
        if args[0] != "sweep":
            return 0
        out = Path(args[args.index("--out") + 1])
        side, r = out.parent.name, int(out.name.split("-")[1])
        salts[f"{side}-{r}"] = args[args.index("--prompt-salt") + 1]
        if (side, r) == cut["at"]:
            raise BenchError("the call's time limit")
        if not (out / "points").is_dir():
            write_start(out, [rng.normal(1000, 5)], 10.0, rng)
        return 0

    monkeypatch.setattr(ab, "_run", fake_run)
    env = ab.Env("python", None)
    with pytest.raises(BenchError, match="time limit"):
        ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05)
    first = dict(salts)
    cut["at"] = None
    ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, resume=True)
    assert salts["candidate-1"] == first["candidate-1"], "the resumed round: the salt it had"
    for r in range(5):
        assert salts[f"baseline-{r}"] == salts[f"candidate-{r}"]
    assert len({salts[f"baseline-{r}"] for r in range(5)}) == 5


def test_ab_keeps_a_profiles_own_prompt_salt(tmp_path, monkeypatch, rng):
    """A profile that pins `[run] prompt_salt` gets its rounds named from it (`{salt}-r{r}`), not a new salt that
    overrides it; resuming that A/B with a profile that pins another salt is refused."""
    from bench.commands import ab
    from bench.core.errors import BenchError

    salts: dict[str, str] = {}

    def fake_run(env, args):
        if args[0] != "sweep":
            return 0
        out = Path(args[args.index("--out") + 1])
        salts[f"{out.parent.name}-{out.name}"] = args[args.index("--prompt-salt") + 1]
        if not (out / "points").is_dir():
            write_start(out, [rng.normal(1000, 5)], 10.0, rng)
        return 0

    profile = tmp_path / "pinned.toml"
    profile.write_text(
        (REPO / "profiles" / "tiny.toml").read_text().replace("[run]", '[run]\nprompt_salt = "pinned"', 1)
    )
    monkeypatch.setattr(ab, "_run", fake_run)
    env = ab.Env("python", None)
    ab.run_ab(str(profile), env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05)
    assert salts == {f"{s}-round-{r}": f"pinned-r{r}" for s in ("baseline", "candidate") for r in range(5)}
    profile.write_text(profile.read_text().replace('"pinned"', '"other"'))
    with pytest.raises(BenchError, match="profile: locked"):  # another profile: the locked design refuses it first
        ab.run_ab(str(profile), env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, resume=True)
    with pytest.raises(BenchError, match="pins 'other'"):
        ab.ab_salt(tmp_path / "ab", "other")


def test_ab_calibrate_stores_an_upper_bound_and_the_rounds_it_plans(tmp_path, monkeypatch, rng):
    """`ab --calibrate` (an A/A): after its rounds, per gated metric the sd of the rounds' log ratios and its 80%
    upper bound go to calibration.json and the machine's store, with the rounds that bound plans; a later plan of
    that profile on this machine uses the bound. The exit is 0 unless the A/A itself says "slower"."""
    from bench.commands import ab, calibration

    def fake_round(r, total, a, b, out, profile, repeat, ray, warm=None, extra=None):
        for side_name in ("baseline", "candidate"):
            for pid in ("p1", "p2"):
                write_start(out / side_name / f"round-{r}", [rng.normal(1000, 20)], 10.0, rng, point_id=pid)

    monkeypatch.setattr(ab, "_round", fake_round)
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    env = ab.Env("python", None)
    got = ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, calibrate=True)
    entry = json.loads((tmp_path / "ab" / "calibration.json").read_text())
    found = entry["metrics"][calibration.PLAN_METRIC]
    assert got in (ExitCode.OK, ExitCode.INCONCLUSIVE) and entry["starts_per_point"] == 10 and entry["points"] == 2
    assert 0 < found["max_cv"] < 0.1 and found["sd_log_ratio_df"] == 4  # 10 starts of N(1000, 20): a CV near 2%
    # sqrt(4 / chi2_{0.2}(4)) = sqrt(4 / 1.64877662) = 1.55757542 (see test_the_planning_noise_is_an_upper_bound...)
    assert found["sd_log_ratio_upper"] == pytest.approx(found["sd_log_ratio"] * 1.55757542, rel=1e-6)
    worst = max(m["sd_log_ratio_upper"] for m in entry["metrics"].values())
    # the fewest n with (t_{0.95, n-1} + t_{0.8, n-1}) x worst / sqrt(n) <= log 1.05 = 0.04879016 (a latency's
    # threshold); t quantiles by df, computed once with scipy.stats.t.ppf
    t95 = {2: 2.919986, 3: 2.353363, 4: 2.131847, 5: 2.015048, 6: 1.94318, 7: 1.894579, 8: 1.859548, 9: 1.833113}
    t80 = {2: 1.06066, 3: 0.978472, 4: 0.940965, 5: 0.919544, 6: 0.905703, 7: 0.89603, 8: 0.88889, 9: 0.883404}
    n = entry["planned_rounds"]
    assert n >= 3 and n - 1 in t95 and (t95[n - 1] + t80[n - 1]) * worst / math.sqrt(n) <= 0.04879016
    assert n == 3 or (t95[n - 2] + t80[n - 2]) * worst / math.sqrt(n - 1) > 0.04879016
    noise, why = calibration.planning_noise(entry["profile"], ab.detect_machine(), 0.063, tmp_path / "cache")
    assert noise == pytest.approx(worst) and "80% upper bound" in why


def test_a_round_runs_each_side_as_one_start_with_the_rounds_salt(tmp_path, monkeypatch):
    """`ab` rounds are its units: each side's sweep is one server start (`--starts 1`, whatever the profile's
    `[run] starts`), the two sides in A B / B A order, sent the round's salt."""
    from bench.commands import ab

    calls = []
    monkeypatch.setattr(ab, "_run", lambda env, args: calls.append(args) or ExitCode.OK)
    env = ab.parse_env(sys.executable)
    ab._round(1, 2, env, env, tmp_path, "tiny", 3, None)
    assert [c[c.index("--out") + 1].split("/")[-2] for c in calls] == ["candidate", "baseline"]
    for args in calls:
        assert args[args.index("--starts") + 1] == "1" and args[args.index("--repeat") + 1] == "3"
        assert args[args.index("--prompt-salt") + 1] == ab.round_salt(tmp_path, 1)
