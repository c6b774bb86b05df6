"""Benchmark: how often the PR gate of `bench compare` / `bench ab` fails an A/A, and how often it catches a real
regression of the size `ab` says it can detect, simulated through the suite's own gate (bench.compare's judge and
outcome: the tests, the multiplicity adjustment, the verdicts, the exit code). Nothing here is measured on vLLM:
each server start's value is drawn from a normal distribution with the stated between-start CV (the server start
is the unit, docs/verdicts.md).

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

from bench.compare import GATED, judge, outcome
from bench.errors import ExitCode
from bench.stats import CORRECTIONS, min_detectable_effect, per_test_alpha

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
    """(exit code of the gate, the changed point's two tests both `slower`) for one simulated comparison through
    bench.compare's own judge and outcome: point 0's throughput lower and TPOT higher by `effect`, every other
    point unchanged. Each start is one trial, drawn at the between-start CV."""

    def starts_of(scale_tp: float, scale_tpot: float) -> list[dict[str, list[float]]]:
        return [
            {"output_throughput": [tp], "tpot_ms": [tpot]}
            for tp, tpot in zip(
                rng.normal(scale_tp, cv * scale_tp, starts), rng.normal(scale_tpot, cv * scale_tpot, starts)
            )
        ]

    compared = [
        (f"p{p}", f"p{p}", starts_of(1.0, 1.0), starts_of(1 - effect, 1 + effect) if p == 0 else starts_of(1.0, 1.0))
        for p in range(points)
    ]
    result = judge(compared, alpha=ALPHA, min_effect=MIN_EFFECT, max_effect=max_effect, correction=correction)
    code, _ = outcome(result)
    t = result["table"]
    changed = t[(t.point_id == "p0") & t.metric.isin(GATED)]
    return int(code), bool((changed.verdict == "slower").all())


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
    k_fail = sum(code == ExitCode.GATE_FAILED for code, _ in aa)
    k_inc = sum(code == ExitCode.INCONCLUSIVE for code, _ in aa)
    k_gate, k_caught = sum(code == ExitCode.GATE_FAILED for code, _ in ab), sum(c for _, c in ab)
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
