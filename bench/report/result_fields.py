"""The results tables' measured columns, declared once: summary.md (bench.report.markdown) and report.html
(bench.report.html) both take their metric columns from RESULT_FIELDS, so a new record field reaches both reports
with one entry here (after its column in tables.POINT_COLUMNS). The configuration columns before them (axes, shape)
are the renderers' own.

A precision column (PRECISION) is a derived text column under a "+-" header: "x.x%", the record's relative 95%
half-width (bench.measure.window.precision) of the figure to its left, so that figure never appears without it; "n/a"
(bench.core.fmt.NO_PRECISION) where the record states none.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.core.fmt import NO_PRECISION, fmt, is_missing


@dataclass(frozen=True)
class ResultField:
    column: str
    header: str
    digits: int | None  # decimals; None: shown as recorded (text)
    markdown: bool = True
    html: bool = True
    optional: bool = False  # shown only where some point has it (a field that older records lack)


#: derived column -> the record's relative half-width it shows
PRECISION = {
    "throughput_pm": "throughput_halfwidth",
    "tpot_pm": "tpot_halfwidth",
    "speedup_output_pm": "speedup_output_halfwidth",  # bench.report.speedup.ratio_halfwidth
}

RESULT_FIELDS: tuple[ResultField, ...] = (
    ResultField("window", "window", None),
    ResultField("output_throughput", "output tok/s", 1),
    ResultField("throughput_pm", "+-", None),
    ResultField("output_throughput_whole", "whole-window tok/s", 1),
    ResultField("per_user_output_throughput", "tok/s/user", 1),
    ResultField("request_throughput", "req/s", 2, markdown=False),
    ResultField("ttft_p50_ms", "TTFT p50 ms", 1),
    # a steady point whose span saw no request sent (one wave) takes its TTFT from the whole window: said here
    ResultField("ttft_window", "TTFT window", None, optional=True),
    ResultField("ttft_p99_ms", "TTFT p99 ms", 1),
    ResultField("tpot_p50_ms", "TPOT p50 ms", 2),
    ResultField("tpot_pm", "TPOT +-", None),
    ResultField("tpot_p99_ms", "TPOT p99 ms", 2),
    ResultField("step_p50_ms", "step p50 ms", 2),
    ResultField("itl_p50_ms", "ITL p50 ms", 2, markdown=False),
    ResultField("itl_p99_ms", "ITL p99 ms", 2),
    ResultField("e2e_p50_ms", "E2E p50 ms", 0, markdown=False),
    ResultField("errors", "errors", 0, markdown=False),
    ResultField("served_token_ratio", "vLLM/client tokens", 4, markdown=False, optional=True),
    ResultField("tpot_client_over_vllm", "TPOT client/vLLM", 3, markdown=False, optional=True),
    ResultField("ttft_client_minus_vllm_ms", "TTFT client-vLLM ms", 1, markdown=False, optional=True),
    ResultField("acceptance_rate", "accept", 3),
    ResultField("mean_acceptance_length", "mean len", 2),
    ResultField("per_position_acceptance", "per position", 2),
    ResultField("acceptance_mode", "acceptance", None, markdown=False),
)


def markdown_columns(points: pd.DataFrame) -> dict[str, tuple[str, int]]:
    """column -> (header, decimals) for bench.report.markdown.md_table of `points`."""
    return {f.column: (f.header, f.digits or 0) for f in RESULT_FIELDS if f.markdown and _shown(f, points)}


def html_columns(points: pd.DataFrame) -> dict[str, tuple[str, str | None]]:
    """column -> (header, format spec) for bench.report.html's results table of `points`."""
    return {
        f.column: (f.header, None if f.digits is None else f",.{f.digits}f")
        for f in RESULT_FIELDS
        if f.html and _shown(f, points)
    }


def _shown(f: ResultField, points: pd.DataFrame) -> bool:
    return not f.optional or (f.column in points and bool(points[f.column].notna().any()))


def with_precision(points: pd.DataFrame) -> pd.DataFrame:
    """`points` with the PRECISION text columns ("x.x%"; NO_PRECISION where the record states none: a whole-window
    point, a k = 0 baseline's speedup; "n/a (short: n cycles)" beside a headline over fewer than 3 whole cycles of
    the loop, which states none). Left missing where no record has the source."""
    out = points.assign(
        **{
            shown: points[source].map(lambda h: pm_text(h) or NO_PRECISION) if source in points else None
            for shown, source in PRECISION.items()
        }
    )
    if "steady_short" in points and "throughput_pm" in out:
        short = points["steady_short"].fillna(False).astype(bool)
        out.loc[short, "throughput_pm"] = points.loc[short, "steady_cycles"].map(short_text)
    return out


def short_text(cycles) -> str:
    return f"{NO_PRECISION} (short: {0 if cycles is None or pd.isna(cycles) else int(cycles)} cycles)"


def pm_text(halfwidth) -> str | None:
    """A relative 95% half-width as text ("6.2%"), None where there is none (prose leaves it out)."""
    return None if is_missing(halfwidth) else fmt(halfwidth, ".1%")
