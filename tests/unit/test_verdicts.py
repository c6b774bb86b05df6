"""The PR gate's outcomes (docs/verdicts.md): regression (4), no regression larger than the detectable effect (0),
inconclusive (6) when the data cannot rule one out; the multiplicity adjustments over the gated tests; the per-test
level a design must reach. Results directories are synthetic: one value per server start (tests/unit/test_compare.py
writes them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.compare import compare_dirs, compare_markdown, outcome
from bench.errors import ExitCode
from bench.stats import benjamini_hochberg, holm, per_test_alpha, plan_design, starts_needed
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


def test_holm_and_bh_against_hand_computed_values():
    p = [0.01, 0.04, 0.03, 0.005, None]
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02, None])
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02, None])
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.3, 0.4]) == pytest.approx([0.6, 0.6]), "monotone: a larger p never gets a smaller adjusted p"


def test_the_per_test_level_grows_the_starts_a_design_needs():
    assert per_test_alpha(0.05, 40, "holm") == pytest.approx(0.00125)
    assert per_test_alpha(0.05, 40, "none") == 0.05
    assert starts_needed(0.05) == 4 and starts_needed(0.00125) == 7
    ok, text = plan_design(5, 0.05, 0.063, tests=40)
    assert not ok and "use at least 7" in text
    ok, text = plan_design(7, 0.05, 0.063, tests=40)
    assert ok and "40 gated tests, holm" in text


def test_a_clear_regression_fails_the_gate(tmp_path, rng):
    base = side(tmp_path / "a", rng.normal(1000, 10, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(800, 8, 6), 12.5, rng)
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    assert code == ExitCode.GATE_FAILED and line.startswith("regression")
    gated = result["table"][result["table"].metric.isin(["output_throughput", "tpot_ms"])]
    assert set(gated.verdict) == {"slower"}
    assert (gated.p_adjusted >= gated.p_value).all(), "Holm never lowers a p"


def test_a_quiet_aa_passes_with_its_detectable_effect_stated(tmp_path, rng):
    base = side(tmp_path / "a", rng.normal(1000, 3, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(1000, 3, 6), 10.0, rng)
    code, line = outcome(compare_dirs(base, cand))
    assert code == ExitCode.OK and line.startswith("no regression larger than")


def test_a_pass_over_a_flagged_server_start_is_inconclusive(tmp_path, rng):
    """The quiet A/A above, with one candidate start whose record carries a flag (bench.executor._flags): its figures
    stay in the test (a change that contaminates windows must not be dropped from its own comparison), so the
    pass becomes inconclusive and compare.md names the start. A regression stays a regression."""
    import json

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
    base = side(tmp_path / "a", rng.normal(1000, 150, 6), 10.0, rng)
    cand = side(tmp_path / "b", rng.normal(1000, 150, 6), 10.0, rng)
    result = compare_dirs(base, cand)
    code, line = outcome(result)
    assert code == ExitCode.INCONCLUSIVE and "exceeds --max-effect 5%" in line
    assert "Outcome: inconclusive" in compare_markdown(result)
    assert outcome(compare_dirs(base, cand, max_effect=0.9))[0] == ExitCode.OK, "a looser bound the data meets"


def test_too_few_starts_for_the_family_is_inconclusive(tmp_path, rng):
    """5 starts reach p < 0.05 alone (at best 2/252 = 0.008), but not 0.05 / 8 over four points' eight gated tests."""
    points = ("p1", "p2", "p3", "p4")
    base = side(tmp_path / "a", rng.normal(1000, 3, 5), 10.0, rng, points)
    cand = side(tmp_path / "b", rng.normal(700, 3, 5), 14.0, rng, points)
    result = compare_dirs(base, cand)
    assert result["gated_tests"] == 8 and result["per_test_alpha"] == pytest.approx(0.05 / 8)
    code, line = outcome(result)
    assert code == ExitCode.INCONCLUSIVE and "too few server starts (needs 6 a side)" in line
    assert outcome(compare_dirs(base, cand, correction="none"))[0] == ExitCode.GATE_FAILED, "unadjusted: it would gate"


# --- paired by round ---------------------------------------------------------------------------------------------


def test_paired_exact_p_and_rounds_needed():
    from bench.stats import compare_paired, min_p_value

    assert min_p_value(5, 5, paired=True) == pytest.approx(2 / 32) and min_p_value(5, 5) == pytest.approx(2 / 252)
    assert starts_needed(0.05, paired=True) == 6 and starts_needed(0.025, paired=True) == 7
    base = [[100.0 + r] for r in range(8)]
    found = compare_paired(base, [[b[0] * 0.9] for b in base], True, min_effect=0.02, alpha=0.05)
    assert found.p_value == pytest.approx(2 / 2**8) and found.verdict == "slower"  # every flip is as extreme
    few = compare_paired(base[:5], [[b[0] * 0.9] for b in base[:5]], True, min_effect=0.02, alpha=0.05)
    assert few.verdict == "insufficient data" and few.needed == 6  # 2 / 2^5 cannot reach 0.05
    ok, text = plan_design(5, 0.05, 0.063, tests=2, paired=True)
    assert not ok and "paired (sign-flip) test" in text and "use at least 7" in text


def test_pairing_removes_round_drift_that_hides_a_regression(tmp_path, rng):
    """Each round shifts both sides alike (machine state); the candidate is 6% slower within every round. The
    unpaired test drowns in the drift, the paired one sees it."""
    drift = rng.normal(0, 80, 8)
    base = side(tmp_path / "a", 1000 + drift, 10.0, rng)
    cand = side(tmp_path / "b", (1000 + drift) * 0.94 + rng.normal(0, 2, 8), 10.0, rng)
    unpaired = compare_dirs(base, cand, correction="none")
    paired = compare_dirs(base, cand, correction="none", paired=True)
    row = {
        name: r[r.metric == "output_throughput"].iloc[0]
        for name, r in (("u", unpaired["table"]), ("p", paired["table"]))
    }
    assert row["u"].verdict == "no change" and row["p"].verdict == "slower"
    assert row["p"].mde < 0.02 < row["u"].mde
    assert "paired by round" in compare_markdown(paired)


def test_pairing_needs_rounds_both_sides_ran(tmp_path, rng):
    from bench.errors import BenchError

    base = side(tmp_path / "a", [1000, 1010, 990, 1005, 995, 1000], 10.0, rng)
    write_start(tmp_path / "b" / "other", [1000.0], 10.0, rng)
    with pytest.raises(BenchError, match="--paired needs the rounds"):
        compare_dirs(base, tmp_path / "b", paired=True)


def test_only_round_folders_pair_and_a_point_without_common_rounds_is_inconclusive(tmp_path, rng):
    """Folders that merely share a name are not rounds of one `ab`: they never pair. A point that has no round on
    both sides (it ran only in rounds the other side lost) is insufficient data, so the comparison ends
    inconclusive (6) instead of aborting with a user error."""
    from bench.errors import BenchError

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


# --- sequential rounds -------------------------------------------------------------------------------------------


def test_obrien_fleming_spending_by_hand():
    from scipy.stats import norm

    from bench.stats import obrien_fleming_spent

    z = norm.ppf(0.975)
    assert obrien_fleming_spent(0.5, 0.05) == pytest.approx(2 - 2 * norm.cdf(z / 0.5**0.5))  # 0.0056
    assert obrien_fleming_spent(1.0, 0.05) == pytest.approx(0.05)
    assert obrien_fleming_spent(0.0, 0.05) == 0.0
    spent = [obrien_fleming_spent(n / 10, 0.05) for n in range(1, 11)]
    assert spent == sorted(spent) and spent[0] < 1e-6  # spends little early, monotone


def test_sequential_looks_never_spend_more_than_alpha_and_skip_unreachable_ones():
    from bench.ab import sequential_levels
    from bench.stats import min_p_value, per_test_alpha

    for rounds, max_rounds, tests in ((4, 12, 2), (5, 10, 2), (6, 20, 40), (4, 8, 1)):
        levels = sequential_levels(rounds, max_rounds, 0.05, tests, "holm", False)
        assert levels and sum(levels.values()) <= 0.05 + 1e-12
        assert max(levels) == max_rounds  # the last round always looks: the rest of alpha is spent there
        for n, level in levels.items():  # every look taken can reach its own level
            assert min_p_value(n, n) < per_test_alpha(level, tests, "holm")
    levels = sequential_levels(4, 12, 0.05, 2, "holm", False)
    assert min(levels) == 6  # at 4 and 5 rounds no exact test reaches the little alpha spent so far: skipped
    assert sequential_levels(4, 8, 0.05, 2, "holm", True)  # paired: fewer reachable looks, still some


@pytest.mark.parametrize(
    ("slowdown", "noise", "stops_after", "code"),
    [
        (0.7, 5, 6, ExitCode.GATE_FAILED),  # a 30% regression: the first look (6 rounds) decides
        (1.0, 5, 6, ExitCode.OK),  # a quiet A/A: detectable effect under 5% at the first look, a pass
        (1.0, 80, 10, ExitCode.INCONCLUSIVE),  # a noisy A/A: no look can rule out 5%, every round runs
    ],
)
def test_ab_sequential_loop_stops_at_the_first_deciding_look(
    tmp_path, monkeypatch, rng, slowdown, noise, stops_after, code
):
    """bench ab --rounds 4 --max-rounds 10 on the tiny profile (2 points, 4 gated tests), its rounds replaced by
    synthetic server starts. The first look comes after round 6 (before, no exact test reaches the alpha spent)."""
    import json

    from bench import ab

    made = []

    def fake_round(r, total, a, b, out, profile, repeat, ray):
        made.append(r)
        for side, factor in (("baseline", 1.0), ("candidate", slowdown)):
            for pid in ("p1", "p2"):
                write_start(
                    out / side / f"round-{r}", [rng.normal(1000, noise) * factor], 10.0 / factor, rng, point_id=pid
                )

    monkeypatch.setattr(ab, "_round", fake_round)
    env = ab.Env("python", None)
    got = ab.run_ab("tiny", env, env, rounds=4, out=tmp_path / "ab", max_rounds=10, expected_noise=0.05)
    looks = json.loads((tmp_path / "ab" / "looks.json").read_text())
    assert len(made) == stops_after and looks[-1]["rounds"] == stops_after
    assert all(k["level"] > 0 for k in looks) and sum(k["level"] for k in looks) <= 0.05
    assert got == code and looks[-1]["exit"] == code and looks[0]["rounds"] == 6
    assert "## Sequential looks" in (tmp_path / "ab" / "compare.md").read_text()


def test_the_sequential_design_states_the_effect_its_last_look_detects():
    """Its levels are alpha in pieces: the detectable effect `ab --max-rounds` prints is the one its last look
    reaches 80% of the time on its own, larger than the fixed design's at full alpha (which the sequential
    procedure reached only 74% of the time in reports/examples/verdict-simulation)."""
    import re

    from bench.ab import sequential_design, sequential_levels
    from bench.stats import min_detectable_effect, per_test_alpha

    levels = sequential_levels(7, 10, 0.05, 40, "holm", False)
    text = sequential_design(levels, 0.063, 0.05, 40, "holm", False)
    shown = float(re.search(r"detects changes of ([\d.]+)%", text).group(1)) / 100
    at_last = min_detectable_effect(0.063, 0.063, 10, 10, 1.0, per_test_alpha(levels[10], 40, "holm"))
    at_alpha = min_detectable_effect(0.063, 0.063, 10, 10, 1.0, per_test_alpha(0.05, 40, "holm"))
    assert shown == pytest.approx(at_last, abs=0.0005) and at_last > at_alpha
    assert text.startswith("sequential: looks after rounds 8 (0.028), 9 (0.01), 10 (0.011)")


def test_ab_resume_continues_a_cut_run_and_reruns_only_what_is_missing(tmp_path, monkeypatch, rng):
    """An A/B cut by a time limit in round 3 (its candidate sweep never ran): `ab --resume` passes `sweep --resume`
    for every round folder that holds a manifest (a finished sweep starts no server), a fresh sweep for the rest, and
    judges all 5 rounds. Without --resume the folder is refused."""
    from bench import ab
    from bench.errors import BenchError

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
    from bench import ab
    from bench.errors import BenchError

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
    from bench import ab
    from bench.errors import BenchError

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
    with pytest.raises(BenchError, match="pins 'other'"):
        ab.run_ab(str(profile), env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, resume=True)


def test_ab_calibrate_stores_the_between_start_noise_and_never_fails_an_a_a(tmp_path, monkeypatch, rng):
    """`ab --calibrate` (an A/A): after its rounds, the between-start CV of each gated metric goes to calibration.json
    and the machine's store, which later plans read; the exit is 0 unless the A/A itself says "slower"."""
    import json

    from bench import ab, calibration

    def fake_round(r, total, a, b, out, profile, repeat, ray):
        for side in ("baseline", "candidate"):
            for pid in ("p1", "p2"):
                write_start(out / side / f"round-{r}", [rng.normal(1000, 20)], 10.0, rng, point_id=pid)

    monkeypatch.setattr(ab, "_round", fake_round)
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    env = ab.Env("python", None)
    got = ab.run_ab("tiny", env, env, rounds=5, out=tmp_path / "ab", expected_noise=0.05, calibrate=True)
    entry = json.loads((tmp_path / "ab" / "calibration.json").read_text())
    found = entry["metrics"][calibration.PLAN_METRIC]
    assert got in (ExitCode.OK, ExitCode.INCONCLUSIVE) and entry["starts_per_point"] == 10 and entry["points"] == 2
    assert 0 < found["max_cv"] < 0.1  # 10 starts of N(1000, 20): a CV near 2%
    noise, why = calibration.planning_noise(entry["profile"], ab.detect_machine(), 0.063, tmp_path / "cache")
    assert noise == pytest.approx(found["max_cv"]) and "this machine's calibration" in why


def test_a_level_below_twenty_thousand_resamples_is_reachable():
    """Beyond 20,000 arrangements the test samples them; its smallest p must still fall below the level it was
    asked for (before: 2 / 20,001 = 1e-4, so a per-test level of 5e-5 could never be reached, yet the design was
    accepted and a pass was possible). 10 starts a side and 15 paired rounds (at 1e-4), fully separated."""
    from bench.stats import compare_paired, compare_servers

    base = [[100.0 + i * 0.1] for i in range(10)]
    cand = [[80.0 + i * 0.1] for i in range(10)]
    found = compare_servers(base, cand, True, min_effect=0.02, alpha=5e-5)
    assert found.p_value < 5e-5 and found.verdict == "slower"
    base = [[100.0 + (i % 3)] for i in range(15)]
    cand = [[90.0 + (i % 3) + 0.01 * i] for i in range(15)]
    found = compare_paired(base, cand, True, min_effect=0.02, alpha=1e-4)
    assert found.p_value < 1e-4 and found.verdict == "slower"  # exact: 2 / 2^15; sampled at 2^14: 1.2e-4


def test_detectable_effect_is_the_permutation_tests_own():
    """11 paired rounds at 0.00125: the sign-flip test rejects only when all 11 differences share a sign, so its
    80%-power shift is Phi^-1(0.8^(1/11)) = 2.05 standard deviations of a round difference; a paired t
    approximation says 1.56 and overstated the power (65% at its effect)."""
    from scipy.stats import norm

    from bench.stats import unit_detectable_effect

    assert unit_detectable_effect(11, 11, 0.00125, paired=True) == pytest.approx(norm.ppf(0.8 ** (1 / 11)), rel=0.05)
    assert unit_detectable_effect(10, 10, 0.00125, paired=True) is None  # 2 / 1024 cannot reach it


def test_power_at_the_printed_detectable_effect_is_eighty_percent():
    """The real tests, run at the effect they print: 7 starts a side unpaired and 11 paired rounds at the level of
    40 Holm-gated tests reject in about 80% of 300 draws (the Wilson 95% interval of 80% at 300 is 75-84%)."""
    from bench.stats import compare_paired, compare_servers, min_detectable_effect, paired_detectable_effect

    level, rng = 0.05 / 40, np.random.default_rng(7)
    effect = min_detectable_effect(0.05, 0.05, 7, 7, 1.0, level)
    hits = 0
    for _ in range(300):
        b = rng.normal(1.0, 0.05, 7)
        c = rng.normal(1.0 - effect, 0.05, 7)
        found = compare_servers([[x] for x in b], [[x] for x in c], True, min_effect=0.0, alpha=level)
        hits += found.verdict == "slower"
    assert 0.72 <= hits / 300 <= 0.88
    effect = paired_detectable_effect(0.05, 11, 1.0, level)
    hits = 0
    for _ in range(300):
        d = rng.normal(-effect, 0.05, 11)
        found = compare_paired([[1.0]] * 11, [[1.0 + x] for x in d], True, min_effect=0.0, alpha=level)
        hits += found.verdict == "slower"
    assert 0.72 <= hits / 300 <= 0.88


def test_a_sequential_design_whose_last_look_is_unreachable_is_refused():
    """Found in review: at --rounds 7 --max-rounds 8, paired, 2 tests, the look after round 8 cannot reach the
    alpha left for it (0.0069 per test, the smallest paired p at 8 rounds is 0.0078): round 8 ran and was never
    judged, its alpha unspent."""
    from bench.ab import _looks, sequential_levels
    from bench.errors import BenchError

    assert sequential_levels(7, 8, 0.05, 2, "holm", True) == {7: pytest.approx(0.0361, abs=1e-4)}
    with pytest.raises(BenchError, match="round 8 would run unjudged; use --max-rounds 7"):
        _looks(7, 8, 0.05, 2, "holm", True)
    assert max(_looks(5, 10, 0.05, 2, "holm", False)) == 10
