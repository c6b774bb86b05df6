"""Acceptance per workload and category: the table (pure pandas, from the points table's `categories` column, one
list of rows per point as bench.measure.metrics.category_metrics stored them), its summary.md rendering, and its plot.

Shown only for sweeps with a text workload or a paced arrival (a sweep of random token ids at fixed concurrency has
one category per point, the same numbers as the acceptance section), so the reports of earlier sweeps stay what
they were.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.figure_style import new_figure, png_bytes, wrap

CATEGORY_COLUMNS = ["label", "series", "workload", "load", "category", "requests", "completed", "conversations"]
CATEGORY_COLUMNS += ["prompt_tokens_mean", "output_tokens_mean", "ttft_p50_ms", "tpot_p50_ms"]
CATEGORY_COLUMNS += ["per_user_output_throughput", "acceptance_rate", "mean_acceptance_length"]
CATEGORY_COLUMNS += ["per_position_acceptance", "num_drafts", "acceptance_source"]
MARKDOWN_COLUMNS = {
    "series": ("engine", 0),
    "load": ("workload", 0),
    "category": ("category", 0),
    "requests": ("requests", 0),
    "prompt_tokens_mean": ("prompt tok", 0),
    "output_tokens_mean": ("output tok", 1),
    "tpot_p50_ms": ("TPOT p50 ms", 2),
    "acceptance_rate": ("accept", 3),
    "mean_acceptance_length": ("mean len", 2),
    "per_position_acceptance": ("per position", 2),
    "acceptance_source": ("from", 0),
}


def has_workloads(points: pd.DataFrame) -> bool:
    """Whether some point ran a workload other than the default (random ids at fixed concurrency)."""
    return "workload" in points and bool(points.workload.notna().any())


def category_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (ok point, category), in the points' order, categories sorted; pos1..posK per position."""
    if not has_workloads(points):
        return pd.DataFrame(columns=CATEGORY_COLUMNS)
    rows = []
    for p in points[points.status == "ok"].itertuples():
        for c in p.categories if isinstance(p.categories, list) else ():
            row = {k: c.get(k) for k in CATEGORY_COLUMNS if k in c}
            series = getattr(p, "series", None) or f"{p.draft_attention_backend}/{p.draft_kv_cache_dtype}"
            if isinstance(p.workload, str) and series.endswith(" " + p.workload):  # the engine's part only
                series = series[: -len(p.workload) - 1]
            load = p.load if isinstance(p.load, str) else None
            rows.append(
                {**row, "label": getattr(p, "label", load), "series": series, "workload": p.workload, "load": load}
            )
    df = pd.DataFrame(rows, columns=CATEGORY_COLUMNS)
    k = max([len(v) for v in df.per_position_acceptance if isinstance(v, list)] or [0])
    for i in range(k):
        df[f"pos{i + 1}"] = [
            v[i] if isinstance(v, list) and len(v) > i and v[i] is not None else np.nan
            for v in df.per_position_acceptance
        ]
    return df


def category_markdown(points: pd.DataFrame, md_table) -> list[str]:
    """The summary.md section (no lines when the sweep has no workload but the default)."""
    table = category_table(points)
    if not len(table):
        return []
    return [
        "## Acceptance per workload and category",
        "",
        "Mean acceptance length = 1 + accepted draft tokens per verify step; per position = share of steps whose "
        "i-th draft token was accepted. `from`: the server's per-request numbers summed per category "
        "(`per-request`), or the category's own /metrics window (`window`).",
        "",
        md_table(table, MARKDOWN_COLUMNS),
        "",
    ]


def plot_categories(table: pd.DataFrame) -> bytes | None:
    """Left: mean acceptance length per (workload, category), one bar per engine series; right: per-position
    acceptance, one line per (series, workload, category)."""
    if not len(table) or table.mean_acceptance_length.isna().all():
        return None
    table = table.assign(row=[f"{w} / {c}" for w, c in zip(table.load, table.category)])
    rows = list(dict.fromkeys(table.row))
    series = list(dict.fromkeys(table.series))
    fig = new_figure(13, 1.6 + 0.32 * len(rows) * max(len(series), 1) ** 0.5)
    bars, lines = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    height = 0.8 / len(series)
    for i, s in enumerate(series):
        part = table[table.series == s].set_index("row")
        ys = np.arange(len(rows))[::-1] + (i - (len(series) - 1) / 2) * height
        values = [part.mean_acceptance_length.get(r, np.nan) for r in rows]
        bars.barh(ys, values, height=height, color=f"C{i % 10}", label=s)
    bars.set_yticks(np.arange(len(rows))[::-1], [wrap(r, 40) for r in rows], fontsize=8)
    bars.set_xlabel("mean acceptance length (tokens / verify step)")
    bars.set_xlim(left=0)
    bars.grid(axis="x", alpha=0.3)
    pos_cols = [c for c in table.columns if c.startswith("pos") and c[3:].isdigit()]
    for r in table.itertuples():
        rates = [getattr(r, c) for c in pos_cols]
        lines.plot(range(1, len(pos_cols) + 1), rates, marker="o", alpha=0.6, color=f"C{series.index(r.series) % 10}")
    lines.set_xlabel("draft position")
    lines.set_ylabel("acceptance")
    lines.set_ylim(0, 1.05)
    if pos_cols:
        lines.set_xticks(range(1, len(pos_cols) + 1))
    lines.grid(alpha=0.3)
    bars.legend(fontsize=8, loc="lower right")
    return png_bytes(fig)


def html_columns(table: pd.DataFrame) -> dict[str, tuple[str, str | None]]:
    """The report.html table's columns (header, bench.core.fmt format spec), pos1..posK included."""
    positions = {c: (f"position {c[3:]}", ".3f") for c in table.columns if c.startswith("pos") and c[3:].isdigit()}
    return {
        "series": ("engine", None),
        "load": ("workload", None),
        "category": ("category", None),
        "requests": ("requests", ".0f"),
        "conversations": ("conversations", ".0f"),
        "prompt_tokens_mean": ("mean prompt tokens", ",.0f"),
        "output_tokens_mean": ("mean output tokens", ",.1f"),
        "ttft_p50_ms": ("TTFT p50 ms", ",.1f"),
        "tpot_p50_ms": ("TPOT p50 ms", ".2f"),
        "acceptance_rate": ("acceptance rate", ".4f"),
        "mean_acceptance_length": ("mean acceptance length", ".4f"),
        **positions,
        "num_drafts": ("verify steps", ",.0f"),
        "acceptance_source": ("from", None),
    }
