"""`bench compare BASELINE CANDIDATE`: per matched point and metric, the ratio with a bootstrap confidence
interval and a Mann-Whitney test; a verdict only when significant AND beyond a minimum effect size.

Samples are trials (`sweep --repeat N`, and one sweep per round of `bench ab`): the trial is the independent
unit. Throughput and acceptance take each trial's value; latencies take each trial's median over its requests
(pooling requests would treat requests of one trial, which share its conditions, as independent, and an A/A
comparison then finds "changes"). A side may be one results directory or a folder of them (rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from bench.errors import BenchError
from bench.metrics import request_latencies
from bench.store import SweepStore

# metric -> higher is better
METRICS = {
    "output_throughput": True,
    "request_throughput": True,
    "mean_acceptance_length": True,
    "ttft_ms": False,
    "tpot_ms": False,
    "e2e_ms": False,
}
GATED = ("output_throughput", "tpot_ms")


@dataclass
class PointSamples:
    label: str
    config: dict
    trial: dict[str, list[float]] = field(default_factory=dict)  # metric -> one value per trial


def sweep_dirs(path: Path) -> list[Path]:
    path = Path(path)
    if (path / "manifest.json").exists():
        return [path]
    found = sorted(p.parent for p in path.glob("*/manifest.json"))
    if not found:
        raise BenchError(f"{path}: neither a results directory nor a folder of them (no manifest.json)")
    return found


def load_side(path: Path) -> dict[str, PointSamples]:
    """Samples per point id over every results directory of one side (ok points only)."""
    out: dict[str, PointSamples] = {}
    for sweep in sweep_dirs(path):
        store = SweepStore(sweep)
        for pid, rec in store.points().items():
            if rec["status"] != "ok":
                continue
            ps = out.setdefault(pid, PointSamples(f"{rec['label']['engine']} {rec['label']['shape']}", rec["config"]))
            for trial in rec.get("trials") or [{"metrics": rec["metrics"], "spec_decode": rec["spec_decode"]}]:
                values = {
                    "output_throughput": trial["metrics"].get("output_throughput"),
                    "request_throughput": trial["metrics"].get("request_throughput"),
                    "mean_acceptance_length": (trial.get("spec_decode") or {}).get("mean_acceptance_length"),
                }
                for name, value in values.items():
                    if value is not None:
                        ps.trial.setdefault(name, []).append(float(value))
            per_trial: dict[int, dict[str, list[float]]] = {}
            for row in store.raw(pid):
                if row["phase"] == "measure" and row["status"] == "ok":
                    lat = request_latencies(row)
                    bucket = per_trial.setdefault(row.get("trial") or 0, {})
                    for name, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e")):
                        if lat[key] is not None:
                            bucket.setdefault(name, []).append(lat[key])
            for bucket in per_trial.values():
                for name, values in bucket.items():
                    ps.trial.setdefault(name, []).append(float(np.median(values)))
    return out


def bootstrap_ratio_ci(base, cand, stat, n: int = 2000, seed: int = 0, level: float = 0.95):
    rng = np.random.default_rng(seed)
    b, c = np.asarray(base, float), np.asarray(cand, float)
    bi = rng.integers(0, len(b), size=(n, len(b)))
    ci = rng.integers(0, len(c), size=(n, len(c)))
    ratios = stat(c[ci], axis=1) / stat(b[bi], axis=1)
    lo, hi = np.percentile(ratios, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(lo), float(hi)


def compare_metric(
    base: list[float], cand: list[float], higher_better: bool, *, min_effect: float, alpha: float
) -> dict:
    """Ratio of means candidate / baseline over trial samples, its bootstrap CI, Mann-Whitney p, verdict."""
    stat = np.mean
    out = {
        "n_base": len(base),
        "n_cand": len(cand),
        "baseline": None,
        "candidate": None,
        "ratio": None,
        "ci_low": None,
        "ci_high": None,
        "p_value": None,
        "noise_cv": None,
        "verdict": "insufficient data",
    }
    if not base or not cand:
        return out
    b, c = float(stat(base)), float(stat(cand))
    out.update(baseline=b, candidate=c, ratio=c / b if b else None)
    if len(base) > 1:
        out["noise_cv"] = float(np.std(base, ddof=1) / np.mean(base)) if np.mean(base) else None
    if len(base) < 2 or len(cand) < 2 or not b:
        return out
    out["ci_low"], out["ci_high"] = bootstrap_ratio_ci(base, cand, stat)
    out["p_value"] = float(mannwhitneyu(base, cand, alternative="two-sided").pvalue)
    ratio = out["ratio"]
    significant = out["p_value"] < alpha and not (out["ci_low"] <= 1.0 <= out["ci_high"])
    if significant and abs(ratio - 1.0) >= min_effect:
        better = ratio > 1.0 if higher_better else ratio < 1.0
        out["verdict"] = "faster" if better else "slower"
    else:
        out["verdict"] = "no change"
    return out


def compare_dirs(baseline: Path, candidate: Path, *, min_effect: float = 0.02, alpha: float = 0.05) -> dict:
    base, cand = load_side(baseline), load_side(candidate)
    rows = []
    for pid in sorted(set(base) & set(cand), key=lambda p: base[p].label):
        bp, cp = base[pid], cand[pid]
        for metric, higher in METRICS.items():
            r = compare_metric(
                bp.trial.get(metric, []), cp.trial.get(metric, []), higher, min_effect=min_effect, alpha=alpha
            )
            rows.append({"point_id": pid, "label": bp.label, "metric": metric, **r})
    table = pd.DataFrame(rows)
    return {
        "table": table,
        "only_baseline": sorted(base[p].label for p in set(base) - set(cand)),
        "only_candidate": sorted(cand[p].label for p in set(cand) - set(base)),
        "decomposition": decompose(table),
        "min_effect": min_effect,
        "alpha": alpha,
        "baseline": str(baseline),
        "candidate": str(candidate),
    }


def decompose(table: pd.DataFrame) -> pd.DataFrame:
    """Split each throughput ratio into acceptance (mean acceptance length ratio) and kernel/system time (the
    rest: tokens per second per accepted length, i.e. the engine step rate)."""
    if table.empty:
        return pd.DataFrame(columns=["label", "throughput_ratio", "acceptance_factor", "system_factor"])
    t = table.pivot(index=["point_id", "label"], columns="metric", values="ratio").reset_index()
    t = t.rename(columns={"output_throughput": "throughput_ratio", "mean_acceptance_length": "acceptance_factor"})
    t["system_factor"] = t["throughput_ratio"] / t["acceptance_factor"]
    return t[["label", "throughput_ratio", "acceptance_factor", "system_factor"]]


def regressions(result: dict, gated=GATED) -> pd.DataFrame:
    t = result["table"]
    return t[(t.verdict == "slower") & t.metric.isin(gated)] if not t.empty else t


def _f(x, spec="{:.3f}"):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else spec.format(x)


def compare_markdown(result: dict) -> str:
    t = result["table"]
    counts = t.verdict.value_counts().to_dict() if not t.empty else {}
    noise = t[(t.metric == "output_throughput") & t.noise_cv.notna()].noise_cv if not t.empty else pd.Series([])
    lines = [
        "## bench compare",
        "",
        f"Baseline `{result['baseline']}` vs candidate `{result['candidate']}`: "
        f"{counts.get('slower', 0)} slower, {counts.get('faster', 0)} faster, {counts.get('no change', 0)} "
        f"no change, {counts.get('insufficient data', 0)} without enough data (verdict needs p < "
        f"{result['alpha']} and an effect of at least {result['min_effect']:.0%}).",
        f"Measured noise (baseline, output throughput across trials): median CV "
        f"{_f(noise.median() if len(noise) else None, '{:.1%}')}, max {_f(noise.max() if len(noise) else None, '{:.1%}')}.",
        "",
        "| point | output tok/s ratio [95% CI] | TPOT ratio [95% CI] | verdict |",
        "|---|---|---|---|",
    ]
    for _pid, grp in t.groupby("point_id", sort=False):
        by = {r.metric: r for r in grp.itertuples()}
        verdicts = sorted({by[m].verdict for m in GATED if m in by})
        lines.append(
            f"| {grp.label.iloc[0]} | {_ratio(by.get('output_throughput'))} | {_ratio(by.get('tpot_ms'))} "
            f"| {', '.join(verdicts)} |"
        )
    if result["only_baseline"] or result["only_candidate"]:
        lines += [
            "",
            f"Unmatched: only in baseline {result['only_baseline'] or '-'}; only in candidate "
            f"{result['only_candidate'] or '-'} (failed, skipped or not planned on the other side).",
        ]
    lines += [
        "",
        "<details><summary>Every metric</summary>",
        "",
        "| point | metric | baseline | candidate | ratio [95% CI] | p | n | noise CV | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in t.itertuples():
        lines.append(
            f"| {r.label} | {r.metric} | {_f(r.baseline, '{:.4g}')} | {_f(r.candidate, '{:.4g}')} | "
            f"{_ratio(r)} | {_f(r.p_value, '{:.3g}')} | {r.n_base}/{r.n_cand} | "
            f"{_f(r.noise_cv, '{:.1%}')} | {r.verdict} |"
        )
    d = result["decomposition"]
    if not d.empty:
        lines += [
            "",
            "Throughput ratio = acceptance factor (mean acceptance length ratio) x system factor "
            "(engine step rate ratio):",
            "",
            "| point | throughput | acceptance | system |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.label} | {_f(r.throughput_ratio)} | {_f(r.acceptance_factor)} | {_f(r.system_factor)} |"
            for r in d.itertuples()
        ]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def _ratio(r) -> str:
    if r is None or r.ratio is None:
        return "-"
    ci = f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and not math.isnan(r.ci_low) else ""
    return f"{r.ratio:.3f}{ci}"
