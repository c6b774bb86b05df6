"""Speculative speedup per point: over the no-speculation (k = 0) baseline of the same load and engine otherwise.

Two ratios, both > 1 when speculation helps:
- output tok/s: the point's over the baseline's, both over their steady span when they have one (bench.measure.window:
  all C requests in flight, ramp-up and drain left out), so a slot's cycle still holds its request's prefill;
- decode time per token: the baseline's TPOT p50 over the point's (per request, inside the steady span).
When the two differ by more than CAUSE_LIMIT, the notes name the measured cause where they can: a slot serves
one request in TTFT + (n - 1) x TPOT, so the prefill's share of that cycle moves tok/s but not TPOT.

A point's baseline has the same DCP size (real or emulated), concurrency, input and output lengths and workload
and the same target, weights and [server] settings (`engine_base`: a results directory resumed with a changed
profile can hold two); every other engine axis is about the draft. Without
exactly one ok baseline the ratios are unknown (NaN), never 1. Sweeps without a k = 0 point show no speedup
columns, so their summaries stay what they were.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.core.fmt import fmt
from bench.models import dcp_emulation
from bench.report.result_fields import pm_text
from bench.report.tables import plain_points

# the baseline of a point: the k = 0 point of the same DCP, server axes (bench/config/axes.py) and load
BASELINE_KEY = [
    "engine_base",  # the same target, weights and [server] settings
    "dcp_size",
    "dcp_emulated",
    "server_axes",
    "concurrency",
    "input_len",
    "output_len",
    "workload",
    "arrival",
]
SPEEDUP_COLUMNS = ["point_id", "baseline_point_id", "speedup_output", "speedup_output_halfwidth", "speedup_tpot"]
MARKDOWN_COLUMNS = {"speedup_output": "vs k=0 tok/s", "speedup_output_pm": "+-", "speedup_tpot": "vs k=0 TPOT"}
#: what the tok/s speedup's +- is and leaves out (summary.md's note and report.html's)
WITHIN_START = (
    "the two points' 95% half-widths combined (root sum of squares of the relative half-widths, both over steady "
    "windows): the precision within their server starts, leaving out the spread between starts, which only a "
    "comparison over several starts (`bench ab`) measures"
)


def has_baseline(points: pd.DataFrame) -> bool:
    """Whether the sweep has an ok no-speculation point to compare with."""
    return bool(((points.num_speculative_tokens == 0) & (points.status == "ok")).any())


def speedups(points: pd.DataFrame) -> pd.DataFrame:
    """Per point (any status): its baseline's point id and the two ratios (NaN where unknown)."""
    key = [c for c in BASELINE_KEY if c in points]
    keys = points[key].astype(object).where(points[key].notna(), "-").astype(str).agg("|".join, axis=1)
    base = points[(points.num_speculative_tokens == 0) & (points.status == "ok")]
    unique = keys[base.index].value_counts()
    by_key = {keys[i]: row for i, row in base.iterrows() if unique[keys[i]] == 1}
    rows = []
    for i, p in points.iterrows():
        b = by_key.get(keys[i])
        row = {"point_id": p.point_id, "baseline_point_id": None}
        row |= {"speedup_output": np.nan, "speedup_output_halfwidth": np.nan, "speedup_tpot": np.nan}
        if b is not None:
            row["baseline_point_id"] = b.point_id
        if b is not None and p.status == "ok":
            row["speedup_output"] = _ratio(*_like_for_like(p, b))
            row["speedup_output_halfwidth"] = ratio_halfwidth(p, b)
            row["speedup_tpot"] = _ratio(b.get("tpot_p50_ms"), p.get("tpot_p50_ms"))
        rows.append(row)
    return pd.DataFrame(rows, columns=SPEEDUP_COLUMNS)


def _like_for_like(p: pd.Series, b: pd.Series) -> tuple[object, object]:
    """The two output tok/s to divide: the headlines when both are over the same window (both steady, or both
    whole), else both whole-window figures (a point without a steady span against a steady baseline divided a
    whole-window figure by a steady one; found in review)."""
    if p.get("window") == b.get("window"):
        return p.output_throughput, b.output_throughput
    return p.get("output_throughput_whole"), b.get("output_throughput_whole")


def ratio_halfwidth(p: pd.Series, b: pd.Series) -> float:
    """The relative 95% half-width of the steady tok/s ratio p / b: the root sum of squares of the two points'
    relative half-widths (independent sub-window estimates; first order in the half-widths). NaN unless both
    figures are steady and state their precision (a whole-window figure has none), and for the baseline itself
    (its 1.00x is exact)."""
    if p.get("point_id") == b.get("point_id") or p.get("window") != "steady" or b.get("window") != "steady":
        return np.nan
    hp, hb = (pd.to_numeric(x.get("throughput_halfwidth"), errors="coerce") for x in (p, b))
    return float(np.hypot(hp, hb)) if pd.notna(hp) and pd.notna(hb) else np.nan


def with_speedups(points: pd.DataFrame) -> pd.DataFrame:
    """`points` with the speedup columns (the points table is left as it was when there is no baseline)."""
    if not has_baseline(points):
        return points
    found = speedups(points).drop(columns="point_id").set_axis(points.index)
    return points.join(found)


def _ratio(a, b) -> float:
    a, b = pd.to_numeric(a, errors="coerce"), pd.to_numeric(b, errors="coerce")
    return float(a / b) if pd.notna(a) and pd.notna(b) and b > 0 else np.nan


def best(points: pd.DataFrame, column: str = "speedup_tpot") -> tuple[str | None, float | None]:
    """The ok speculative point with the largest speedup (`label` when the table has one, else the point id),
    among the plain points when there are any: an emulated DCP rank's speedup is over its own emulated baseline,
    whose step is slowed by the widened projections (docs/kimi-rank.md), so it is not the headline."""
    row = _best_row(points, column)
    return (None, None) if row is None else (str(row.get("label", row.point_id)), float(row[column]))


def _best_row(points: pd.DataFrame, column: str) -> pd.Series | None:
    if column not in points:
        return None
    spec = points[(points.status == "ok") & (points.num_speculative_tokens > 0) & points[column].notna()]
    plain = plain_points(spec)
    spec = plain if len(plain) else spec
    return spec.loc[spec[column].idxmax()] if len(spec) else None


def stated(points: pd.DataFrame) -> bool:
    """Whether some point's tok/s speedup states its precision (the "+-" column is shown only then)."""
    return "speedup_output_halfwidth" in points and bool(points.speedup_output_halfwidth.notna().any())


def page_notes(points: pd.DataFrame) -> dict:
    """For report.html: the best speculative speedups over k = 0 (`speedup` None without a baseline), and what
    emulated DCP points model and leave out (`emulation` None without them)."""
    found: dict[str, dict[str, str | None] | None] = {}
    for column in ("speedup_tpot", "speedup_output"):
        row = _best_row(points, column)
        found[column] = (
            None
            if row is None
            else {
                "label": str(row.get("label", row.point_id)),
                "value": fmt(float(row[column]), ".2f"),
                "pm": pm_text(row.get("speedup_output_halfwidth")) if column == "speedup_output" else None,
            }
        )
    emulated = "dcp_emulated" in points and bool(points.dcp_emulated.notna().any())
    notes = {"modelled": dcp_emulation.MODELLED, "not_modelled": dcp_emulation.NOT_MODELLED}
    return {"speedup": found if any(found.values()) else None, "emulation": notes if emulated else None}


# --- summary.md ---------------------------------------------------------------------------------------------


def markdown_results(ok: pd.DataFrame, columns: dict[str, tuple[str, int]]) -> tuple[pd.DataFrame, dict]:
    """The results table of summary.md with the speedups ("1.53x") and the emulated DCP sizes ("8 (emulated)")
    where the sweep has them; unchanged otherwise (the committed summaries without them stay byte-identical)."""
    shown, columns = ok, dict(columns)
    if "dcp_emulated" in ok and ok.dcp_emulated.notna().any():
        emulated = ok.dcp_emulated.notna()
        dcp = ok.dcp_size.astype(object)
        dcp[emulated] = [f"{int(n)} ({dcp_emulation.LABEL})" for n in ok.dcp_emulated[emulated]]
        shown = shown.assign(dcp_size=dcp)
    if "speedup_output" in ok:
        times = {
            c: ok[c].map(lambda v: None if pd.isna(v) else fmt(v, ".2f") + "x")
            for c in ("speedup_output", "speedup_tpot")
        }
        shown = shown.assign(**times)  # (the +- text: result_fields.with_precision)
        pm = stated(ok)  # (summaries of whole-window sweeps stay what they were)
        columns.update({c: (h, 0) for c, h in MARKDOWN_COLUMNS.items() if pm or c != "speedup_output_pm"})
    return shown, columns


def markdown_notes(points: pd.DataFrame) -> list[str]:
    """The lines under the results table: what the speedups are, and what an emulated DCP rank leaves out."""
    lines = []
    if "speedup_output" in points:
        lines += [
            "Speedups are over the no-speculation (k = 0) point of the same shape: `vs k=0 tok/s` = output tok/s "
            "ratio (steady windows where both have one), `vs k=0 TPOT` = baseline TPOT p50 / this point's"
            + (f"; the `+-` after `vs k=0 tok/s` is {WITHIN_START}." if stated(points) else "."),
            "",
        ]
        lines += _disagreements(points)
    if "dcp_emulated" in points and points.dcp_emulated.notna().any():
        lines += [
            f"DCP `N ({dcp_emulation.LABEL})`: one DCP-N rank emulated on one GPU; `in` is the rank's share of "
            "the prompt, ceil(L/N). Not modelled: " + "; ".join(dcp_emulation.NOT_MODELLED) + ".",
            "",
        ]
    return lines


CAUSE_LIMIT = 0.10  # the two speedups disagree when they differ by more than this (relative)


def _disagreements(points: pd.DataFrame) -> list[str]:
    """Points whose tok/s and TPOT speedups differ by more than CAUSE_LIMIT, with the cause where the slot cycle
    (TTFT + (n - 1) x TPOT per request, both measured) predicts the tok/s ratio within 5%: the prefill's share."""
    if "speedup_tpot" not in points:
        return []
    by_id = points.set_index("point_id", drop=False)
    lines = []
    for p in points[(points.status == "ok") & points.speedup_output.notna() & points.speedup_tpot.notna()].itertuples():
        gap = p.speedup_output / p.speedup_tpot - 1
        if abs(gap) <= CAUSE_LIMIT:
            continue
        b = by_id.loc[p.baseline_point_id]
        cycle = _ratio(_cycle(b), _cycle(p))
        cause = "cause not measured"
        if pd.notna(cycle) and abs(cycle / p.speedup_output - 1) <= 0.05:
            cause = (
                f"the prefill inside each request's cycle: TTFT p50 {fmt(p.ttft_p50_ms, ',.0f')} ms vs {fmt(b.ttft_p50_ms, ',.0f')} ms "
                f"at k = 0; the cycle TTFT + (n-1) x TPOT predicts {fmt(cycle, '.2f')}x"
            )
        lines.append(
            f"- `{p.point_id}` ({p.load}): tok/s {fmt(p.speedup_output, '.2f')}x vs TPOT {fmt(p.speedup_tpot, '.2f')}x ({fmt(gap, '+.0%')}): {cause}"
        )
    return ["Where the two speedups differ by more than 10%:", "", *lines, ""] if lines else []


def _cycle(row) -> float:
    """A slot's time per request: TTFT p50 + (output length - 1) x TPOT p50 (ms); NaN where unknown."""
    values = [
        pd.to_numeric(getattr(row, c, None), errors="coerce") for c in ("ttft_p50_ms", "tpot_p50_ms", "output_len")
    ]
    ttft, tpot, n = values
    return float(ttft + (n - 1) * tpot) if all(pd.notna(v) for v in values) else np.nan
