"""Projection: wall time of the Kimi K2.6 profile (profiles/kimi-k2.6-eagle3-tp8.toml) on 1..N 8-GPU nodes with
`bench sweep --ray`, from per-engine-config start-up and per-point times. Not a measurement of Kimi: every input
below says whether it was measured (and where) or assumed. Prints a markdown table.

Model: an engine config costs start-up + the sum of its points; Ray runs one config per node at a time (each
needs all 8 GPUs of a node), so N nodes finish in the makespan of the configs spread longest-first over N lanes.
A point of C users, P prompts of O output tokens takes ceil((P + warmup) / C) waves x (TTFT + O x TPOT).

Usage: python benchmarks/ray_projection.py [--nodes 1,2,3,4,6,8]
"""

from __future__ import annotations

import argparse
import heapq
import math
from pathlib import Path

from bench.config.plan import make_plan
from bench.config.profile import load_profile
from bench.core.fmt import md_rows
from bench.core.hardware import Machine

PROFILE = Path(__file__).resolve().parents[1] / "profiles" / "kimi-k2.6-eagle3-tp8.toml"

# Start-up (server start to /health), seconds.
STARTUP_RANK_MEASURED = 145.0  # docs/facts.md: one TP8 rank of Kimi K2.6, dummy weights, H200, vLLM 0.26.0 init
STARTUP_REAL_ASSUMED = 900.0  # ASSUMED: issue 14's "10-20 minutes to load and capture" for real TP8 weights

# Decode time per output token (ms) by concurrency: MEASURED at concurrency 1, 8, 32 on one TP8 rank
# (reports/examples/kimi-rank-h200, FLASHMLA/fp8 k3: 4.12 / 5.59 / 9.35); 64 and 128 ASSUMED (extrapolated,
# memory-bound growth); a real TP8 step adds two all-reduces per layer, so these are lower bounds.
TPOT_MS = {1: 4.12, 8: 5.59, 32: 9.35, 64: 15.0, 128: 25.0}
TTFT_MS_PER_1K_INPUT = 165.0  # MEASURED: conc 1, 1024 in (same results); scaled by input length and wave size


def tpot_ms(concurrency: int) -> float:
    known = sorted(TPOT_MS)
    below = max((c for c in known if c <= concurrency), default=known[0])
    above = min((c for c in known if c >= concurrency), default=known[-1])
    if below == above:
        return TPOT_MS[below]
    share = (concurrency - below) / (above - below)
    return TPOT_MS[below] + share * (TPOT_MS[above] - TPOT_MS[below])


def point_s(concurrency: int, prompts: int, input_len: int, output_len: int) -> float:
    waves = math.ceil(prompts / concurrency)
    ttft = TTFT_MS_PER_1K_INPUT * input_len / 1024 * max(1, concurrency / 8)
    return waves * (ttft + output_len * tpot_ms(concurrency)) / 1000


# A text-workload point (chat; lengths come from the data): ASSUMED 1024 input tokens, 512 output tokens per turn,
# 1.5 turns per conversation on average (MT-Bench has 2, HumanEval 1), at the point's concurrency (8 here).
TEXT_INPUT, TEXT_OUTPUT, TEXT_TURNS = 1024, 512, 1.5


def config_times(startup_s: float) -> tuple[list[float], int]:
    """Seconds per engine config of the profile (start-up + its points), and the points per config."""
    profile = load_profile(str(PROFILE), "gpu")
    plan = make_plan(profile, Machine("gpu", 8, "sm90"))
    out = []
    for _, points in plan.groups:
        total = startup_s
        for p in points:
            prompts = p.num_prompts + p.warmup_prompts
            if p.shape is not None:
                total += point_s(p.shape.concurrency, prompts, p.shape.input_len, p.shape.output_len)
            else:
                total += point_s(p.concurrency or 8, math.ceil(prompts * TEXT_TURNS), TEXT_INPUT, TEXT_OUTPUT)
        out.append(total)
    return out, len(plan.groups[0][1])


def makespan(times: list[float], lanes: int) -> float:
    finish = [0.0] * lanes
    heapq.heapify(finish)
    for t in sorted(times, reverse=True):
        heapq.heappush(finish, heapq.heappop(finish) + t)
    return max(finish)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,2,3,4,6,8")
    args = parser.parse_args()
    nodes = [int(n) for n in args.nodes.split(",")]
    cases = [
        ("one rank, measured start-up (145 s)", STARTUP_RANK_MEASURED),
        ("real weights, assumed start-up (900 s)", STARTUP_REAL_ASSUMED),
    ]
    headers = ["start-up per config", "configs x points", "points' time per config"]
    headers += [f"{n} node{'s' * (n > 1)}" for n in nodes]
    rows = []
    for name, startup in cases:
        times, per_config = config_times(startup)
        points = sum(times) / len(times) - startup
        rows.append(
            [name, f"{len(times)} x {per_config}", f"{points / 60:.0f} min"]
            + [f"{makespan(times, n) / 3600:.1f} h" for n in nodes]
        )
    print("\n".join(md_rows(headers, rows)))


if __name__ == "__main__":
    main()
