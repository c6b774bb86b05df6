"""Benchmark: how often the PR gate of `bench compare` / `bench ab` fails an A/A, and how often it catches a real
regression of the size `ab` says it can detect, simulated with the suite's own functions (bench.stats
compare_servers, the multiplicity adjustment, bench.compare's verdict rule). Nothing here is measured on vLLM: each
server start's value is drawn from a normal distribution with the stated between-start CV (the server start is the
unit, docs/verdicts.md), trials averaged inside it.

Default design: 20 points x 2 gated metrics (output tok/s, TPOT), 7 server starts a side (the fewest at which 40
Holm-adjusted tests can reach p < 0.05), between-start CV 6.3%.

    python benchmarks/verdict_simulation.py [--points 20] [--starts 7] [--cv 0.063] [--sims 200] [--correction holm]

Prints one JSON document: the false-gate rate in A/A (any gated test "slower"), the inconclusive rate, the
detectable effect `ab` prints for this design, and the power at it (one point's two metrics regressed by that much,
the others unchanged), each with a 95% Wilson interval.
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from bench.stats import CORRECTIONS, compare_servers, decide, min_detectable_effect, per_test_alpha

ALPHA, MIN_EFFECT = 0.05, 0.02


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [float("nan")] * 2
    p, z = k / n, 1.96
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [c - h, c + h]


def one_comparison(rng, points: int, starts: int, cv: float, effect: float, correction: str, max_effect: float):
    """(gate failed, inconclusive, the changed point's tests both caught) for one simulated comparison: point 0's
    throughput lower and TPOT higher by `effect`, every other point unchanged."""
    tests = points * 2
    level = per_test_alpha(ALPHA, tests, correction)
    rows = []
    for p in range(points):
        for higher in (True, False):  # output tok/s (higher is better), then TPOT
            shift = effect if p == 0 else 0.0
            mean_c = (1 - shift) if higher else (1 + shift)
            b = [[v] for v in rng.normal(1.0, cv, starts)]
            c = [[v] for v in rng.normal(mean_c, cv * mean_c, starts)]
            r = compare_servers(b, c, higher, min_effect=MIN_EFFECT, alpha=level, seed=int(rng.integers(1 << 30)))
            rows.append((p, higher, r))
    adjusted = CORRECTIONS[correction]([r.p_value for _, _, r in rows])
    verdicts = [
        decide(r.ratio, r.ci_low, r.ci_high, pa, higher, ALPHA, MIN_EFFECT) if r.p_value is not None else r.verdict
        for (_, higher, r), pa in zip(rows, adjusted)
    ]
    failed = any(v == "slower" for v in verdicts)
    blind = any(
        v == "insufficient data" or (v == "no change" and not (r.mde is not None and r.mde <= max_effect))
        for (_, _, r), v in zip(rows, verdicts)
    )
    caught = all(v == "slower" for (p, _, _), v in zip(rows, verdicts) if p == 0)
    return failed, (not failed) and blind, caught


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=20)
    ap.add_argument("--starts", type=int, default=7)
    ap.add_argument("--cv", type=float, default=0.063)
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--correction", choices=sorted(CORRECTIONS), default="holm")
    ap.add_argument("--max-effect", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    level = per_test_alpha(ALPHA, args.points * 2, args.correction)
    mde = min_detectable_effect(args.cv, args.cv, args.starts, args.starts, 1.0, level)
    aa = [
        one_comparison(rng, args.points, args.starts, args.cv, 0.0, args.correction, args.max_effect)
        for _ in range(args.sims)
    ]
    ab = [
        one_comparison(rng, args.points, args.starts, args.cv, mde, args.correction, args.max_effect)
        for _ in range(args.sims)
    ]
    k_fail, k_inc = sum(f for f, _, _ in aa), sum(i for _, i, _ in aa)
    k_caught, k_gate = sum(c for _, _, c in ab), sum(f for f, _, _ in ab)
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
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
