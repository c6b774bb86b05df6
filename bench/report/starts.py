"""A point measured over several server starts (`bench sweep --starts N`, OUT/start-1 ... start-N): what the starts
together say about it, and whether they agree within the precision each one stated.

Per point, from each start's headline (steady tok/s) and its stated relative 95% half-width:
- the estimate over starts: the geometric mean, with the 95% t interval of the mean of logs (n - 1 degrees of
  freedom): the server start is the unit (docs/verdicts.md), so this interval holds what differs between starts;
- agreement: Welch's test of the starts' logs weighted by their stated precision (se = half-width / t of its own
  units, with as many degrees of freedom; welch_p). A small p says the starts differ by more than each one's precision allows: something that a start fixes
  (placement, compile, the loop's phase) moves the figure, and a single start's +- understates the uncertainty;
- a noise budget: within a block (sub-windows about their block's rate), between blocks (a start's blocks, each at
  its own phase), between starts beyond what they stated (the variance of the starts' logs less their mean stated
  variance, as a CV);
- speedups over k = 0 paired by start (the point and its baseline measured on the same start's servers): the ratio
  per start, the geometric mean and its t interval on logs.
A start whose record is short (fewer than 3 whole cycles) or states no precision gives no weight to the agreement
test, and counts in the estimate. Fewer than 2 starts: no interval ("insufficient data").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from bench.core.files import atomic_write_bytes
from bench.core.fmt import fmt
from bench.report import decision
from bench.report.analysis import enrich
from bench.report.figure_style import new_figure, png_or_none
from bench.report.markdown import md_table
from bench.report.servers import server_table
from bench.report.speedup import with_speedups
from bench.report.tables import points_table
from bench.results.environment import machine_id, point_sessions
from bench.results.store import SweepStore

START_DIR = re.compile(r"^start-(\d+)$")
CONFIDENCE = 0.95
AGREE_P = 0.05  # agreement p-value (welch_p) below which the starts disagree beyond their stated precision


def start_dirs(root: Path) -> list[Path]:
    """The start-k folders of a sweep over several starts, in k order ([] for a plain sweep folder)."""
    found = [(int(m.group(1)), p) for p in Path(root).iterdir() if p.is_dir() and (m := START_DIR.match(p.name))]
    return [p for _, p in sorted(found) if (p / "manifest.json").exists()]


@dataclass
class OverStarts:
    """One figure of one point (or one speedup) over its server starts."""

    values: list[float]
    halfwidths: list[float | None] = field(default_factory=list)
    dof: list[int | None] = field(default_factory=list)
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    between_cv: float | None = None  # the starts' spread (SD of logs)
    q_p: float | None = None  # agreement p-value (welch_p); None below 2 starts with a stated precision
    beyond_cv: float | None = None  # between-start spread beyond the stated precisions (method of moments)
    verdict: str = "insufficient data"  # "consistent" / "starts disagree" / "insufficient data"


def over_starts(
    values: list[float], halfwidths: list[float | None] | None = None, dof: list[int | None] | None = None
) -> OverStarts:
    """The estimate, interval, agreement and excess spread of one figure measured once per start (module doc)."""
    halfwidths = halfwidths if halfwidths is not None else [None] * len(values)
    dof = dof if dof is not None else [None] * len(values)
    out = OverStarts(list(values), list(halfwidths), list(dof))
    logs = np.log([v for v in values if v and v > 0])
    if logs.size == 0:
        return out
    out.estimate = float(np.exp(logs.mean()))
    if logs.size < 2:
        return out
    sd = float(logs.std(ddof=1))
    t = float(stats.t.ppf(0.5 + CONFIDENCE / 2, logs.size - 1))
    out.low, out.high = (float(np.exp(logs.mean() + s * t * sd / math.sqrt(logs.size))) for s in (-1, 1))
    out.between_cv = sd
    stated = [
        (math.log(v), _log_se(h, d), d)
        for v, h, d in zip(values, halfwidths, dof)
        if v and v > 0 and h is not None and not pd.isna(h) and h > 0
    ]
    if len(stated) >= 2:
        y = np.array([s[0] for s in stated])
        se = np.array([s[1] for s in stated])
        out.q_p = welch_p(y, se, [s[2] for s in stated])
        # the starts' variance less what their own precision accounts for (method of moments, unweighted: the
        # weighted DerSimonian-Laird estimate takes each se as known, as Cochran's Q does, and read 2-4% on starts
        # that Welch's test found in agreement)
        out.beyond_cv = math.sqrt(max(0.0, float(y.var(ddof=1)) - float((se**2).mean())))
        out.verdict = "consistent" if out.q_p >= AGREE_P else "starts disagree"
    return out


def welch_p(y: np.ndarray, se: np.ndarray, dof: list[int | None]) -> float:
    """The p-value that k figures with standard errors `se`, each estimated with `dof` degrees of freedom, share one
    mean: Welch's heteroscedastic one-way test (Welch 1951). Each start's se comes from few units (3 blocks: 2 degrees
    of freedom), so treating it as known (Cochran's Q against chi-square) flags starts that agree within their stated
    intervals: Welch's F corrects the reference distribution for the se's own uncertainty. A se without degrees of
    freedom (an older record) counts as known; all known, the test is Cochran's Q."""
    k = len(y)
    w = 1 / se**2
    mean = float((w * y).sum() / w.sum())
    q = float((w * (y - mean) ** 2).sum())
    lam = sum((1 - wi / w.sum()) ** 2 / d for wi, d in zip(w, dof) if d and d > 0)
    if lam == 0:
        return float(stats.chi2.sf(q, k - 1))
    f = q / (k - 1) / (1 + 2 * (k - 2) * lam / (k**2 - 1))
    return float(stats.f.sf(f, k - 1, (k**2 - 1) / (3 * lam)))


def _log_se(halfwidth: float, dof: int | None) -> float:
    """The standard error on the log scale of a figure stated as +- `halfwidth` (relative, 95%, t with `dof`
    degrees of freedom: its units less one; a normal quantile when unknown)."""
    q = stats.t.ppf(0.5 + CONFIDENCE / 2, dof) if dof and dof > 0 else stats.norm.ppf(0.5 + CONFIDENCE / 2)
    return math.log1p(halfwidth) / float(q)


@dataclass
class Starts:
    """What a folder of starts holds: each start's points table with its speedups (`table`, a `start` column
    1-based from the folder name), the folders, and the last start's plain points and server tables (the decision
    view's), each read once."""

    table: pd.DataFrame
    dirs: list[Path]
    last_points: pd.DataFrame | None = None
    last_servers: pd.DataFrame | None = None


def _latest(frames: list[pd.DataFrame], key: str) -> pd.DataFrame | None:
    """Each `key`'s row from the last start that has it: a start cut short (a lease that ran out) lacks points
    the starts before it measured, and the decision view must still name them."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    both = pd.concat(frames, ignore_index=True)
    return both.drop_duplicates(key, keep="last").reset_index(drop=True)


def read_starts(root: Path) -> Starts:
    """Every start's points and server tables, read once; `last_points` / `last_servers` hold each point's and each
    server's row from the last start that measured it."""
    dirs = start_dirs(root)
    out = Starts(pd.DataFrame(), dirs)
    frames, plains, server_frames = [], [], []
    for d in dirs:
        plain = points_table(d)
        store = SweepStore(d)
        records = store.records()
        servers = server_table(d, records)
        points = with_speedups(enrich(plain))
        # A start whose server was launched more than once (a resumed start: the first launch cut before it served)
        # lists one state per launch, "-/compiled"; the last launch is the one that measured what the start holds.
        compiled = {e: _last_launch(c) for e, c in zip(servers.engine_id, servers.torch_compile)}
        points["torch_compile"] = [compiled.get(e) for e in points.engine_id]
        manifest = store.manifest()
        sessions = manifest.get("sessions") or []
        measured_by = point_sessions(manifest, records)
        points["machine"] = [
            machine_id(sessions[measured_by[p]]) if p in measured_by else None for p in points.point_id
        ]
        frames.append(points.assign(start=int(START_DIR.match(d.name).group(1))))  # type: ignore[union-attr]
        plains.append(plain)
        server_frames.append(servers)
    if frames:
        out.table = pd.concat(frames, ignore_index=True)
        out.last_points = _latest(plains, "point_id")
        out.last_servers = _latest(server_frames, "engine_id")
    return out


def _units(record_units) -> int | None:
    return None if record_units is None or pd.isna(record_units) else int(record_units) - 1


def summarize_starts(root: Path, read: Starts | None = None) -> dict:
    """Per point over the starts in `root` (`read`: read_starts(root) when already read): tok/s over starts,
    agreement, noise budget, paired speedup."""
    read = read or read_starts(root)
    table, dirs = read.table, read.dirs
    rows = []
    if len(table):
        ok = table[table.status == "ok"]
        for pid, g in ok.groupby("point_id", sort=False):
            g = g.sort_values("start")
            first = g.iloc[0]
            tp = over_starts(
                [float(v) for v in g.output_throughput],
                [None if bool(s) else h for s, h in zip(g.steady_short.fillna(False), g.throughput_halfwidth)],
                [_units(u) for u in g.precision_units],
            )
            row = {
                "point_id": pid,
                "label": first.series,
                "shape": decision.shape_label(first),
                "num_speculative_tokens": int(first.num_speculative_tokens),
                "starts": [int(s) for s in g.start],
                "output_throughput": asdict(tp),
                "short_starts": [int(s) for s, short in zip(g.start, g.steady_short.fillna(False)) if short],
                "within_block_cv": _median(g.within_block_cv),
                "between_block_cv": _median(g.between_block_cv),
                "torch_compile": list(g.torch_compile),
                "machines": list(g.machine),
            }
            if first.num_speculative_tokens and "speedup_output" in g and g.speedup_output.notna().any():
                row["speedup"] = asdict(over_starts([float(v) for v in g.speedup_output.dropna()]))
                row["speedup_starts"] = [int(s) for s, v in zip(g.start, g.speedup_output) if pd.notna(v)]
            rows.append(row)
    return {
        "starts": [d.name for d in dirs],
        "confidence": CONFIDENCE,
        "agree_p": AGREE_P,
        "points": rows,
        "machines": _machines(table),
    }


def _machines(table: pd.DataFrame) -> dict:
    """Which machines measured the starts: each distinct one (in order of first use) and, per start, those that
    measured its ok points (more than one: a start resumed on another machine, e.g. a new GPU lease)."""
    if not len(table) or "machine" not in table:
        return {"distinct": [], "by_start": {}}
    ok = table[(table.status == "ok") & table.machine.notna()].sort_values("start", kind="stable")
    distinct = list(dict.fromkeys(ok.machine))
    by_start = {str(int(k)): sorted(set(g.machine), key=distinct.index) for k, g in ok.groupby("start", sort=True)}
    return {"distinct": distinct, "by_start": by_start}


def machine_lines(summary: dict) -> list[str]:
    """What the machines do to the figures: the between-start spread includes machine to machine when the starts
    ran on several; a start measured on several pairs its speedups across machines."""
    machines = summary.get("machines") or {}
    distinct = machines.get("distinct") or []
    if len(distinct) < 2:
        return []
    names = {m: chr(ord("A") + i) if i < 26 else str(i) for i, m in enumerate(distinct)}
    per = "; ".join(
        f"start {k}: {'+'.join(names[m] for m in ms)}" for k, ms in (machines.get("by_start") or {}).items()
    )
    lines = [
        f"The starts ran on {len(distinct)} machines ({per}): the spread between starts includes machine to "
        "machine, not only server start to server start."
    ]
    mixed = [k for k, ms in (machines.get("by_start") or {}).items() if len(ms) > 1]
    if mixed:
        lines.append(
            f"Start{'s' if len(mixed) > 1 else ''} {', '.join(mixed)} measured {'their' if len(mixed) > 1 else 'its'} "
            "points on more than one machine (resumed on another): a speedup paired by start there divides figures "
            "from different machines."
        )
    return lines


def _median(col: pd.Series) -> float | None:
    v = pd.to_numeric(col, errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def _interval(o: dict, spec: str) -> str:
    if o["low"] is None:
        return "insufficient data (1 start)" if len(o["values"]) < 2 else "n/a"
    return f"[{fmt(o['low'], spec)}, {fmt(o['high'], spec)}]"


_COMPILE_MARK = {"compiled": " c", "cache-loaded": " l"}  # how torch.compile ran in that start's server


def _last_launch(states: str | None) -> str | None:
    """The torch.compile state of a start's last server launch, from the servers table's per-launch "a/b" value."""
    return states.split("/")[-1] if isinstance(states, str) else None


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else fmt(p, ".3f") if p < 0.01 else fmt(p, ".2f")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{fmt(x, '.1%')}"


def starts_view(read: Starts, summary: dict) -> decision.DecisionView | None:
    """The decision view over the starts: the last start's points table with every point's estimate over starts and
    its speedup paired by start (bench.report.decision)."""
    if read.last_points is None:
        return None
    lines = machine_lines(summary)  # none on one machine
    machines = len(summary["machines"]["distinct"]) if lines else 0
    more = [decision.Caveat(f"{machines} machines", " ".join(lines))] if lines else []
    return decision.build_view(
        read.last_points,
        read.last_servers,
        estimates=decision.starts_estimates(summary),
        paired=decision.starts_speedups(summary),
        more_caveats=more,
    )


def starts_markdown(summary: dict, view: decision.DecisionView | None = None) -> str:
    """starts.md: the decision view over starts first (`view`), then which points agree over starts, the per-point
    table and the noise budget."""
    points = summary["points"]
    n = len(summary["starts"])
    disagree = [p for p in points if p["output_throughput"]["verdict"] == "starts disagree"]
    lines = [f"# Over {n} server start{'s' if n != 1 else ''}", ""]
    if view is not None:
        lines += [*decision.markdown(view, md_table), "## Do the starts agree?", ""]
    if not points:
        return "\n".join([*lines, "No ok point in any start.", ""])
    if n < 2:
        lines.append("One start: no between-start precision (insufficient data). Run with `--starts 3` or more.")
    elif disagree:
        names = ", ".join(f"{p['label']} {p['shape']}" for p in disagree)
        lines.append(
            f"{len(disagree)} of {len(points)} points differ between starts by more than their stated precision "
            f"allows ({names}): quote their interval over starts, not one start's +-."
        )
    else:
        lines.append(
            f"All {len(points)} points agree between starts within their stated precision (Welch's test, "
            f"p >= {summary['agree_p']}); the intervals below are over starts, the server start as the unit."
        )
    for line in machine_lines(summary):
        lines += ["", line]
    lines += [
        "",
        "| point | shape | per start tok/s (+-) | over starts | agreement | beyond stated | speedup over starts |",
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for p in points:
        o = p["output_throughput"]
        per = " / ".join(
            f"{fmt(v, ',.1f')} ({'short' if s in p['short_starts'] else _pct(h)}){_COMPILE_MARK.get(c, '')}"
            for v, h, s, c in zip(o["values"], o["halfwidths"], p["starts"], p["torch_compile"])
        )
        agree = o["verdict"] + (f", p {_p(o['q_p'])}" if o["q_p"] is not None else "")
        sp = p.get("speedup")
        speed = "" if not sp else f"{fmt(sp['estimate'], '.2f')}x {_interval(sp, '.2f')}"
        lines.append(
            f"| {p['label']} | {p['shape']} | {per} | {fmt(o['estimate'], ',.1f')} {_interval(o, ',.1f')} | "
            f"{agree} | {_pct(o['beyond_cv'])} | {speed} |"
        )
    lines += [
        "",
        "## Noise budget (CV)",
        "",
        "| point | shape | within a block | between blocks | between starts | beyond stated |",
        "|---|---|---|---|---|---|",
    ]
    for p in points:
        o = p["output_throughput"]
        lines.append(
            f"| {p['label']} | {p['shape']} | {_pct(p['within_block_cv'])} | {_pct(p['between_block_cv'])} | "
            f"{_pct(o['between_cv'])} | {_pct(o['beyond_cv'])} |"
        )
    lines += [
        "",
        "Intervals: 95% t on the logs of the starts' figures (n - 1 degrees of freedom). Agreement: "
        "the starts' logs weighted by their stated precision (Welch's heteroscedastic test: each start's se comes from "
        "few units). Beyond stated: the variance of the starts' logs less their mean stated variance (method of "
        "moments), as a CV. Speedups: the point over its k = 0 baseline on each start's servers, paired by start. "
        "A short start (fewer than 3 whole cycles) states no precision and carries no weight in the agreement test. c / l after a start's figure: its server compiled its torch.compile graphs / loaded them "
        "from the compile cache (nothing: eager, or not logged).",
        "",
    ]
    return "\n".join(lines)


def starts_figure(summary: dict) -> Figure | None:
    """Each point's starts with their stated 95% error bars beside the estimate over starts and its interval (None:
    no ok point)."""
    points = summary["points"]
    if not points:
        return None
    fig = new_figure(max(6.0, 1.2 * len(points) + 2), 4)
    ax = fig.add_subplot()
    for i, p in enumerate(points):
        o = p["output_throughput"]
        k = len(o["values"])
        xs = [i - 0.25 + 0.3 * j / max(k - 1, 1) for j in range(k)]
        errs = [0 if h is None or pd.isna(h) else v * h for v, h in zip(o["values"], o["halfwidths"])]
        ax.errorbar(xs, o["values"], yerr=errs, fmt="o", color="tab:blue", capsize=3, ms=4)
        if o["estimate"] is not None:
            lo = o["low"] if o["low"] is not None else o["estimate"]
            hi = o["high"] if o["high"] is not None else o["estimate"]
            ax.errorbar(
                [i + 0.2], [o["estimate"]], yerr=[[o["estimate"] - lo], [hi - o["estimate"]]], fmt="s",
                color="tab:red" if o["verdict"] == "starts disagree" else "black", capsize=4, ms=6,
            )  # fmt: skip
    ax.set_xticks(range(len(points)), [f"{p['label']}\n{p['shape']}" for p in points], fontsize=7)
    ax.set_ylabel("steady output tok/s")
    ax.set_title("per start (blue, stated 95%) and over starts (black; red: starts disagree)", fontsize=9)
    return fig


def build_starts_report(root: Path, out: Path | None = None) -> dict[str, Path]:
    """starts.json, starts.md and starts.png of `root` (a folder of start-k sweeps), written in `out` (default:
    `root`)."""
    read = read_starts(root)
    summary = summarize_starts(root, read)
    out = Path(root if out is None else out)
    paths = {"starts_json": out / "starts.json", "starts_md": out / "starts.md"}
    atomic_write_bytes(paths["starts_json"], (json.dumps(summary, indent=1, default=_json) + "\n").encode())
    atomic_write_bytes(paths["starts_md"], starts_markdown(summary, starts_view(read, summary)).encode())
    if (png := png_or_none(starts_figure(summary))) is not None:
        paths["starts_png"] = out / "starts.png"
        atomic_write_bytes(paths["starts_png"], png)
    return paths


def _json(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(type(value))
