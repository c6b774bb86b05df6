"""`bench compare BASELINE CANDIDATE`: per matched point and metric, faster / slower / no change beyond noise, or
insufficient data; and every point the candidate failed or lost, which fails the gate like a regression.

A side is one results directory or a folder of them (rounds of `bench ab`, or sweeps run one after another). Each
results directory started one server per engine configuration, so each (directory, point) is one server start:
the statistical unit (bench.stats). Inside a start, throughput and acceptance take each trial's value and
latencies each trial's median over its requests; the start's value is the mean over its trials.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import BenchError, ExitCode
from bench.fmt import fmt, is_missing, md_rows
from bench.metrics import request_latencies
from bench.records import PointRecord, Trial
from bench.run_options import figure_keys
from bench.sides import changed_markdown, shown_paths, what_changed
from bench.stats import CORRECTIONS, UNREACHABLE, Comparison, compare_servers, decide, per_test_alpha
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
GATED_NAMES = {"output_throughput": "output tok/s", "tpot_ms": "TPOT"}


@dataclass
class PointSide:
    """One point on one side: per server start, metric -> one value per trial; and the starts that failed."""

    label: str
    servers: list[dict[str, list[float]]] = field(default_factory=list)
    rounds: list[str] = field(default_factory=list)  # the results directory's name of each start (round-N of ab)
    failures: list[str] = field(default_factory=list)  # "reason: detail" per failed start
    skipped: bool = False
    flagged: list[tuple[str, str]] = field(default_factory=list)  # (start's folder, its flags) per flagged ok start
    methods: list[dict[str, str]] = field(default_factory=list)  # per ok start, how it was measured (`method`)


def sweep_dirs(path: Path) -> list[Path]:
    path = Path(path)
    if (path / "manifest.json").exists():
        return [path]
    found = sorted(p.parent for p in path.glob("*/manifest.json"))
    if not found:
        raise BenchError(f"{path}: neither a results directory nor a folder of them (no manifest.json)")
    return found


NOT_RECORDED = "not recorded"  # a [run] key the results' bench did not have yet


def method(run: dict, rec: PointRecord) -> dict[str, str]:
    """How a server start's figures were measured, as far as it changes what they mean: the headline's window
    (steady span, or the whole window of an older bench) and the `[run]` keys marked as defining the figures
    (bench.run_options.figure_keys), each as recorded in its manifest."""
    assert rec.metrics is not None
    out: dict[str, str] = {"headline window": rec.metrics.window}
    for key in figure_keys():
        out[key] = str(run[key]).lower() if key in run else NOT_RECORDED
    return out


def load_side(path: Path) -> dict[str, PointSide]:
    """Every point of every results directory of one side, ok or not."""
    out: dict[str, PointSide] = {}
    for sweep in sweep_dirs(path):
        store = SweepStore(sweep)
        run = (store.manifest().get("profile") or {}).get("run") or {}
        for pid, rec in store.records().items():
            side = out.setdefault(pid, PointSide(f"{rec.label['engine']} {rec.label['shape']}"))
            if rec.status == "ok":
                side.servers.append(_server_values(store, pid, rec))
                side.rounds.append(sweep.name)
                side.methods.append(method(run, rec))
                if rec.flags:  # bench.executor._flags: what the window held that the workload did not ask for
                    side.flagged.append((sweep.name, "; ".join(str(f) for f in rec.flags)))
            elif rec.status == "skipped":
                side.skipped = True
            else:
                side.failures.append(f"{rec.reason}: {str(rec.detail or '')[:160]}")
    return out


def _server_values(store: SweepStore, pid: str, rec: PointRecord) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    assert rec.metrics is not None  # an ok record (bench.records.PointRecord)
    for trial in rec.trials or [Trial(metrics=rec.metrics, spec_decode=rec.spec_decode)]:
        found = {
            "output_throughput": trial.metrics.output_throughput,
            "request_throughput": trial.metrics.request_throughput,
            "mean_acceptance_length": trial.spec_decode.mean_acceptance_length if trial.spec_decode else None,
        }
        for name, value in found.items():
            if value is not None:
                values.setdefault(name, []).append(float(value))
    per_trial: dict[int, dict[str, list[float]]] = {}
    for row in store.raw(pid):
        if row["phase"] == "measure" and row["status"] == "ok":
            lat = request_latencies(row)
            bucket = per_trial.setdefault(row.get("trial") or 0, {})
            for name, key in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e")):
                if lat[key] is not None:
                    bucket.setdefault(name, []).append(lat[key])
    for bucket in per_trial.values():
        for name, lat_values in bucket.items():
            values.setdefault(name, []).append(float(np.median(lat_values)))
    return values


def judge(
    points: list[tuple[str, str, list[dict[str, list[float]]], list[dict[str, list[float]]]]],
    *,
    min_effect: float = 0.02,
    alpha: float = 0.05,
    max_effect: float = 0.05,
    correction: str = "holm",
    paired: bool = False,
) -> dict:
    """Every metric of every (point id, label, baseline starts, candidate starts) compared (bench.stats; a start is
    metric -> its trials' values), the gated tests at the family's per-test level, their p adjusted together for
    multiplicity (`correction`: holm, bh or none) and their verdicts drawn from the adjusted p. `max_effect`: the
    largest change a pass may leave undetected (`outcome`). `paired`: the i-th starts of the two sides are one
    round (`pair_rounds`), tested by sign flips of the round differences."""
    if not min_effect <= max_effect:  # a change between them would be significant, ignored, and called a pass
        raise BenchError(
            f"--min-effect {min_effect:.1%} is larger than --max-effect {max_effect:.1%}: a change between the two "
            "would be ignored as too small yet be above what a pass promises to detect"
        )
    tests = len(points) * len(GATED)
    level = per_test_alpha(alpha, tests, correction)  # gated tests: intervals, detectable effect, starts needed
    rows = []
    for pid, label, base, cand in points:
        for metric, higher in METRICS.items():
            if paired:  # keep the rounds aligned: a round missing a value drops out in stats.compare_paired
                b, c = [s.get(metric) or [] for s in base], [s.get(metric) or [] for s in cand]
            else:
                b, c = [s[metric] for s in base if s.get(metric)], [s[metric] for s in cand if s.get(metric)]
            at = level if metric in GATED else alpha
            found = compare_servers(b, c, higher, min_effect=min_effect, alpha=at, paired=paired)
            rows.append({"point_id": pid, "label": label, "metric": metric, **dataclasses.asdict(found)})
    family = [i for i, row in enumerate(rows) if row["metric"] in GATED and row["p_value"] is not None]
    adjusted = CORRECTIONS[correction]([rows[i]["p_value"] for i in family])
    for row in rows:
        row["p_adjusted"] = None
    for i, p in zip(family, adjusted):
        row = rows[i]
        row["p_adjusted"] = p
        row["verdict"] = decide(
            row["ratio"], row["ci_low"], row["ci_high"], p, METRICS[row["metric"]], alpha, min_effect
        )
    table = pd.DataFrame(
        rows, columns=["point_id", "label", "metric", *(f.name for f in dataclasses.fields(Comparison)), "p_adjusted"]
    )
    return {
        "table": table,
        "correction": correction,
        "max_effect": max_effect,
        "gated_tests": tests,
        "per_test_alpha": level,
        "min_effect": min_effect,
        "alpha": alpha,
        "paired": paired,
        "failures": failures({}, {}),
        "flagged": flagged({}, {}, []),
        "no_baseline": no_baseline({}, {}),
    }


ROUND_NAME = re.compile(r"round-(\d+)")


def pair_rounds(base: PointSide, cand: PointSide) -> tuple[list[dict], list[dict]]:
    """The starts of both sides in the order of the rounds both ran ok (`bench ab`'s round-N folders; other folder
    names are not rounds and never pair); a round one side lacks is left out, and a point with no round on both
    sides has no pairs (insufficient data, so the comparison is inconclusive, not aborted)."""
    rounds = {r: int(m.group(1)) for r in set(base.rounds) & set(cand.rounds) if (m := ROUND_NAME.fullmatch(r))}
    common = sorted(rounds, key=rounds.__getitem__)
    b, c = dict(zip(base.rounds, base.servers)), dict(zip(cand.rounds, cand.servers))
    return [b[r] for r in common], [c[r] for r in common]


def compare_dirs(baseline: Path, candidate: Path, across_methods: bool = False, **options) -> dict:
    """`judge` over the points both sides ran ok (`options`: its keyword arguments), with what failed or is
    missing in the candidate and the throughput decomposition. Refuses points measured by different methods
    (`method_differences`) unless `across_methods`: then they are judged and the differences listed."""
    base, cand = load_side(baseline), load_side(candidate)
    matched = [
        p for p in sorted(set(base) & set(cand), key=lambda p: base[p].label) if base[p].servers and cand[p].servers
    ]
    differences = method_differences(base, cand, matched)
    if not differences.empty and not across_methods:
        rows = differences.drop_duplicates(["key", "baseline", "candidate"])
        said = "; ".join(f"{r.key}: baseline {r.baseline}, candidate {r.candidate}" for r in rows.itertuples())
        raise BenchError(
            f"the two sides were measured differently ({said}; {differences.label.nunique()} of {len(matched)} "
            "matched points): a verdict would judge the method, not vLLM. Measure both sides with the same "
            "profile [run] keys, or pass --across-methods to compare them anyway (the report lists the "
            "differences)"
        )
    if options.get("paired"):
        sides = {p: pair_rounds(base[p], cand[p]) for p in matched}
        if matched and not any(b for b, _ in sides.values()):
            raise BenchError(
                "--paired needs the rounds of `bench ab` on both sides (folders round-N with the same names); "
                "these results have none in common"
            )
    else:
        sides = {p: (base[p].servers, cand[p].servers) for p in matched}
    result = judge([(p, base[p].label, *sides[p]) for p in matched], **options)
    return {
        **result,
        "failures": failures(base, cand),
        "flagged": flagged(base, cand, matched),
        "method_differences": differences,
        "no_baseline": no_baseline(base, cand),
        "decomposition": decompose(result["table"]),
        "baseline": str(baseline),
        "candidate": str(candidate),
        "what_changed": what_changed(baseline, candidate),
    }


def failures(base: dict[str, PointSide], cand: dict[str, PointSide]) -> pd.DataFrame:
    """Points the candidate failed (in any server start) or never produced, while the baseline ran them. A point
    that failed on both sides is listed with `both` so a known, unchanged failure does not hide."""
    rows = []
    for pid, bp in sorted(base.items(), key=lambda kv: kv[1].label):
        cp = cand.get(pid)
        if bp.skipped and (cp is None or cp.skipped):
            continue
        if cp is None or (not cp.servers and not cp.failures):
            rows.append(
                {
                    "point_id": pid,
                    "label": bp.label,
                    "problem": "missing in candidate",
                    "detail": "no record (not planned, or the candidate sweep was cut short)",
                    "gated": bool(bp.servers),
                }
            )
        elif cp.failures:
            both = bool(bp.failures) and not bp.servers
            starts = len(cp.failures) + len(cp.servers)
            rows.append(
                {
                    "point_id": pid,
                    "label": bp.label,
                    "problem": f"failed in {len(cp.failures)} of {starts} server starts"
                    + (" (baseline failed too)" if both else ""),
                    "detail": "; ".join(sorted(set(cp.failures)))[:300],
                    "gated": not both,
                }
            )
    return pd.DataFrame(rows, columns=["point_id", "label", "problem", "detail", "gated"])


def no_baseline(base: dict[str, PointSide], cand: dict[str, PointSide]) -> pd.DataFrame:
    """Points the candidate ran (ok or failed) that the baseline has no ok server start of: failed there, failed
    on both sides, or missing there. Nothing to judge them against, so a pass cannot include them (`outcome`)."""
    rows = []
    for pid, cp in sorted(cand.items(), key=lambda kv: kv[1].label):
        bp = base.get(pid)
        if cp.skipped or (not cp.servers and not cp.failures) or (bp is not None and bp.servers):
            continue
        if bp is None or (not bp.failures and not bp.skipped):
            problem = "missing in baseline"
        elif bp.skipped:
            problem = "skipped in baseline"
        else:
            problem = "failed on both sides" if not cp.servers else "failed in baseline"
        rows.append({"point_id": pid, "label": cp.label, "problem": problem})
    return pd.DataFrame(rows, columns=["point_id", "label", "problem"])


def flagged(base: dict[str, PointSide], cand: dict[str, PointSide], compared: list[str]) -> pd.DataFrame:
    """The compared points' server starts whose records carry flags (a window still contaminated after its
    re-measures, prompts that hit the prefix cache, vLLM's counts differing from the client's): their figures are
    in the comparison, so a pass over them is not a pass (`outcome`)."""
    rows = [
        {"point_id": p, "label": sides[p].label, "side": name, "start": start, "flags": flags}
        for p in compared
        for name, sides in (("baseline", base), ("candidate", cand))
        for start, flags in sides[p].flagged
    ]
    return pd.DataFrame(rows, columns=["point_id", "label", "side", "start", "flags"])


def method_differences(base: dict[str, PointSide], cand: dict[str, PointSide], compared: list[str]) -> pd.DataFrame:
    """Per compared point, each part of `method` whose value is not the same in every server start of both sides
    (the values each side's starts recorded, joined)."""
    rows = []
    for p in compared:
        starts = {"baseline": base[p].methods, "candidate": cand[p].methods}
        for key in base[p].methods[0]:  # `method` gives every start the same keys
            seen = {name: sorted({m[key] for m in ms}) for name, ms in starts.items()}
            if len(set(seen["baseline"]) | set(seen["candidate"])) > 1:
                rows.append(
                    {"point_id": p, "label": base[p].label, "key": key, **{n: " / ".join(v) for n, v in seen.items()}}
                )
    return pd.DataFrame(rows, columns=["point_id", "label", "key", "baseline", "candidate"])


def decompose(table: pd.DataFrame) -> pd.DataFrame:
    """Split each throughput ratio into acceptance (mean acceptance length ratio) and kernel/system time (the
    rest: tokens per second per accepted length, i.e. the engine step rate)."""
    cols = ["label", "throughput_ratio", "acceptance_factor", "system_factor"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    t = table.pivot(index=["point_id", "label"], columns="metric", values="ratio").reset_index()
    t = t.rename(columns={"output_throughput": "throughput_ratio", "mean_acceptance_length": "acceptance_factor"})
    if "acceptance_factor" not in t:
        t["acceptance_factor"] = None
    t["system_factor"] = t["throughput_ratio"] / t["acceptance_factor"]
    return t[cols]


def regressions(result: dict, gated=GATED) -> pd.DataFrame:
    """What fails the gate: gated metrics that got slower, and gated failures (failed or missing points). When
    nothing could be compared at all, that is a failure too: a gate that compared nothing passes nothing."""
    t = result["table"]
    slower = t[(t.verdict == "slower") & t.metric.isin(gated)][["point_id", "label", "metric", "verdict"]]
    f = result["failures"]
    broken = f[f.gated.astype(bool)].assign(metric="status", verdict=lambda d: d.problem)[
        ["point_id", "label", "metric", "verdict"]
    ]
    if t.empty and broken.empty:
        broken = pd.DataFrame([{"point_id": "-", "label": "-", "metric": "status", "verdict": "nothing compared"}])
    return pd.concat([slower, broken], ignore_index=True)


def outcome(result: dict, gated=GATED) -> tuple[int, str]:
    """(exit code, one line): a regression (4) when a gated metric got slower or a point failed; else
    inconclusive (6) when a gated metric could not be judged (too few server starts), could have hidden a change
    larger than `max_effect` (its detectable effect is larger, or unknown), or rests on a flagged server start
    (`flagged`); else 0: no regression larger than the stated detectable effect."""
    bad = regressions(result, gated)
    if len(bad):
        return ExitCode.GATE_FAILED, f"regression: {len(bad)} gated metric(s) slower, or points failed or missing"
    t = result["table"]
    g = t[t.metric.isin(gated)]
    unjudged = g[g.verdict == "insufficient data"]
    blind = g[(g.verdict == "no change") & ~(g.mde.astype(float) <= result["max_effect"])]
    suspect = result["flagged"][result["flagged"].point_id.isin(g.point_id)]
    orphans = result["no_baseline"]
    if len(unjudged) or len(blind) or len(suspect) or len(orphans):
        why = []
        if len(orphans):
            why.append(
                f"{len(orphans)} point(s) without an ok baseline to judge against "
                f"({', '.join(sorted(set(orphans.problem)))})"
            )
        if len(unjudged):
            why.append(
                f"{len(unjudged)} gated test(s) with too few server starts (needs {_starts(unjudged.needed.max(), 'a side')})"
            )
        if len(blind):
            worst = blind.mde.astype(float).max()
            why.append(
                f"{len(blind)} gated test(s) whose detectable effect "
                + (f"(up to {worst:.1%})" if worst == worst else "(unknown)")
                + f" exceeds --max-effect {result['max_effect']:.0%}"
            )
        if len(suspect):
            why.append(f"{len(suspect)} flagged server start(s) in the comparison (compare.md lists them)")
        return ExitCode.INCONCLUSIVE, "inconclusive: " + "; ".join(why)
    worst = g.mde.astype(float).max() if len(g) else float("nan")
    floor = result.get("min_effect", 0.0)  # smaller changes are "no change" by definition, significant or not
    if worst < floor:
        return ExitCode.OK, (
            f"no regression larger than {floor:.1%} (--min-effect: changes below it are not counted; the largest "
            f"detectable effect of {len(g)} gated tests is {worst:.1%})"
        )
    return ExitCode.OK, f"no regression larger than {worst:.1%} (the largest detectable effect of {len(g)} gated tests)"


def _starts(needed, unit: str = "server starts a side") -> str:
    if needed is None or needed != needed:
        return "more server starts"
    if int(needed) >= UNREACHABLE:
        return "a larger --alpha: no number of server starts reaches its level"
    return f"{int(needed)} {unit}"


def _ratio(r) -> str:
    if r is None or is_missing(r.ratio):
        return "-"
    ci = f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if not is_missing(r.ci_low) else ""
    return f"{r.ratio:.3f}{ci}"


def _verdict_cell(r) -> str:
    if r is None:
        return "-"
    if r.verdict == "insufficient data":
        return f"insufficient data (needs {_starts(r.needed)}, has {r.n_base}/{r.n_cand})"
    if r.verdict == "no change" and not is_missing(r.mde):
        return f"no change (detectable: {r.mde:.1%})"
    return str(r.verdict)


def compare_markdown(result: dict, relative_to: Path | None = None) -> str:
    """Markdown for a PR comment: gate problems first, then the verdict table, then every metric and the noise.
    Paths print relative to `relative_to` (the folder compare.md is written in; default the working directory)."""
    t, f = result["table"], result["failures"]
    counts = t.verdict.value_counts().to_dict() if not t.empty else {}
    base_path, cand_path = shown_paths([result["baseline"], result["candidate"]], relative_to)
    lines = [
        "## bench compare",
        "",
        f"Baseline `{base_path}` vs candidate `{cand_path}`: "
        f"{counts.get('slower', 0)} slower, {counts.get('faster', 0)} faster, {counts.get('no change', 0)} "
        f"no change, {counts.get('insufficient data', 0)} insufficient data, {int(f.gated.sum())} failed or missing "
        f"(a verdict needs p < {result['alpha']} over server starts, an interval excluding 1 (gated tests: "
        f"{1 - result.get('per_test_alpha', result['alpha']):.4g} confidence, the family's per-test level; others: "
        f"{1 - result['alpha']:.4g}) and an effect of "
        f"at least {result['min_effect']:.0%}; the {result.get('gated_tests', 0)} gated tests' p adjusted together: "
        f"{result.get('correction', 'none')}{'; paired by round: sign-flip test of the round differences' if result.get('paired') else ''}).",
        "",
        f"**Outcome: {outcome(result)[1]}**",
        "",
        *changed_markdown(result.get("what_changed")),
    ]
    if not f.empty:
        lines += ["### Failed or missing in the candidate", ""]
        rows = ([r.label, r.problem, r.detail, "yes" if r.gated else "no"] for r in f.itertuples())
        lines += [*md_rows(["point", "problem", "detail", "gates"], rows), ""]
    orphans = result["no_baseline"]
    if not orphans.empty:
        lines += ["### Not judged: no ok baseline (a pass cannot include them)", ""]
        lines += [*md_rows(["point", "problem"], ([r.label, r.problem] for r in orphans.itertuples())), ""]
    marked = result["flagged"]
    if not marked.empty:
        lines += [
            "### Flagged server starts (their figures are in the comparison: a pass over them is inconclusive)",
            "",
        ]
        rows = ([r.label, r.side, r.start, r.flags[:300]] for r in marked.itertuples())
        lines += [*md_rows(["point", "side", "start", "flags"], rows), ""]
    differences = result.get("method_differences")
    if differences is not None and not differences.empty:
        lines += [
            "### Measured differently (--across-methods: part of each ratio is the method's, not vLLM's)",
            "",
        ]
        rows = ([r.label, r.key, r.baseline, r.candidate] for r in differences.itertuples())
        lines += [*md_rows(["point", "measured with", "baseline", "candidate"], rows), ""]
    if t.empty:
        lines += ["No point ran ok on both sides: nothing was compared.", ""]
        return "\n".join(lines)
    lines += _verdict_table(t) + _noise_lines(t) + _details(t, result["decomposition"])
    return "\n".join(lines)


def _verdict_table(t: pd.DataFrame) -> list[str]:
    rows = []
    for _pid, grp in t.groupby("point_id", sort=False):
        by = {r.metric: r for r in grp.itertuples()}
        thr = by.get("output_throughput")
        cells = [_verdict_cell(by[m]) for m in GATED if m in by]
        verdict = (
            cells[0]
            if len(set(cells)) == 1
            else "; ".join(f"{GATED_NAMES[m]}: {_verdict_cell(by[m])}" for m in GATED if m in by)
        )
        n = f"{thr.n_base}/{thr.n_cand}" if thr is not None else "-"
        rows.append([grp.label.iloc[0], n, _ratio(thr), _ratio(by.get("tpot_ms")), verdict])
    headers = ["point", "servers", "output tok/s ratio [95% CI]", "TPOT ratio [95% CI]", "verdict"]
    return md_rows(headers, rows)


def _noise_lines(t: pd.DataFrame) -> list[str]:
    thr = t[t.metric == "output_throughput"]
    between, within, mde = (thr[c].dropna() for c in ("between_cv", "within_cv", "mde"))
    return [
        "",
        f"Noise (baseline output throughput): between server starts median CV {fmt(between.median() if len(between) else None, '.1%')}, "
        f"within one server (trials) median CV {fmt(within.median() if len(within) else None, '.1%')}; "
        f"smallest change this design detects (power 80%): median {fmt(mde.median() if len(mde) else None, '.1%')}.",
    ]


def _details(t: pd.DataFrame, d: pd.DataFrame) -> list[str]:
    headers = [
        *("point", "metric", "baseline", "candidate", "ratio [95% CI]", "p", "p adjusted", "servers"),
        *("between CV", "within CV", "detectable", "verdict"),
    ]
    rows = (
        [
            *(r.label, r.metric, fmt(r.baseline, ".4g"), fmt(r.candidate, ".4g"), _ratio(r), fmt(r.p_value, ".3g")),
            *(fmt(r.p_adjusted, ".3g"), f"{r.n_base}/{r.n_cand}", fmt(r.between_cv, ".1%")),
            *(fmt(r.within_cv, ".1%"), fmt(r.mde, ".1%"), r.verdict),
        ]
        for r in t.itertuples()
    )
    lines = ["", "<details><summary>Every metric</summary>", "", *md_rows(headers, rows)]
    if not d.empty:
        lines += [
            "",
            "Throughput ratio = acceptance factor (mean acceptance length ratio) x system factor "
            "(engine step rate ratio):",
            "",
        ]
        rows = (
            [r.label, fmt(r.throughput_ratio, ".3f"), fmt(r.acceptance_factor, ".3f"), fmt(r.system_factor, ".3f")]
            for r in d.itertuples()
        )
        lines += md_rows(["point", "throughput", "acceptance", "system"], rows)
    return [*lines, "", "</details>", ""]
