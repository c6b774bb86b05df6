"""The decision view that opens summary.md and report.html: per shape (input/output length x concurrency, per
workload where text workloads ran) the best and the worst speculative configuration, each one's output tok/s
speedup over no speculation (k = 0) with its 95% interval, the verdict, and the caveats that bound every figure.

One function builds the rows (`decision_rows`) from one estimate per point (`Estimate`: value, 95% interval and
what the interval covers); both renderers (summary.md, report.html) take their sentences and their narrow table
from those rows. Today a point's estimate is its steady output tok/s with the sub-window half-width of its record,
labelled "within one start" (`record_estimates`); a between-start estimate (several server starts of the same
point) is fed in the same way, labelled "between N starts", and replaces it.

A speedup's interval combines the two points' intervals in log space: the log ratio's half-width on each side is
the root sum of squares of the two logs' half-widths on the sides that move the ratio that way (the point's upper
with the baseline's lower, and the reverse). Verdict: "faster" when the interval lies above 1, "slower" when below,
"inconclusive" when it contains 1 or no precision is stated. The best configuration is picked among the points
that state a precision and whose steady span is not short (`metrics.steady.short`); only when none does is one of
the others picked, and the row says so.

With service-level targets (bench.config.slo) the view also names, per shape, the configuration (no-spec included) with
the most good requests per second (bench.report.goodput).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.config.slo import Slo
from bench.core.errors import BenchError
from bench.core.fmt import fmt, is_missing
from bench.models import dcp_emulation
from bench.models.kimi_rank import is_kimi_rank, parse_spec
from bench.report.goodput import goodput_table
from bench.report.servers import server_table
from bench.report.speedup import has_baseline, speedups
from bench.report.tables import points_table, provenance
from bench.results.store import SweepStore

WITHIN_ONE_START = "within one start"


def between_starts(n: int) -> str:
    """The label of an interval measured over `n` server starts of the same point."""
    return f"between {n} starts"


_BETWEEN = re.compile(r"^between (\d+) starts$")


@dataclass(frozen=True)
class Estimate:
    """One point's output tok/s and its 95% interval [low, high]; `label` says what the interval covers
    (WITHIN_ONE_START or between_starts(N)); no interval, or no label: no stated precision."""

    estimate: float
    low: float | None = None
    high: float | None = None
    label: str | None = None

    @property
    def stated(self) -> bool:
        return (
            self.label is not None
            and self.low is not None
            and self.high is not None
            and 0 < self.low <= self.estimate <= self.high
        )

    @classmethod
    def from_halfwidth(cls, value: float, halfwidth: float | None, label: str = WITHIN_ONE_START) -> Estimate:
        """From a relative 95% half-width (a record's `metrics.precision.output_throughput_halfwidth`)."""
        if halfwidth is None or is_missing(halfwidth) or not 0 <= halfwidth < 1:
            return cls(value)
        return cls(value, value * (1 - halfwidth), value * (1 + halfwidth), label)


def combined_label(a: str | None, b: str | None) -> str | None:
    """What an interval built from two intervals covers: the narrower coverage of the two (between N and M starts:
    between min(N, M); one within one start: within one start); None when either has none."""
    if a is None or b is None:
        return None
    na, nb = (_BETWEEN.match(x) for x in (a, b))
    if na and nb:
        return between_starts(min(int(na.group(1)), int(nb.group(1))))
    return WITHIN_ONE_START


@dataclass(frozen=True)
class Speedup:
    """A point's output tok/s over its baseline's, with the 95% interval (None: no stated precision)."""

    value: float
    low: float | None = None
    high: float | None = None
    label: str | None = None

    @property
    def stated(self) -> bool:
        return self.low is not None and self.high is not None and self.label is not None

    @property
    def verdict(self) -> str:
        """faster / slower / inconclusive (the interval contains 1, or there is none)."""
        if not self.stated:
            return "inconclusive"
        assert self.low is not None and self.high is not None
        if self.low > 1:
            return "faster"
        if self.high < 1:
            return "slower"
        return "inconclusive"

    @property
    def why(self) -> str | None:
        """Why a verdict is inconclusive ("no precision", "the interval contains 1"); None otherwise."""
        if not self.stated:
            return "no precision"
        return "the interval contains 1" if self.verdict == "inconclusive" else None

    def interval_text(self) -> str:
        """ "[1.27, 1.52] within one start", or "(no precision)"."""
        if not self.stated:
            return "(no precision)"
        return f"[{fmt(self.low, '.2f')}, {fmt(self.high, '.2f')}] {self.label}"

    def text(self) -> str:
        """ "1.39x [1.27, 1.52] within one start"."""
        return f"{fmt(self.value, '.2f')}x {self.interval_text()}"


def speedup_of(point: Estimate, base: Estimate) -> Speedup:
    """point / base with the two intervals combined in log space (module docstring)."""
    value = point.estimate / base.estimate
    if not (point.stated and base.stated):
        return Speedup(value)
    assert point.low is not None and point.high is not None and base.low is not None and base.high is not None
    up = math.hypot(math.log(point.high / point.estimate), math.log(base.estimate / base.low))
    down = math.hypot(math.log(point.estimate / point.low), math.log(base.high / base.estimate))
    return Speedup(value, value * math.exp(-down), value * math.exp(up), combined_label(point.label, base.label))


@dataclass(frozen=True)
class Pick:
    """A configuration at one shape: its label, point, tok/s, speedup over its no-spec point and what qualifies it
    (short steady span, no precision, flagged or contaminated)."""

    config: str
    point_id: str
    throughput: Estimate
    speedup: Speedup | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GoodputPick:
    config: str
    point_id: str
    requests_s: float
    output_s: float
    good: int
    counted: int


@dataclass(frozen=True)
class DecisionRow:
    shape: str
    configs: int  # configurations measured (ok) at this shape, no-spec included
    spec_configs: int  # of them speculative
    best: Pick | None  # None: no speedup known at this shape (no baseline)
    worst: Pick | None  # None: as best, or a single speculative configuration
    left_out: int = 0  # speculative points not eligible for best (short, no precision) while others were
    not_run: int = 0  # points planned at this shape that failed or were skipped
    fastest: Pick | None = None  # without a baseline: the configuration with the highest tok/s
    goodput: GoodputPick | None = None


@dataclass(frozen=True)
class Caveat:
    """What bounds the figures: `short` for the opening sentence ("dummy weights"), `text` for the list."""

    short: str
    text: str


@dataclass(frozen=True)
class DecisionView:
    rows: list[DecisionRow]
    caveats: list[Caveat]
    slo: Slo | None = None
    sentences: list[str] = field(default_factory=list)


def config_label(row) -> str:
    """ "FLASHMLA/fp8 draft k=3", "no-spec", with " DCP 8" (or "DCP 8 (emulated)") and the server axes."""
    k = int(row.num_speculative_tokens)
    parts = ["no-spec" if k == 0 else f"{row.draft_attention_backend}/{row.draft_kv_cache_dtype} draft k={k}"]
    emulated = getattr(row, "dcp_emulated", None)
    if emulated is not None and not is_missing(emulated):
        parts.append(f"DCP {int(emulated)} ({dcp_emulation.LABEL})")
    elif not is_missing(row.dcp_size) and int(row.dcp_size) > 1:
        parts.append(f"DCP {int(row.dcp_size)}")
    axes = getattr(row, "server_axes", None)
    if isinstance(axes, str) and axes:
        parts.append(axes)
    return " ".join(parts)


def shape_label(row) -> str:
    """The point's load: "8x1024x256" (concurrency x input x output), with its workload where one ran."""
    load = getattr(row, "load", None)
    if not isinstance(load, str) or not load:
        load = f"{row.concurrency}x{row.input_len}x{row.output_len}"
    workload = getattr(row, "workload", None)
    if isinstance(workload, str) and workload and workload not in load:
        load = f"{workload} {load}"
    return load


def record_estimates(points: pd.DataFrame) -> dict[str, Estimate]:
    """Per ok point: its headline output tok/s with the record's within-start half-width (none for a whole-window
    figure, or a short steady span)."""
    out = {}
    for r in points[points.status == "ok"].itertuples():
        value = pd.to_numeric(r.output_throughput, errors="coerce")
        if is_missing(value) or not value > 0:
            continue
        steady = getattr(r, "window", None) == "steady" and not bool(getattr(r, "steady_short", False))
        out[r.point_id] = Estimate.from_halfwidth(float(value), r.throughput_halfwidth if steady else None)
    return out


def _notes(r) -> tuple[str, ...]:
    notes = []
    if bool(getattr(r, "steady_short", False)):
        notes.append("short steady span")
    if isinstance(getattr(r, "mismatch", None), str):
        notes.append(f"flagged: {r.mismatch}")
    if isinstance(getattr(r, "contamination", None), str):
        notes.append(f"window held {r.contamination}")
    return tuple(notes)


def decision_rows(
    points: pd.DataFrame,
    estimates: Mapping[str, Estimate] | None = None,
    goodput: pd.DataFrame | None = None,
    paired: Mapping[str, Speedup] | None = None,
) -> list[DecisionRow]:
    """The decision rows of a points table (bench.report.tables.points_table, any status), one per shape in first
    appearance order. `estimates`: per point id (default: record_estimates); `goodput`: bench.report.goodput's
    table, or None without an SLO; `paired`: per point id, a speedup measured as such (over server starts, paired by
    start: bench.report.starts) that replaces the two estimates' combination."""
    paired = paired or {}
    estimates = record_estimates(points) if estimates is None else estimates
    ok = points[points.status == "ok"]
    base_of: dict[str, str] = {}
    mixed: dict[str, float] = {}  # per point id: its like-for-like ratio (speedup._like_for_like)
    if has_baseline(points):
        found = speedups(points)
        base_of = {p: b for p, b in zip(found.point_id, found.baseline_point_id) if isinstance(b, str)}
        mixed = dict(zip(found.point_id, found.speedup_output))
    by_id = {r.point_id: r for r in ok.itertuples()}
    good = {} if goodput is None else {r.point_id: r for r in goodput.itertuples()}
    shapes: dict[str, list] = {}
    not_run: dict[str, int] = {}
    for r in points.itertuples():
        shape = shape_label(r)
        shapes.setdefault(shape, [])
        if r.status == "ok":
            shapes[shape].append(r)
        else:
            not_run[shape] = not_run.get(shape, 0) + 1
    rows = []
    for shape, members in sorted(shapes.items(), key=lambda item: _shape_order(item[1])):
        picks = []
        for r in members:
            if r.num_speculative_tokens == 0 or r.point_id not in estimates:
                continue
            base = by_id.get(base_of.get(r.point_id, ""))
            speedup = None
            if base is not None and base.point_id in estimates:
                speedup = speedup_of(estimates[r.point_id], estimates[base.point_id])
                if r.window != base.window:  # not like for like: both whole-window figures, no interval
                    speedup = Speedup(float(mixed[r.point_id]))
            if r.point_id in paired:
                speedup = paired[r.point_id]
            picks.append(Pick(config_label(r), r.point_id, estimates[r.point_id], speedup, _notes(r)))
        rows.append(_row(shape, members, picks, estimates, good, not_run.get(shape, 0)))
    return rows


def _shape_order(members: list) -> tuple:
    """Shapes by workload, plain before emulated DCP ranks, then input, output length and concurrency."""
    if not members:
        return (1,)
    r = members[0]

    def number(v) -> float:
        return float("inf") if is_missing(v) else float(v)

    workload = r.workload if isinstance(getattr(r, "workload", None), str) else ""
    emulated = not is_missing(getattr(r, "dcp_emulated", None))
    return (0, workload, emulated, number(r.input_len), number(r.output_len), number(r.concurrency))


def _row(
    shape: str, members: list, picks: list[Pick], estimates: Mapping[str, Estimate], good: dict, not_run: int
) -> DecisionRow:
    compared = [p for p in picks if p.speedup is not None]
    eligible = [
        p for p in compared if p.speedup is not None and p.speedup.stated and "short steady span" not in p.notes
    ]
    pool = eligible or compared
    best = max(pool, key=lambda p: p.speedup.value) if pool else None  # type: ignore[union-attr]
    worst = min(pool, key=lambda p: p.speedup.value) if len(pool) > 1 else None  # type: ignore[union-attr]
    if best is not None and not eligible:
        best = _qualified(best)
    fastest = None
    if not compared:
        runs = [
            Pick(config_label(r), r.point_id, estimates[r.point_id], None, _notes(r))
            for r in members
            if r.point_id in estimates
        ]
        fastest = max(runs, key=lambda p: p.throughput.estimate) if runs else None
    return DecisionRow(
        shape=shape,
        configs=len(members),
        spec_configs=sum(1 for r in members if r.num_speculative_tokens > 0),
        best=best,
        worst=worst,
        left_out=len(compared) - len(eligible) if eligible else 0,
        not_run=not_run,
        fastest=fastest,
        goodput=_goodput_pick(members, good),
    )


UNRANKED = "picked among points without a precision or a full steady span"


def _qualified(pick: Pick) -> Pick:
    """A best picked from points that are all short or state no precision: said in its notes."""
    return Pick(pick.config, pick.point_id, pick.throughput, pick.speedup, (*pick.notes, UNRANKED))


def _goodput_pick(members: list, good: dict) -> GoodputPick | None:
    found = [
        (r, good[r.point_id])
        for r in members
        if r.point_id in good and not is_missing(good[r.point_id].goodput_requests_s)
    ]
    if not found:
        return None
    r, g = max(found, key=lambda x: (x[1].goodput_requests_s, x[1].goodput_output_s))
    return GoodputPick(
        config_label(r),
        r.point_id,
        g.goodput_requests_s,
        g.goodput_output_s,
        int(g.good_requests),
        int(g.counted_requests),
    )


# --- caveats --------------------------------------------------------------------------------------------------


def caveats(
    points: pd.DataFrame, servers: pd.DataFrame | None, machine: str | None, estimates: Mapping[str, Estimate]
) -> list[Caveat]:
    """What bounds the view's figures, derived from the records: the model and machine, weights, acceptance, DCP,
    server starts, short, flagged and contaminated points."""
    ok = points[points.status == "ok"]
    if not len(ok):
        return []
    out = []
    targets = sorted({t for t in ok.get("target", pd.Series(dtype=object)).dropna()})
    by_tp: dict[int, list[str]] = {}
    for t in (t for t in targets if is_kimi_rank(t)):
        by_tp.setdefault(parse_spec(t).tp, []).append(t)
    for tp, names in sorted(by_tp.items()):
        out.append(
            Caveat(
                f"one Kimi K2.6 TP{tp} rank",
                f"One tensor-parallel rank of Kimi K2.6 ({', '.join(names)}) on one GPU"
                + (f": no TP all-reduce between the {tp} ranks of a TP{tp} deployment is measured." if tp > 1 else "."),
            )
        )
    if "tiny" in targets:
        out.append(
            Caveat("tiny model", "The tiny generated Kimi-shaped model, not Kimi K2.6: a check of the serving path.")
        )
    if isinstance(machine, str) and machine.startswith("CPU"):
        out.append(Caveat("on CPU", f"On CPU ({machine.removeprefix('CPU: ')}): says nothing of a GPU's speed."))
    loopback = ok.dcp_loopback.fillna(False).astype(bool) if "dcp_loopback" in ok else None
    if loopback is not None and loopback.any():
        sizes = "/".join(str(n) for n in sorted({int(n) for n in ok.dcp_size[loopback]}))
        out.append(
            Caveat(
                "loopback DCP",
                f"DCP {sizes} runs as one rank of a loopback group on one GPU: vLLM's DCP code, no traffic between "
                "GPUs (the communication a real group adds is modelled apart, not measured).",
            )
        )
    if "dcp_emulated" in ok and ok.dcp_emulated.notna().any():
        out.append(
            Caveat(
                "emulated DCP ranks",
                f'DCP "{dcp_emulation.LABEL}" points: one rank of a DCP-N deployment emulated on one GPU; their '
                "speedup is over their own emulated no-spec point.",
            )
        )
    weights = set(ok.get("weights", pd.Series(dtype=object)).dropna())
    if "dummy" in weights:
        out.append(Caveat("dummy weights", "Dummy (random) weights, not trained ones."))
    if "zero-final-norm" in weights:
        out.append(
            Caveat(
                "zero-final-norm weights",
                "Zero-final-norm weights: every draft token is accepted, the most speculation can gain.",
            )
        )
    if "synthetic" in set(ok.acceptance_mode.dropna()):
        spec = ok[(ok.acceptance_mode == "synthetic") & (ok.num_speculative_tokens > 0)]
        lengths = pd.to_numeric(spec.mean_acceptance_length, errors="coerce").dropna()
        measured = f" (mean acceptance length {_range(lengths, '.2f')})" if len(lengths) else ""
        out.append(
            Caveat(
                "synthetic acceptance",
                "Acceptance is synthetic: vLLM's rejection sampler forced to the profile's per-position rates"
                f"{measured}, so a speedup follows those rates, not a real draft's.",
            )
        )
    out.append(_starts_caveat(ok, servers, estimates))
    short = ok[ok.steady_short.fillna(False).astype(bool)] if "steady_short" in ok else ok.iloc[:0]
    if len(short):
        out.append(
            Caveat(
                f"{_n(len(short), 'short point')}",
                f"{_n(len(short), 'point')} with a short steady span (too few whole cycles): no precision; picked "
                "as best only where no other point states one, and then said so.",
            )
        )
    flagged = ok[ok.mismatch.notna()] if "mismatch" in ok else ok.iloc[:0]
    if len(flagged):
        which = ", ".join(sorted({f"{config_label(r)} at {shape_label(r)}" for r in flagged.itertuples()}))
        out.append(
            Caveat(
                _n(len(flagged), "flagged point"),
                f"{_n(len(flagged), 'point')} ran otherwise than asked ({which}); see the effective configuration.",
            )
        )
    dirty = ok[ok.contamination.notna()] if "contamination" in ok else ok.iloc[:0]
    if len(dirty):
        kinds = ", ".join(sorted(set(dirty.contamination)))
        out.append(
            Caveat(
                _n(len(dirty), "contaminated point"),
                f"{_n(len(dirty), 'point')} with something else inside the window after re-measuring ({kinds}).",
            )
        )
    return out


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _range(values: pd.Series, spec: str) -> str:
    lo, hi = fmt(values.min(), spec), fmt(values.max(), spec)
    return lo if lo == hi else f"{lo}-{hi}"


def _starts_caveat(ok: pd.DataFrame, servers: pd.DataFrame | None, estimates: Mapping[str, Estimate]) -> Caveat:
    labels = {e.label for pid, e in estimates.items() if pid in set(ok.point_id) and e.stated and e.label}
    starts = pd.to_numeric(servers.starts, errors="coerce").dropna() if servers is not None and len(servers) else None
    if starts is None or not len(starts):
        short, counted = "server starts unknown", "Server starts not known (no server log)"
    elif starts.eq(1).all():
        short = "one server start each"
        counted = f"{_n(len(starts), 'engine configuration')}, one server start each"
    else:
        short = f"{_range(starts, '.0f')} server starts each"
        counted = f"{_n(len(starts), 'engine configuration')}, {short}"
    between = sorted(label for label in labels if label != WITHIN_ONE_START)
    if between:  # estimates over several starts (bench.report.starts): the servers table is one start's
        counts = sorted({int(m.group(1)) for m in map(_BETWEEN.match, between) if m})
        if len(counts) > 1 and len(counts) == len(between):  # a start cut short: say the range, not every count
            short = f"intervals between {counts[0]}-{counts[-1]} starts"
        else:
            short = f"intervals {', '.join(between)}"
        configs = len(starts) if starts is not None else len(ok.engine_id.unique()) if "engine_id" in ok else 0
        return Caveat(short, f"{_n(configs, 'engine configuration')}, each on several server starts; {short}.")
    if labels and labels <= {WITHIN_ONE_START}:
        text = f"{counted}: every interval is within one start and leaves out the spread between starts, which can be larger."
    elif labels:
        text = f"{counted}; intervals {', '.join(sorted(labels))}."
    else:
        text = f"{counted}; no point states a precision."
    return Caveat(short, text)


# --- the view: sentences and the narrow table ------------------------------------------------------------------


def build_view(
    points: pd.DataFrame,
    servers: pd.DataFrame | None = None,
    machine: str | None = None,
    *,
    estimates: Mapping[str, Estimate] | None = None,
    goodput: pd.DataFrame | None = None,
    slo: Slo | None = None,
    paired: Mapping[str, Speedup] | None = None,
    more_caveats: Sequence[Caveat] = (),
) -> DecisionView:
    """The whole view of a points table: rows, caveats (`more_caveats` after the table's own: what only the caller
    knows, e.g. the machines of several starts) and sentences (summary.md and report.html render it)."""
    estimates = record_estimates(points) if estimates is None else estimates
    rows = decision_rows(points, estimates, goodput if slo is not None else None, paired)
    found = [*caveats(points, servers, machine, estimates), *more_caveats]
    view = DecisionView(rows, found, slo if goodput is not None else None)
    view.sentences.extend(sentences(view))
    return view


def _pick_text(p: Pick) -> str:
    assert p.speedup is not None
    verdict = p.speedup.verdict + (f": {p.speedup.why}" if p.speedup.why else "")
    notes = "; ".join(p.notes)
    interval = f" {p.speedup.interval_text()}" if p.speedup.stated else ""
    return f"{fmt(p.speedup.value, '.2f')}x no-spec{interval} ({verdict}{'; ' + notes if notes else ''})"


def profile_slo(sweep_dir: Path) -> Slo | None:
    """The `[report] slo` of the profile the sweep ran (its manifest's copy); None without one (older sweeps)."""
    found = ((SweepStore(sweep_dir).manifest().get("profile") or {}).get("report") or {}).get("slo")
    try:
        return None if not found else Slo(**found)
    except ValueError as exc:
        raise BenchError(f"{sweep_dir}/manifest.json: profile.report.slo: {exc}") from None


def sweep_view(sweep_dir: Path, points=None, servers=None, slo: Slo | None = None) -> DecisionView:
    """The decision view of a results directory, with goodput under `slo` (`bench report --slo`), else under the
    profile's `[report] slo`, else none. `points`, `servers`: its tables when already read."""
    sweep_dir = Path(sweep_dir)
    points = points_table(sweep_dir) if points is None else points
    if servers is None:
        servers = server_table(sweep_dir, SweepStore(sweep_dir).records())
    slo = slo or profile_slo(sweep_dir)
    goodput = goodput_table(sweep_dir, slo) if slo is not None else None
    return build_view(points, servers, provenance(sweep_dir).get("machine"), goodput=goodput, slo=slo)


def _throughput_text(e: Estimate) -> str:
    interval = f" [{fmt(e.low, ',.1f')}, {fmt(e.high, ',.1f')}] {e.label}" if e.stated else " (no precision)"
    return f"{fmt(e.estimate, ',.1f')} output tok/s{interval}"


def _not_run(row: DecisionRow) -> str:
    return f" ({_n(row.not_run, 'point')} at this shape did not run: failed or skipped)" if row.not_run else ""


def headline(view: DecisionView) -> str | None:
    """The opening sentence: per verdict, the shapes where the best speculative configuration got it, under the
    caveats' short names."""
    if not view.rows:
        return None
    scope = f" ({', '.join(c.short for c in view.caveats)})" if view.caveats else ""
    by: dict[str, list[str]] = {}
    for row in view.rows:
        if row.best is not None and row.best.speedup is not None:
            verdict = row.best.speedup.verdict
        else:
            verdict = "no spec" if row.fastest is not None and row.spec_configs == 0 else "none"
        by.setdefault(verdict, []).append(row.shape)
    found = [
        f"faster than no-spec at {', '.join(by[v])}" if v == "faster" else f"{v} at {', '.join(by[v])}"
        for v in ("faster", "slower", "inconclusive")
        if v in by
    ]
    if found and "inconclusive" in by:
        found[-1] += " (no precision, or the interval contains 1)"
    shapes = _n(len(view.rows), "shape")
    if found:
        said = f"Across {shapes}{scope}, the best speculative configuration is " + "; ".join(found)
        if "none" in by:
            said += f"; no speedup at {', '.join(by['none'])} (no no-spec point)"
        if "no spec" in by:
            said += f"; only no-spec ran at {', '.join(by['no spec'])}"
        return said + "."
    runs = [row.fastest for row in view.rows if row.fastest is not None]
    configs = sorted({p.config for p in runs})
    rates = pd.Series([p.throughput.estimate for p in runs])
    return (
        f"Across {shapes}{scope}, {', '.join(configs)} served {_range(rates, ',.1f')} output tok/s; no no-spec "
        "(k = 0) point ran, so no speedup is stated."
    )


def sentences(view: DecisionView) -> list[str]:
    """The opening sentence, then one paragraph per shape: its answer in words."""
    first = headline(view)
    out = [first] if first else []
    for row in view.rows:
        parts = []
        if row.best is not None:
            b = row.best
            assert b.speedup is not None
            if b.speedup.verdict == "slower":
                parts.append(
                    f"At {row.shape}, no speculative configuration beats no-spec: the best, {b.config}, is at "
                    f"{_pick_text(b)}."
                )
            else:
                parts.append(f"At {row.shape}, {b.config} is fastest: {_pick_text(b)}.")
            if row.worst is not None:
                parts.append(f"Slowest: {row.worst.config}, {_pick_text(row.worst)}.")
            if row.left_out:
                parts.append(f"Not ranked: {_n(row.left_out, 'configuration')} without precision or with a short span.")
            if row.not_run:
                parts.append(f"{_n(row.not_run, 'point')} at this shape did not run (failed or skipped).")
        elif row.fastest is not None and row.spec_configs == 0:
            f = row.fastest
            parts.append(
                f"At {row.shape}, only {f.config} ran ({_throughput_text(f.throughput)}): no speculative configuration "
                f"to compare{_not_run(row)}."
            )
        elif row.fastest is not None:
            f = row.fastest
            what = "ran" if row.configs == 1 else "was fastest"
            parts.append(
                f"At {row.shape}, {f.config} {what} at {_throughput_text(f.throughput)}; no no-spec (k = 0) point "
                f"ran at this shape, so no speedup or verdict is stated{_not_run(row)}."
            )
        elif row.not_run:
            parts.append(f"At {row.shape}, no point ran{_not_run(row)}.")
        if row.goodput is not None and view.slo is not None and row.goodput.good == 0:
            parts.append(f"Under {view.slo.label}, no request at this shape met every target.")
        elif row.goodput is not None and view.slo is not None:
            g = row.goodput
            parts.append(
                f"Under {view.slo.label}, {g.config} has the highest goodput: {fmt(g.requests_s, ',.2f')} req/s, "
                f"{fmt(g.output_s, ',.1f')} output tok/s of good requests ({g.good} of {g.counted} requests good)."
            )
        if parts:
            out.append(" ".join(parts))
    return out


TABLE_HEADERS = {
    "shape": "shape",
    "best": "best",
    "best_speedup": "speedup over no-spec [95% interval]",
    "best_verdict": "verdict",
    "worst": "worst",
    "worst_speedup": "speedup [95% interval]",
    "worst_verdict": "verdict",
    "goodput": "highest goodput",
}


def table_frame(view: DecisionView) -> pd.DataFrame:
    """The narrow table, as text cells (TABLE_HEADERS' columns; `goodput` only with an SLO)."""
    records = []
    for row in view.rows:
        best, worst = row.best, row.worst
        cells = {
            "shape": row.shape,
            "best": _config_cell(best) if best else _unranked_cell(row),
            "best_speedup": best.speedup.text() if best and best.speedup else None,
            "best_verdict": best.speedup.verdict if best and best.speedup else _no_verdict(row),
            "worst": _config_cell(worst) if worst else None,
            "worst_speedup": worst.speedup.text() if worst and worst.speedup else None,
            "worst_verdict": worst.speedup.verdict if worst and worst.speedup else None,
        }
        if view.slo is not None:
            g = row.goodput
            cells["goodput"] = (
                None
                if g is None
                else "no request met the targets"
                if g.good == 0
                else f"{g.config}: {fmt(g.requests_s, ',.2f')} req/s, {fmt(g.output_s, ',.1f')} tok/s"
            )
        records.append(cells)
    columns = [c for c in TABLE_HEADERS if c != "goodput" or view.slo is not None]
    return pd.DataFrame(records, columns=columns)


def _unranked_cell(row: DecisionRow) -> str | None:
    if row.fastest is None:
        return None
    return f"only {row.fastest.config} ran" if row.spec_configs == 0 else f"{row.fastest.config} (no k=0)"


def _no_verdict(row: DecisionRow) -> str:
    if row.fastest is None:
        return "nothing ran"
    return "no speculative point" if row.spec_configs == 0 else "no baseline"


def _config_cell(p: Pick) -> str:
    marks = [
        m
        for m, hit in (
            ("short", "short steady span" in p.notes),
            ("flagged", any(n.startswith("flagged") for n in p.notes)),
        )
        if hit
    ]
    return p.config + (f" ({', '.join(marks)})" if marks else "")


def markdown(view: DecisionView, md_table) -> list[str]:
    """summary.md's opening lines: the sentences, the caveats, the narrow table (md_table: bench.report.markdown's)."""
    if not view.rows:
        return []
    lines = [*(s for sentence in view.sentences for s in (sentence, ""))]
    if view.caveats:
        lines += ["Caveats that bound these figures:", "", *(f"- {c.text}" for c in view.caveats), ""]
    frame = table_frame(view)
    lines += [md_table(frame, {c: (TABLE_HEADERS[c], 0) for c in frame.columns}), ""]
    if view.slo is not None:
        lines += [GOODPUT_NOTE.format(slo=view.slo.label), ""]
    return lines


GOODPUT_NOTE = (
    "Goodput under {slo}: per request, as `vllm bench serve --goodput` counts it (a request is good when every target "
    "holds for it); good requests and their output tokens per second over each point's steady span (its whole window where it has none)."
)


def _over_starts(summary: dict, key: str, make) -> dict:
    """Per point, `make(value, low, high, label)` of one figure over the starts of bench.report.starts'
    summarize_starts (`key`: "output_throughput" or "speedup"): the geometric mean and its t interval labelled
    between_starts(n); without an interval (fewer than 2 starts) `make(value)` alone, never one start's precision."""
    out = {}
    for p in summary.get("points", []):
        o = p.get(key) or {}
        n = len(o.get("values") or p.get("starts") or [])
        value, low, high = o.get("estimate"), o.get("low"), o.get("high")
        if value is None or not value > 0:
            continue
        stated = low is not None and high is not None and n >= 2
        out[p["point_id"]] = make(value, low, high, between_starts(n)) if stated else make(value)
    return out


def starts_speedups(summary: dict) -> dict[str, Speedup]:
    """Per point, its speedup over k = 0 paired by start (bench.report.starts.summarize_starts)."""
    return _over_starts(summary, "speedup", Speedup)


def starts_estimates(summary: dict) -> dict[str, Estimate]:
    """Per point, its tok/s over server starts (a folder of `sweep --starts N`)."""
    return _over_starts(summary, "output_throughput", Estimate)
