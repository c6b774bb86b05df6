"""Tables rendered to GitHub markdown strings (golden-testable), and the sweep's summary.md."""

from __future__ import annotations

import pandas as pd

from bench.config import axes as server_axes
from bench.core.fmt import fmt, md_rows
from bench.report import decision
from bench.report.categories import category_markdown, has_workloads
from bench.report.dcp_view import dcp_markdown
from bench.report.result_fields import markdown_columns, with_precision
from bench.report.servers import SERVER_HEADERS, SERVER_NOTE
from bench.report.servers import shown as shown_servers
from bench.report.speedup import markdown_notes, markdown_results, with_speedups
from bench.report.tables import AXIS_PREFIX, axis_columns


def md_table(df: pd.DataFrame, columns: dict[str, tuple[str, int]]) -> str:
    """columns: {column: (header, digits)}. `digits` applies to floats (and lists of them, such as the
    per-position acceptance); integers print as recorded ("1024", not "1,024")."""
    rows = ([_cell(row[c], d) for c, (_, d) in columns.items()] for _, row in df.iterrows())
    return "\n".join(md_rows([h for h, _ in columns.values()], rows))


def _cell(value, digits: int) -> str:
    return fmt(value, f",.{digits}f" if isinstance(value, (float, list)) else None)


CONFIG_COLUMNS = {
    "draft_attention_backend": ("draft backend", 0),
    "draft_kv_cache_dtype": ("draft KV", 0),
    "dcp_size": ("DCP", 0),
    "num_speculative_tokens": ("k", 0),
    "concurrency": ("conc.", 0),
    "input_len": ("in", 0),
    "output_len": ("out", 0),
}
FAILED_COLUMNS = {
    "draft_attention_backend": ("draft backend", 0),
    "draft_kv_cache_dtype": ("draft KV", 0),
    "dcp_size": ("DCP", 0),
    "num_speculative_tokens": ("k", 0),
    "concurrency": ("conc.", 0),
    "input_len": ("in", 0),
    "output_len": ("out", 0),
    "status": ("status", 0),
    "reason": ("reason", 0),
    "detail": ("detail", 0),
}


def _result_columns(points: pd.DataFrame) -> dict[str, tuple[str, int]]:
    """The results table's columns: after k, each server axis (bench/config/axes.py) and, with workloads, each point's
    load (workload, sampling, arrival)."""
    result = CONFIG_COLUMNS | markdown_columns(points)  # the measured columns: bench/report/result_fields.py
    keys = list(result)
    at = keys.index("num_speculative_tokens") + 1
    after_k = {c: (server_axes.header(c.removeprefix(AXIS_PREFIX)), 0) for c in axis_columns(points)}
    if has_workloads(points):
        after_k["load"] = ("workload", 0)
    return {k: result[k] for k in keys[:at]} | after_k | {k: result[k] for k in keys[at:]}


def summary_markdown(
    points: pd.DataFrame,
    prov: dict,
    models: dict | None = None,
    servers: pd.DataFrame | None = None,
    view: decision.DecisionView | None = None,
) -> str:
    """summary.md: the decision view first (`view`: bench.report.decision.build_view's; built from the records'
    within-start precision when not given), then the counts, the wide results table and the rest."""
    points = with_speedups(points)  # over the k = 0 baseline, when the sweep has one
    if view is None:
        view = decision.build_view(points, servers, prov.get("machine"))
    ok = points[points.status == "ok"]
    bad = points[points.status != "ok"].copy()
    bad["detail"] = bad["detail"].map(
        lambda d: d[:160].replace("|", "/").replace("\n", " ") if isinstance(d, str) else None
    )
    lines = [
        f"# Sweep `{prov['profile']}`",
        "",
        *decision.markdown(view, md_table),
        f"{len(ok)} ok, {int((points.status == 'failed').sum())} failed, "
        f"{int((points.status == 'skipped').sum())} skipped.",
        "",
    ]
    if len(ok):
        shown, columns = markdown_results(with_precision(ok), _result_columns(points))
        lines += ["## Results", "", md_table(shown, columns), "", WINDOW_NOTE, "", *markdown_notes(points)]
        lines += _contaminated(ok)
        lines += _served_line(ok)
        lines += dcp_markdown(points, models or {}, md_table)
        lines += category_markdown(points, md_table)
        lines += _flagged(ok, "**Effective configuration differs from the asked one:**")
        lines += [
            "Effective configuration read back from the servers: "
            + ", ".join(
                sorted(
                    {
                        f"target {r.target_attention_backend_ran} / draft {_draft_ran(r)} / KV "
                        f"{r.kv_cache_dtype_ran} / graphs {r.cudagraph_mode}"
                        for r in ok.itertuples()
                    }
                )
            ),
            "",
        ]
    if len(bad):
        lines += ["## Failed and skipped points", "", md_table(bad, FAILED_COLUMNS), ""]
        lines += _flagged(bad, "**What the failed servers had selected, against what was asked (from their logs):**")
    if servers is not None and len(servers):
        columns = {k: (h, 0) for k, h in SERVER_HEADERS.items()}
        lines += ["## Servers", "", md_table(shown_servers(servers), columns), "", SERVER_NOTE, ""]
    lines += ["## Provenance", ""] + [f"- {k}: {v}" for k, v in prov.items()] + [""]
    return "\n".join(lines)


def _served_line(ok: pd.DataFrame) -> list[str]:
    """How far vLLM's own counters and the client's figures agree over the points' windows (records from before the
    cross-check have none and are left out): generated tokens, mean TPOT, mean TTFT."""
    ratios = ok.served_token_ratio.dropna() if "served_token_ratio" in ok else pd.Series(dtype=float)
    if not len(ratios):
        return []
    if ratios.eq(1).all():
        tokens = "equal at every point"
    else:
        tokens = (
            f"vLLM / client {fmt(ratios.min(), '.4f')}-{fmt(ratios.max(), '.4f')} (the flags name points off by more "
            "than 0.1%)"
        )
    lines = [
        f"Cross-check against vLLM's own counters over each window ({len(ratios)} of {len(ok)} points): generated "
        f"tokens (`vllm:generation_tokens_total`) and the tokens the client received: {tokens}."
    ]
    tpot, ttft = ok.tpot_client_over_vllm.dropna(), ok.ttft_client_minus_vllm_ms.dropna()
    if len(tpot) and len(ttft):
        lines[0] += (
            f" Mean TPOT, client / vLLM (`vllm:request_time_per_output_token_seconds`): {fmt(tpot.min(), '.3f')}-"
            f"{fmt(tpot.max(), '.3f')}. Mean TTFT, client - vLLM (`vllm:time_to_first_token_seconds`, from its "
            f"front end's arrival): {fmt(ttft.min(), '+.1f')} to {fmt(ttft.max(), '+.1f')} ms, the client's and the "
            "HTTP path's share."
        )
    return [*lines, ""]


WINDOW_NOTE = (
    "`window` steady: output tok/s is tokens over time of the whole cycles of the closed loop (C completions each) "
    "inside the span in which all C requests were in flight and decoding, and TPOT, ITL and step are over that span "
    "(ramp-up and drain left out; docs/measurement.md); the `+-` after output tok/s is the 95% confidence "
    "half-width of that ratio over the same whole cycles (the point's blocks as units from 3 blocks on, each started "
    "at its own random phase; else whole-cycle sub-windows), the `TPOT +-` that of the steady mean TPOT (the p50 "
    "beside it has no interval of its own); `n/a (short: n cycles)`: fewer than 3 whole cycles, no precision "
    "stated; `n/a` alone: the record states no precision (a whole window); "
    "`whole-window tok/s` is first send to last end, ramp-up and drain included. `window` whole: no steady span (an "
    "open-loop arrival, or too few requests): the whole window."
)


def _unchecked(ok: pd.DataFrame) -> list[str]:
    """Points whose windows were not looked at in a server log (records that say where they looked)."""
    if "contamination_checked" not in ok:
        return []
    known = ok[ok.contamination_checked.notna()]
    blind = known[~known.contamination_checked.str.contains("server log", regex=False)]
    if not len(blind):
        return []
    return [
        f"**{len(blind)} point(s) not checked for compiles, graph captures or queueing inside their windows**: no "
        "server log (`bench load --url` without `--server-log`); only preemptions were looked for.",
        "",
    ]


def _contaminated(ok: pd.DataFrame) -> list[str]:
    lines = _unchecked(ok)
    bad = ok[ok.contamination.notna()]
    if not len(bad):
        return lines
    lines += ["**Windows with something else inside (after re-measuring; docs/measurement.md):**", ""]
    return lines + [f"- `{r.point_id}` ({r.load}): {r.contamination}" for r in bad.itertuples()] + [""]


def _flagged(points: pd.DataFrame, title: str) -> list[str]:
    flagged = points[points.mismatch.notna()]
    if not len(flagged):
        return []
    return [title, "", *(f"- `{r.point_id}`: {r.mismatch}" for r in flagged.itertuples()), ""]


def _draft_ran(row) -> str:
    """The draft backend that ran: "none" for a k = 0 baseline (no draft), "?" where unknown."""
    if row.num_speculative_tokens == 0:
        return "none"
    ran = row.draft_attention_backend_ran
    return ran if isinstance(ran, str) else "?"
