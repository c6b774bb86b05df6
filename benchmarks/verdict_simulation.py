"""Benchmark: how often the PR gate of `bench compare` / `bench ab` fails an A/A, and how often it catches a real
regression of the size `ab` says it can detect, simulated through the suite's own gate (bench.compare's judge and
outcome: the tests, the multiplicity adjustment, the verdicts, the exit code). Nothing here is measured on vLLM:
each server start's value is drawn from a normal distribution with the stated between-start CV (the server start
is the unit, docs/verdicts.md).

Default design: 20 points x 2 gated metrics (output tok/s, TPOT), 7 server starts a side (the fewest at which 40
Holm-adjusted tests can reach p < 0.05), between-start CV 6.3%.

    python benchmarks/verdict_simulation.py [--points 20] [--starts 7] [--cv 0.063] [--sims 200] [--correction holm]
        [--paired [--round-cv 0.1]] [--max-rounds N]

--paired simulates `ab --paired` (rounds share a drift of --round-cv, which pairing removes); --max-rounds
simulates `ab --max-rounds`: a look after each round from --starts on at its O'Brien-Fleming level
(bench.ab.sequential_levels), stopping at the first look that decides; the detectable effect is then the one at
--max-rounds, and the mean rounds used are reported.

Prints one JSON document: the false-gate rate in A/A (any gated test "slower"), the inconclusive rate, the
detectable effect `ab` prints for this design, and the power at it (one point's two metrics regressed by that much,
the others unchanged), each with a 95% Wilson interval. A start's throughput and TPOT move together (draw).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from bench.ab import sequential_levels
from bench.compare import GATED, judge, outcome
from bench.errors import ExitCode
from bench.stats import CORRECTIONS, min_detectable_effect, paired_detectable_effect, per_test_alpha

ALPHA, MIN_EFFECT = 0.05, 0.02


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [float("nan")] * 2
    p, z = k / n, 1.96
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [c - h, c + h]


def draw(rng, points: int, rounds: int, cv: float, round_cv: float, effect: float):
    """Per point, (baseline starts, candidate starts) over `rounds` rounds: point 0's throughput lower and TPOT
    higher by `effect`, every other point unchanged. Each start is one trial whose speed is drawn at the
    between-start CV `cv`; its throughput scales with that speed and its TPOT with the inverse, as one server's
    two figures do (drawn apart, the two gated tests of a point would be two independent chances to catch a
    change, and the gate's power would read higher than either test's). With `round_cv` > 0 both sides of a round
    also share a drift of that CV (the machine state a round shares, what pairing removes)."""

    def side(scale_tp: float, scale_tpot: float, drift: np.ndarray) -> list[dict[str, list[float]]]:
        speed = rng.normal(1.0, cv, rounds) * (1 + drift)
        return [{"output_throughput": [scale_tp * f], "tpot_ms": [scale_tpot / f]} for f in speed]

    out = []
    for p in range(points):
        drift = rng.normal(0.0, round_cv, rounds) if round_cv else np.zeros(rounds)
        change = (1 - effect, 1 + effect) if p == 0 else (1.0, 1.0)
        out.append((f"p{p}", f"p{p}", side(1.0, 1.0, drift), side(*change, drift)))
    return out


def gate(drawn, n: int, level: float, args) -> tuple[int, bool]:
    """(exit code, the changed point's two gated tests both `slower`) of bench.compare's own judge and outcome
    over the first n rounds at family level `level`."""
    compared = [(pid, label, b[:n], c[:n]) for pid, label, b, c in drawn]
    result = judge(
        compared,
        alpha=level,
        min_effect=MIN_EFFECT,
        max_effect=args.max_effect,
        correction=args.correction,
        paired=args.paired,
    )
    code, _ = outcome(result)
    t = result["table"]
    changed = t[(t.point_id == "p0") & t.metric.isin(GATED)]
    return int(code), bool((changed.verdict == "slower").all())


def one_comparison(rng, args, effect: float, levels: dict[int, float]) -> tuple[int, bool, int]:
    """(exit code, both metrics caught, rounds used) of one simulated comparison; with looks (`levels`, from
    bench.ab.sequential_levels) it stops at the first look that decides, as `ab --max-rounds` does."""
    total = args.max_rounds or args.starts
    drawn = draw(rng, args.points, total, args.cv, args.round_cv, effect)
    if not levels:
        return (*gate(drawn, total, ALPHA, args), total)
    code, caught, n = int(ExitCode.INCONCLUSIVE), False, total
    for n, level in levels.items():
        code, caught = gate(drawn, n, level, args)
        if code in (ExitCode.OK, ExitCode.GATE_FAILED):
            break
    return code, caught, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--starts", type=int, default=7)
    ap.add_argument("--cv", type=float, default=0.063)
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--correction", choices=sorted(CORRECTIONS), default="holm")
    ap.add_argument("--max-effect", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--paired", action="store_true", help="the paired (sign-flip by round) test of ab --paired")
    ap.add_argument("--round-cv", type=float, default=0.0, help="drift shared by both sides of a round (CV)")
    ap.add_argument(
        "--max-rounds", type=int, default=None, help="sequential: looks from --starts rounds to this (ab --max-rounds)"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    tests = args.points * len(GATED)
    total = args.max_rounds or args.starts
    levels = (
        sequential_levels(args.starts, total, ALPHA, tests, args.correction, args.paired) if args.max_rounds else {}
    )
    # the level `ab` plans with: alpha, or for a sequential design the last look's (bench.ab.run_ab)
    level = per_test_alpha(levels[max(levels)] if levels else ALPHA, tests, args.correction)
    if args.paired:  # what the paired test's table reports: the round differences carry twice the start variance
        mde = paired_detectable_effect(math.sqrt(2) * args.cv, total, 1.0, level)
    else:
        mde = min_detectable_effect(args.cv, args.cv, total, total, 1.0, level)
    aa = [one_comparison(rng, args, 0.0, levels) for _ in range(args.sims)]
    ab = [one_comparison(rng, args, mde, levels) for _ in range(args.sims)]
    k_fail = sum(code == ExitCode.GATE_FAILED for code, _, _ in aa)
    k_inc = sum(code == ExitCode.INCONCLUSIVE for code, _, _ in aa)
    k_gate, k_caught = sum(code == ExitCode.GATE_FAILED for code, _, _ in ab), sum(c for _, c, _ in ab)
    sequential = (
        {
            "looks": {str(k): v for k, v in levels.items()},
            "aa_mean_rounds": float(np.mean([n for _, _, n in aa])),
            "ab_mean_rounds": float(np.mean([n for _, _, n in ab])),
        }
        if levels
        else None
    )
    print(
        json.dumps(
            {
                "design": vars(args) | {"per_test_alpha": level, "family_alpha": ALPHA},
                "detectable_effect_printed": mde,
                "aa_false_gate_rate": k_fail / args.sims,
                "aa_false_gate_ci95": wilson(k_fail, args.sims),
                "aa_inconclusive_rate": k_inc / args.sims,
                "power_gate_fails_at_detectable_effect": k_gate / args.sims,
                "power_gate_ci95": wilson(k_gate, args.sims),
                "power_both_metrics_caught": k_caught / args.sims,
                **({"sequential": sequential} if sequential else {}),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
