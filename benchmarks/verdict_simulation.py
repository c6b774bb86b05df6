"""Benchmark: the error rates of the PR gate of `bench compare` / `bench ab` (docs/verdicts.md), simulated through the
suite's own gate (bench.verdicts.compare's judge and outcome: the one-sided t bounds on log ratios, the multiplicity
adjustment, the verdicts, the exit code), and the coverage of its bounds. Nothing here is measured on vLLM, except
the replay of the committed real A/A data at the end.

    python benchmarks/verdict_simulation.py [--sims 1000] [--points 2] [--seed 0] [--out DIR]

Parts of the JSON document it prints (and, with --out, writes as verdict-simulation.json with a markdown summary
verdict-simulation.md):
- coverage: how often the one-sided 95% upper bound of the slowdown (paired: t on the mean of the rounds' log
  ratios; unpaired: Welch t on the difference of mean logs) is at or above the true slowdown, at 3-8 starts, for
  normal, heavy-tailed (t with 3 df) and bimodal start noise (20,000 draws a cell);
- gate: the shipped defaults (alpha 0.05, --max-effect 5%, --min-effect 2%, Holm, paired by round), --points
  points x 2 gated metrics, at between-start CV 1.5% and 3% and each noise shape, rounds planned for that noise
  (bench.verdicts.stats.plan_rounds at the true sd, as a calibration would if it hit it): the A/A's rates of exit 4 (false
  fail), 0 (pass) and 6, and with one point slower by exactly --max-effect, the rate of exit 0 (false pass); both
  with a fixed design and a sequential one (looks from 3 to twice the planned rounds, futility stop), each row
  --sims comparisons, 95% Wilson intervals;
- replay: the committed real A/As (reports/examples/cpu-ab-a-a, cpu-ab-known-slow/a-a, h200-ab-known-slow/a-a)
  through the gate as committed, and with the candidate's every start slowed by exactly --max-effect.

A start's throughput and TPOT move together: its speed is drawn once; throughput scales with it, TPOT with its
inverse. A slowdown of --max-effect multiplies the candidate's throughput by 1 - max effect (exactly at the
threshold) and its TPOT by 1 / (1 - max effect) (just above it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from bench.commands.ab import futile
from bench.core.errors import ExitCode
from bench.verdicts.compare import GATED, METRICS, compare_dirs, judge, load_side, outcome, pair_rounds
from bench.verdicts.stats import paired_sd_from_cv, plan_rounds, sequential_levels, t_quantile

ALPHA, MAX_EFFECT, MIN_EFFECT = 0.05, 0.05, 0.02
NOISES = ("normal", "t3", "bimodal")
CVS = (0.015, 0.03)
REPO = Path(__file__).resolve().parents[1]
REAL_AA = ("cpu-ab-a-a", "cpu-ab-known-slow/a-a", "h200-ab-known-slow/a-a")


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [float("nan")] * 2
    p, z = k / n, 1.96
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [c - h, c + h]


def start_noise(rng, shape: str, cv: float, size) -> np.ndarray:
    """Log-scale deviation of a server start's speed, mean 0, sd `cv`: normal; t with 3 df (heavy tails, scaled
    to sd cv); bimodal: 30% of starts in a slow mode 2.08 cv below the fast one, each mode with sd 0.3 cv (the
    no-spec starts that kept the phase they began with, issue 38)."""
    if shape == "normal":
        return rng.normal(0.0, cv, size)
    if shape == "t3":
        return rng.standard_t(3, size) * cv / math.sqrt(3.0)
    p, within = 0.3, 0.3
    gap = math.sqrt((1 - within**2) / (p * (1 - p))) * cv
    slow = rng.random(size) < p
    return np.where(slow, -gap * (1 - p), gap * p) + rng.normal(0.0, within * cv, size)


def coverage(rng, draws: int = 20_000) -> list[dict]:
    """Per noise shape, start count and test: how often the one-sided 95% upper bound of the log slowdown covers
    the truth (0: the bound is at or above it). The bound is bench.verdicts.stats's: estimate + t_{0.95, df} x se."""
    rows = []
    for shape in NOISES:
        for n in range(3, 9):
            b = start_noise(rng, shape, 0.03, (draws, n))
            c = start_noise(rng, shape, 0.03, (draws, n))
            d = c - b  # log slowdown of a latency per round; truth 0
            upper = d.mean(1) + t_quantile(0.05, n - 1) * d.std(1, ddof=1) / math.sqrt(n)
            vb, vc = b.var(1, ddof=1) / n, c.var(1, ddof=1) / n
            df = (vb + vc) ** 2 / (vb**2 / (n - 1) + vc**2 / (n - 1))
            welch = c.mean(1) - b.mean(1) + stats.t.ppf(0.95, df) * np.sqrt(vb + vc)
            rows.append(
                {
                    "noise": shape,
                    "starts": n,
                    "paired_t_coverage": float(np.mean(upper >= 0)),
                    "welch_t_coverage": float(np.mean(welch >= 0)),
                    "nominal": 0.95,
                }
            )
    return rows


def draw(rng, points: int, rounds: int, shape: str, cv: float, effect: float):
    """Per point (baseline starts, candidate starts) over `rounds` rounds; point 0 slower by `effect`."""

    def side(factor: float) -> list[dict[str, list[float]]]:
        speed = np.exp(start_noise(rng, shape, cv, rounds)) * factor
        return [{"output_throughput": [1000.0 * f], "tpot_ms": [10.0 / f]} for f in speed]

    return [(f"p{p}", f"p{p}", side(1.0), side(1.0 - effect if p == 0 else 1.0)) for p in range(points)]


def one(rng, points: int, shape: str, cv: float, effect: float, rounds: int, max_rounds: int | None):
    """(exit code, rounds used) of one comparison: fixed (`max_rounds` None) or sequential with looks from 3 to
    `max_rounds` at their O'Brien-Fleming levels and the futility stop, as `ab --max-rounds` runs them."""
    total = max_rounds or rounds
    drawn = draw(rng, points, total, shape, cv, effect)

    def at(n: int, level: float) -> dict:
        return judge(
            [(pid, label, b[:n], c[:n]) for pid, label, b, c in drawn],
            alpha=level,
            max_effect=MAX_EFFECT,
            min_effect=MIN_EFFECT,
            paired=True,
        )

    if max_rounds is None:
        return int(outcome(at(rounds, ALPHA))[0]), rounds
    levels = sequential_levels(3, max_rounds, ALPHA)
    code = int(ExitCode.INCONCLUSIVE)
    for n, level in levels.items():
        result = at(n, level)
        code = int(outcome(result)[0])
        if code in (ExitCode.OK, ExitCode.GATE_FAILED):
            return code, n
        if n < max_rounds and futile(result, max_rounds, levels[max_rounds]):
            return code, n
    return code, max_rounds


def gate_rows(rng, sims: int, points: int) -> list[dict]:
    rows = []
    for cv in CVS:
        rounds = plan_rounds(paired_sd_from_cv(cv), MAX_EFFECT, ALPHA, paired=True, higher_better=False) or 3
        for shape in NOISES:
            for design, max_rounds in (("fixed", None), ("sequential", max(2 * rounds, 6))):
                row: dict = {"cv": cv, "noise": shape, "design": design, "rounds": rounds, "max_rounds": max_rounds}
                for truth, effect in (("aa", 0.0), ("slow", MAX_EFFECT)):
                    runs = [one(rng, points, shape, cv, effect, rounds, max_rounds) for _ in range(sims)]
                    codes = np.array([c for c, _ in runs])
                    for name, code in (("fail", ExitCode.GATE_FAILED), ("pass", ExitCode.OK)):
                        k = int(np.sum(codes == code))
                        row[f"{truth}_{name}"] = k / sims
                        row[f"{truth}_{name}_ci95"] = wilson(k, sims)
                    row[f"{truth}_inconclusive"] = float(np.mean(codes == ExitCode.INCONCLUSIVE))
                    row[f"{truth}_mean_rounds"] = float(np.mean([n for _, n in runs]))
                row["sims"] = sims
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def replay() -> list[dict]:
    """The committed real A/As through the gate (as `bench compare` runs them: paired by round), and with the
    candidate slowed by exactly --max-effect (throughput x (1 - max effect), latencies / (1 - max effect))."""
    rows = []
    for name in REAL_AA:
        root = REPO / "reports" / "examples" / name
        result = compare_dirs(root / "baseline", root / "candidate")
        code, line = outcome(result)
        g = result["table"][result["table"].metric.isin(GATED)]
        base, cand = load_side(root / "baseline"), load_side(root / "candidate")
        points = []
        for pid in sorted(set(base) & set(cand)):
            b, c = pair_rounds(base[pid], cand[pid])
            slowed = [
                {
                    m: [v * (1 - MAX_EFFECT) if METRICS.get(m, True) else v / (1 - MAX_EFFECT) for v in vs]
                    for m, vs in s.items()
                }
                for s in c
            ]
            points.append((pid, base[pid].label, b, slowed))
        slow = judge(points, alpha=ALPHA, max_effect=MAX_EFFECT, min_effect=MIN_EFFECT, paired=True)
        rows.append(
            {
                "example": name,
                "rounds": int(g.n_base.min()),
                "exit": int(code),
                "outcome": line,
                "upper_bounds": {f"{r.metric} {r.label}": round(float(r.upper), 4) for r in g.itertuples()},
                "slowed_by_max_effect_exit": int(outcome(slow)[0]),
                "slowed_outcome": outcome(slow)[1],
            }
        )
    return rows


def markdown(doc: dict) -> str:
    lines = [
        "# Verdict simulation (benchmarks/verdict_simulation.py)",
        "",
        f"Seed {doc['design']['seed']}, {doc['design']['sims']} comparisons a row, {doc['design']['points']} points x "
        f"2 gated metrics, alpha {ALPHA}, --max-effect {MAX_EFFECT:.0%}, --min-effect {MIN_EFFECT:.0%}, Holm, paired "
        f"by round; {doc['seconds']:.0f} s.",
        "",
        "## Gate error rates",
        "",
        "| CV | noise | design | rounds (planned: fixed) | A/A fail (exit 4) | A/A pass | A/A rounds used | "
        "false pass at 5% slower | caught (exit 4) at 5% | rounds used |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["gate"]:
        rounds = f"looks 3-{r['max_rounds']}" if r["max_rounds"] else f"{r['rounds']}"
        lines.append(
            f"| {r['cv']:.1%} | {r['noise']} | {r['design']} | {rounds} | {r['aa_fail']:.1%} "
            f"({r['aa_fail_ci95'][1]:.1%}) | {r['aa_pass']:.1%} | {r['aa_mean_rounds']:.2f} | {r['slow_pass']:.1%} "
            f"({r['slow_pass_ci95'][1]:.1%}) | {r['slow_fail']:.1%} | {r['slow_mean_rounds']:.2f} |"
        )
    lines += [
        "",
        "(In brackets: the upper end of the 95% Wilson interval.)",
        "",
        "## Coverage of the one-sided 95% upper bound",
        "",
        "| noise | starts | paired t | Welch t |",
        "|---|---|---|---|",
    ]
    for r in doc["coverage"]:
        lines.append(f"| {r['noise']} | {r['starts']} | {r['paired_t_coverage']:.1%} | {r['welch_t_coverage']:.1%} |")
    lines += ["", "## Committed real A/As", "", "| example | rounds | exit | outcome | exit, candidate slowed 5% |"]
    lines.append("|---|---|---|---|---|")
    for r in doc["replay"]:
        lines.append(
            f"| {r['example']} | {r['rounds']} | {r['exit']} | {r['outcome']} | {r['slowed_by_max_effect_exit']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--points", type=int, default=2, help="points of the profile (the tiny profile has 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write verdict-simulation.json and .md here")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    began = time.time()
    doc: dict[str, Any] = {
        "design": vars(args) | {"alpha": ALPHA, "max_effect": MAX_EFFECT, "min_effect": MIN_EFFECT, "paired": True},
        "coverage": coverage(rng),
        "replay": replay(),
        "gate": gate_rows(rng, args.sims, args.points),
    }
    doc["seconds"] = time.time() - began
    doc["design"]["out"] = str(args.out) if args.out else None
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "verdict-simulation.json").write_text(text + "\n")
        (args.out / "verdict-simulation.md").write_text(markdown(doc))


if __name__ == "__main__":
    main()
