"""`bench compare BASELINE CANDIDATE`: per matched point and metric, the slowdown with one-sided bounds on log ratios
and a verdict (slower, faster, no regression larger than --max-effect, inconclusive, insufficient data); the
gate's outcome (regression 4, pass 0, inconclusive 6; `judge`, `outcome`); and every point the candidate failed
or lost, which fails the gate like a regression.

A side is one results directory or a folder of them (rounds of `bench ab`, or sweeps run one after another). Each
results directory started one server per engine configuration, so each (directory, point) is one server start:
the statistical unit (bench.verdicts.stats). Inside a start, throughput and acceptance take each trial's value and
latencies each trial's median over its requests; the start's value is the mean over its trials.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.config.run_options import figure_keys
from bench.core.errors import BenchError, ExitCode
from bench.core.fmt import fmt, is_missing, md_rows
from bench.measure.metrics import request_latencies
from bench.results.records import PointRecord, Trial
from bench.results.store import SweepStore
from bench.verdicts.outputs import compare_outputs, outputs_markdown
from bench.verdicts.outputs import headline as outputs_headline
from bench.verdicts.sides import changed_markdown, shown_paths, what_changed
from bench.verdicts.stats import (
    CORRECTIONS,
    MIN_STARTS,
    Comparison,
    compare_servers,
    decide,
    per_test_alpha,
    settle,
)

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
    (bench.config.run_options.figure_keys), each as recorded in its manifest."""
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
                if rec.flags:  # bench.run.executor._flags: what the window held that the workload did not ask for
                    side.flagged.append((sweep.name, "; ".join(str(f) for f in rec.flags)))
            elif rec.status == "skipped":
                side.skipped = True
            else:
                side.failures.append(f"{rec.reason}: {str(rec.detail or '')[:160]}")
    return out


def _server_values(store: SweepStore, pid: str, rec: PointRecord) -> dict[str, list[float]]:
    values: dict[str, list[float]] = {}
    assert rec.metrics is not None  # an ok record (bench.results.records.PointRecord)
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
    paired: bool = True,
) -> dict:
    """Every metric of every (point id, label, baseline starts, candidate starts) compared on log ratios
    (bench.verdicts.stats.compare_servers; a start is metric -> its trials' values). `paired`: the i-th starts of the two
    sides are one round (`pair_rounds`).

    The gated tests are judged as a family, each side at `alpha`:
    - the regression side: each gated test's one-sided p of "not slower", adjusted together for multiplicity
      (`correction`: holm, bh or none); its lower bound shown at alpha / tests, the first Holm step;
    - the pass side: each gated test's one-sided upper bound at `alpha`, unadjusted. A pass needs every gated test's
      bound below `max_effect`: an intersection-union test, whose chance of a false pass is at most that of the
      one test whose true slowdown is largest, alpha; the largest bound printed bounds the largest true slowdown
      with 1 - alpha confidence."""
    if not min_effect <= max_effect:  # a change between them would be significant, ignored, and called a pass
        raise BenchError(
            f"--min-effect {min_effect:.1%} is larger than --max-effect {max_effect:.1%}: a change between the two "
            "would be ignored as too small yet be above what a pass promises to rule out"
        )
    tests = len(points) * len(GATED)
    level = per_test_alpha(alpha, tests, correction)  # gated tests' lower bounds (the regression side)
    rows, found_all = [], []
    for pid, label, base, cand in points:
        for metric, higher in METRICS.items():
            if paired:  # keep the rounds aligned: a round missing a value drops out in stats.compare_servers
                b, c = [s.get(metric) or [] for s in base], [s.get(metric) or [] for s in cand]
            else:
                b, c = [s[metric] for s in base if s.get(metric)], [s[metric] for s in cand if s.get(metric)]
            at = level if metric in GATED else alpha
            found = compare_servers(
                b, c, higher, min_effect=min_effect, max_effect=max_effect, alpha=at, pass_alpha=alpha, paired=paired
            )
            found_all.append(found)
            rows.append({"point_id": pid, "label": label, "metric": metric, **dataclasses.asdict(found)})
    family = [i for i, row in enumerate(rows) if row["metric"] in GATED and row["p_value"] is not None]
    adjusted = CORRECTIONS[correction]([rows[i]["p_value"] for i in family])
    for row in rows:
        row["p_adjusted"] = None
    for i, p in zip(family, adjusted):
        rows[i]["p_adjusted"] = p
        rows[i]["verdict"] = decide(found_all[i], p, alpha, min_effect, max_effect)
    for row, found in zip(rows, found_all):
        if row["verdict"] == "inconclusive":
            row["settle_rounds"] = settle(found, METRICS[row["metric"]], max_effect, min_effect)
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
    paired = options.pop("paired", None)
    if paired is None:  # auto: paired when both sides are rounds of one `bench ab` (round-N folders), else not
        paired = bool(matched) and all(
            ROUND_NAME.fullmatch(r) for p in matched for side in (base[p], cand[p]) for r in side.rounds
        )
    if paired:
        sides = {p: pair_rounds(base[p], cand[p]) for p in matched}
        if matched and not any(b for b, _ in sides.values()):
            raise BenchError(
                "--paired needs the rounds of `bench ab` on both sides (folders round-N with the same names); "
                "these results have none in common (--unpaired compares them as independent starts)"
            )
    else:
        sides = {p: (base[p].servers, cand[p].servers) for p in matched}
    result = judge([(p, base[p].label, *sides[p]) for p in matched], paired=paired, **options)
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
        "outputs": compare_outputs(sweep_dirs(baseline), sweep_dirs(candidate)),
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


def _confidence(level) -> str:
    """A one-sided level as the bound's confidence: 0.05 -> "95%", 0.0125 -> "98.75%"."""
    return f"{100 * (1 - float(level)):.4g}%"


def _where(r) -> str:
    return f"{GATED_NAMES.get(r.metric, r.metric)} at {r.label}"


def outcome(result: dict, gated=GATED) -> tuple[int, str]:
    """(exit code, one line):
    - regression (4) when a gated metric is significantly slower (by at least --min-effect) or a point failed;
    - pass (0) when every gated test's upper bound of the slowdown is below `max_effect`, and nothing is flagged
      or unjudged: "no regression larger than X (upper bound Y)", Y the largest of those bounds;
    - else inconclusive (6), saying the largest upper bound above max effect and about how many more rounds
      would settle it (bench.verdicts.stats.settle), or what else stands in the way."""
    bad = regressions(result, gated)
    t = result["table"]
    g = t[t.metric.isin(gated)]
    max_effect = result["max_effect"]
    if len(bad):
        slower = g[g.verdict == "slower"]
        said = [
            f"{_where(r)} slower by {r.slowdown:.1%} (lower {_confidence(r.lower_level)} bound {r.lower:.1%}, "
            f"p adjusted {r.p_adjusted:.2g})"
            for r in slower.sort_values("slowdown", ascending=False).itertuples()
        ][:3]
        if len(slower) > 3:
            said.append(f"{len(slower) - 3} more gated test(s) slower")
        broken = len(bad) - len(slower)
        if broken:
            said.append(f"{broken} point(s) failed or missing (or nothing compared)")
        return ExitCode.GATE_FAILED, "regression: " + "; ".join(said)
    unjudged = g[g.verdict == "insufficient data"]
    undecided = g[g.verdict == "inconclusive"]
    suspect = result["flagged"][result["flagged"].point_id.isin(g.point_id)]
    orphans = result["no_baseline"]
    unit = "rounds" if result.get("paired") else "server starts a side"
    if len(unjudged) or len(undecided) or len(suspect) or len(orphans):
        why = []
        if len(undecided):
            worst = undecided.loc[undecided.upper.astype(float).idxmax()]
            more = undecided.settle_rounds
            text = (
                f"upper bound {worst.upper:.1%} above max effect {max_effect:.1%} ({_where(worst)}, "
                f"{_confidence(worst.upper_level)} one-sided)"
            )
            if len(undecided) > 1:
                text += f" and {len(undecided) - 1} more gated test(s) undecided"
            if more.isna().any():
                text += f"; no number of {unit} would settle it at the slowdown observed"
            else:
                text += f"; about {int(more.max())} more {unit} would settle it"
            why.append(text)
        if len(orphans):
            why.append(
                f"{len(orphans)} point(s) without an ok baseline to judge against "
                f"({', '.join(sorted(set(orphans.problem)))})"
            )
        if len(unjudged):
            has = int(min(unjudged.n_base.min(), unjudged.n_cand.min()))
            why.append(f"{len(unjudged)} gated test(s) with too few {unit} (needs {MIN_STARTS}, has {has})")
        if len(suspect):
            why.append(f"{len(suspect)} flagged server start(s) in the comparison (compare.md lists them)")
        return ExitCode.INCONCLUSIVE, "inconclusive: " + "; ".join(why)
    worst = g.loc[g.upper.astype(float).idxmax()]
    return ExitCode.OK, (
        f"no regression larger than {max_effect:.1%} (upper {_confidence(worst.upper_level)} bound "
        f"{worst.upper:.1%}: {_where(worst)}, the largest of {len(g)} gated tests)"
    )


def _ratio(r) -> str:
    if r is None or is_missing(r.ratio):
        return "-"
    return f"{r.ratio:.3f}"


def _slowdown(r) -> str:
    """The slowdown and its bounds: "3.1% [-1.2%, 7.4%]"."""
    if r is None or is_missing(r.slowdown):
        return "-"
    bounds = f" [{r.lower:.1%}, {r.upper:.1%}]" if not is_missing(r.upper) else ""
    return f"{r.slowdown:.1%}{bounds}"


def _verdict_cell(r, max_effect: float, paired: bool) -> str:
    if r is None:
        return "-"
    if r.verdict == "insufficient data":
        unit = "rounds" if paired else "server starts a side"
        return f"insufficient data (needs {MIN_STARTS} {unit}, has {r.n_base}/{r.n_cand})"
    if r.verdict == "no regression":
        return f"no regression > {max_effect:.0%} (upper {r.upper:.1%})"
    if r.verdict == "inconclusive":
        more = "" if is_missing(r.settle_rounds) else f"; ~{int(r.settle_rounds)} more"
        return f"inconclusive (upper {r.upper:.1%} > {max_effect:.0%}{more})"
    return str(r.verdict)


def compare_markdown(result: dict, relative_to: Path | None = None) -> str:
    """Markdown for a PR comment: the outcome first, then what changed between the sides, gate problems, the
    verdict table, every metric, noise. Paths print relative to `relative_to` (the folder compare.md is written
    in; default the working directory)."""
    t, f = result["table"], result["failures"]
    base_path, cand_path = shown_paths([result["baseline"], result["candidate"]], relative_to)
    counts = t[t.metric.isin(GATED)].verdict.value_counts().to_dict() if not t.empty else {}
    paired = result.get("paired")
    test = (
        "paired by round: a t bound on the mean of the rounds' log ratios"
        if paired
        else "unpaired: a Welch t bound on the difference of the sides' mean logs"
    )
    alpha, level = result["alpha"], result.get("per_test_alpha", result["alpha"])
    lines = [
        "## bench compare",
        "",
        f"Baseline `{base_path}` vs candidate `{cand_path}`.",
        "",
        f"**Outcome: {outcome(result)[1]}**",
        "",
        *changed_markdown(result.get("what_changed")),
        *([said, ""] if (said := outputs_headline(result.get("outputs") or [])) else []),
        f"Gated tests ({result.get('gated_tests', 0)}: output tok/s and TPOT at every point): "
        f"{counts.get('slower', 0)} slower, {counts.get('inconclusive', 0)} inconclusive, "
        f"{counts.get('no regression', 0) + counts.get('faster', 0)} no regression larger than "
        f"{result['max_effect']:.0%}, {counts.get('insufficient data', 0)} insufficient data; "
        f"{int(f.gated.sum())} point(s) failed or missing. Each test is one-sided on the log ratio ({test}). "
        f"The slowdown is 1 - candidate/baseline for throughput, candidate/baseline - 1 for latency; "
        f"[lower, upper] are one-sided bounds: the upper at {_confidence(alpha)} (a pass needs every gated upper "
        f"bound below --max-effect {result['max_effect']:.0%}), the lower at {_confidence(level)} (a regression "
        f"needs the one-sided p, adjusted over the gated tests by {result.get('correction', 'none')}, below "
        f"{alpha:g} and a slowdown of at least --min-effect {result['min_effect']:.0%}).",
        "",
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
        return "\n".join(lines + outputs_markdown(result.get("outputs") or []))
    lines += _verdict_table(t, result["max_effect"], bool(paired)) + _noise_lines(t)
    lines += _details(t, result["decomposition"], result["max_effect"], bool(paired))
    lines += outputs_markdown(result.get("outputs") or [])
    return "\n".join(lines)


def _verdict_table(t: pd.DataFrame, max_effect: float, paired: bool) -> list[str]:
    rows = []
    for _pid, grp in t.groupby("point_id", sort=False):
        by = {r.metric: r for r in grp.itertuples()}
        thr, tpot = by.get("output_throughput"), by.get("tpot_ms")
        cells = [_verdict_cell(by[m], max_effect, paired) for m in GATED if m in by]
        verdict = (
            cells[0]
            if len(set(cells)) == 1
            else "; ".join(f"{GATED_NAMES[m]}: {_verdict_cell(by[m], max_effect, paired)}" for m in GATED if m in by)
        )
        n = f"{thr.n_base}/{thr.n_cand}" if thr is not None else "-"
        rows.append([grp.label.iloc[0], n, _ratio(thr), _slowdown(thr), _ratio(tpot), _slowdown(tpot), verdict])
    headers = [
        *("point", "rounds" if paired else "servers", "output tok/s ratio", "slowdown [lower, upper]"),
        *("TPOT ratio", "slowdown [lower, upper]", "verdict"),
    ]
    return md_rows(headers, rows)


def _noise_lines(t: pd.DataFrame) -> list[str]:
    thr = t[t.metric == "output_throughput"]
    between, within, sd = (thr[c].dropna() for c in ("between_cv", "within_cv", "sd_log"))
    return [
        "",
        f"Noise (baseline output throughput): between server starts median CV {fmt(between.median() if len(between) else None, '.1%')}, "
        f"within one server (trials) median CV {fmt(within.median() if len(within) else None, '.1%')}; "
        f"sd of the log ratio the bounds rest on: median {fmt(sd.median() if len(sd) else None, '.1%')}.",
    ]


def _details(t: pd.DataFrame, d: pd.DataFrame, max_effect: float, paired: bool) -> list[str]:
    headers = [
        *("point", "metric", "baseline", "candidate", "ratio", "slowdown [lower, upper]", "p (slower)", "p adjusted"),
        *("rounds" if paired else "servers", "between CV", "within CV", "sd log", "verdict"),
    ]
    rows = (
        [
            *(r.label, r.metric, fmt(r.baseline, ".4g"), fmt(r.candidate, ".4g"), _ratio(r), _slowdown(r)),
            *(fmt(r.p_value, ".3g"), fmt(r.p_adjusted, ".3g"), f"{r.n_base}/{r.n_cand}", fmt(r.between_cv, ".1%")),
            *(fmt(r.within_cv, ".1%"), fmt(r.sd_log, ".1%"), _verdict_cell(r, max_effect, paired)),
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
