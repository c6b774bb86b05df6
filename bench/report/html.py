"""report.html: one self-contained page (CSS and JS inlined, plots as base64 PNG data: URIs, nothing external), so
it opens offline and can be mailed or attached as a single file.

This module only prepares data: which tables, columns, cells and CSS classes the page shows, from
bench.report.analysis.collect and bench.report.figures.draw_all. The layout and the prose are in
templates/report.html.j2; the style and the image check script in static/, read and inlined at render time. The
script marks, on load, how many images decoded (body[data-images-loaded="N/M"]) for the browser check; the page
does not need JavaScript to be read.
"""

from __future__ import annotations

import base64
import numbers
from collections.abc import Callable, Mapping
from functools import cache
from importlib.resources import files

import jinja2
import pandas as pd
from markupsafe import Markup

from bench.config import axes as server_axes
from bench.core.fmt import fmt, is_missing
from bench.report import result_fields
from bench.report import roofline as R
from bench.report.analysis import LATENCY_METRICS, ReportData
from bench.report.categories import html_columns
from bench.report.dcp_view import COLUMNS as DCP_COLUMNS
from bench.report.dcp_view import NOTE as DCP_NOTE
from bench.report.decision import GOODPUT_NOTE, TABLE_HEADERS, DecisionView, table_frame
from bench.report.servers import SERVER_HEADERS, SERVER_NOTE
from bench.report.servers import shown as shown_servers
from bench.report.speedup import WITHIN_START, page_notes
from bench.report.speedup import stated as speedup_stated
from bench.report.tables import AXIS_PREFIX

DASH = "–"  # an unknown value in the page's tables
Columns = Mapping[str, tuple[str, str | None]]  # column -> (header, format spec for bench.core.fmt.fmt)

AXIS_NAMES = {
    "draft_attention_backend": "draft backend",
    "draft_kv_cache_dtype": "draft KV",
    "dcp_size": "DCP",
    "num_speculative_tokens": "k",
    "input_len": "in",
    "output_len": "out",
    "concurrency": "conc.",
}
AXIS_LONG = {
    "draft_attention_backend": "draft attention backend",
    "draft_kv_cache_dtype": "draft KV cache dtype",
    "dcp_size": "DCP size",
    "num_speculative_tokens": "speculative tokens (k)",
    "input_len": "input length",
    "output_len": "output length",
    "concurrency": "concurrency",
}


def axis_name(column: str) -> str:
    """A configuration axis's header: the built-in ones here, a server axis's from its declaration."""
    if column.startswith(AXIS_PREFIX):
        return server_axes.header(column.removeprefix(AXIS_PREFIX))
    return AXIS_NAMES.get(column, column)


LATENCY_COLUMNS: Columns = {
    "label": ("point", None),
    **{f"{m}_{q}_ms": (f"{name} {q}", ",.2f") for m, name in LATENCY_METRICS.items() for q in ("p50", "p90", "p99")},
}
PARETO_COLUMNS: Columns = {
    "label": ("point", None),
    "lengths": ("input / output", None),
    "output_throughput": ("output tok/s", ",.1f"),
    "per_user_output_throughput": ("tok/s/user", ",.1f"),
    "tpot_p50_ms": ("TPOT p50 ms", ".2f"),
    "pareto_user": ("Pareto (tok/s vs tok/s/user)", None),
    "pareto_tpot": ("Pareto (tok/s vs TPOT)", None),
}
HEATMAP_COLUMNS: Columns = {
    "dcp_size": ("DCP", None),
    "draft_attention_backend": ("draft backend", None),
    "draft_kv_cache_dtype": ("draft KV", None),
    "concurrency": ("conc.", None),
    "value": ("best output tok/s", ",.1f"),
    "best_label": ("from", None),
    "n_ok": ("ok", None),
    "n_failed": ("failed", None),
    "n_skipped": ("skipped", None),
    "note": ("why empty", None),
}
ROOFLINE_INPUT_COLUMNS: Columns = {
    "label": ("point", None),
    "concurrency": ("conc.", None),
    "input_len": ("in", None),
    "output_len": ("out", None),
    "context_len": ("mean context (in + out/2)", ",.0f"),
    "tp": ("TP", None),
    "dcp_size": ("DCP", None),
    "num_speculative_tokens": ("k (draft passes)", None),
    "target_kv_dtype": ("target KV dtype", None),
    "draft_kv_cache_dtype": ("draft KV dtype", None),
    "mean_acceptance_length": ("mean acceptance length", ".3f"),
    "tokens_per_step": ("tokens/step", ",.2f"),
    "bandwidth_bytes_s": ("datasheet bandwidth", "bytes/s"),
    "measured_bandwidth_bytes_s": ("measured copy", "bytes/s"),
}
ROOFLINE_COLUMNS: Columns = {
    "label": ("point", None),
    "target_weight_bytes": ("target weights", "bytes"),
    "draft_weight_bytes": ("draft weights (k passes + fc)", "bytes"),
    "target_kv_bytes": ("target KV", "bytes"),
    "draft_kv_bytes": ("draft KV (k passes)", "bytes"),
    "bytes_per_step_per_gpu": ("bytes/step/GPU", "bytes"),
    "max_output_tok_s": ("max tok/s", ",.0f"),
    "output_throughput": ("achieved tok/s", ",.1f"),
    "fraction_of_max": ("achieved / max", ".1%"),
    "uniform_experts_read": ("experts/MoE layer (uniform)", ".2f"),
    "max_output_tok_s_uniform": ("max tok/s (uniform)", ",.0f"),
    "fraction_of_max_uniform": ("achieved / max (uniform)", ".1%"),
}
SPEEDUP_COLUMNS: Columns = {
    "speedup_output": ("speedup tok/s (× k=0)", ".2f"),
    "speedup_output_pm": ("+-", None),  # within the two starts (speedup.WITHIN_START)
    "speedup_tpot": ("speedup TPOT (× k=0)", ".2f"),
}
CHECK_COLUMNS: Columns = {
    "label": ("point", None),
    "bytes_per_step_uniform": ("model bytes/step (uniform routing)", "bytes"),
    "model_step_ms": ("model step ms at peak", ".2f"),
    "tpot_mean_ms": ("TPOT mean ms", ".2f"),
    "mean_acceptance_length": ("tokens/step/request", ".2f"),
    "step_ms": ("measured step ms", ".2f"),
    "step_source": ("measured step from", None),
    "achieved_tb_s": ("achieved TB/s", ".2f"),
    "achieved_fraction": ("of datasheet peak", ".1%"),
    "achieved_fraction_measured": ("of measured copy ceiling", ".1%"),
    "prefill_overlap": ("decode time with prefill", ".1%"),
    "note": ("model vs measurement", None),
}
MODEL_INPUT_COLUMNS: Columns = {"quantity": ("quantity", None), "value": ("value", None), "source": ("source", None)}
NVTX_COLUMNS: Columns = {
    "domain": ("domain", None),
    "name": ("range", None),
    "count": ("count", None),
    "cpu_ms_total": ("CPU ms total", ",.2f"),
    "cpu_ms_mean": ("CPU ms mean", ",.4f"),
    "gpu_busy_ms_mean": ("GPU busy ms mean", ",.4f"),
    "kernels_mean": ("kernels/range", ",.1f"),
}
SHARE_COLUMNS: Columns = {  # bench.profiling.step_shares.shares
    "what": ("part", None),
    "part": ("range", None),
    "per_step": ("per step", ",.0f"),
    "cpu_ms": ("CPU ms", ",.3f"),
    "cpu_share": ("share of step CPU", ".1%"),
    "gpu_busy_ms": ("GPU busy ms", ",.3f"),
    "gpu_share": ("share of step GPU busy", ".1%"),
}
PROBLEM_COLUMNS: Columns = {
    "point_id": ("point", None),
    "draft_attention_backend": ("draft backend", None),
    "draft_kv_cache_dtype": ("draft KV", None),
    "dcp_size": ("DCP", None),
    "num_speculative_tokens": ("k", None),
    "concurrency": ("conc.", None),
    "input_len": ("in", None),
    "output_len": ("out", None),
    "status": ("status", None),
    "reason": ("classified reason", None),
    "detail": ("detail", None),
    "log_signature": ("server log signature (re-read now)", None),
}
EFFECTIVE_COLUMNS: Columns = {
    "engine": ("engine config", None),
    "points": ("points", ".0f"),
    "source": ("read from", None),
    "draft_backend_asked": ("draft backend asked", None),
    "draft_backend_ran": ("draft backend ran", None),
    "draft_kv_asked": ("draft KV asked", None),
    "draft_kv_ran": ("draft KV ran", None),
    "draft_block_size": ("draft block", ".0f"),
    "target_backend_asked": ("target backend asked", None),
    "target_backend_ran": ("target backend ran", None),
    "target_kv_asked": ("target KV asked", None),
    "target_kv_ran": ("target KV ran", None),
    "target_block_size": ("target block", ".0f"),
    "cudagraph_mode": ("CUDA graphs", None),
    "dcp_asked": ("DCP asked", None),
    "dcp_ran": ("DCP ran", ".0f"),
    "runner": ("runner", None),
    "vllm_version": ("vLLM", None),
    "mismatch": ("mismatch flags", None),
}
DETAIL_CHARS = 400  # a failure's detail (a log excerpt) is cut here in the problems table


def table(
    df: pd.DataFrame,
    columns: Columns,
    *,
    table_id: str | None = None,
    row_class: Callable[[pd.Series], str | None] | None = None,
    cell_class: Callable[[str, object], str | None] | None = None,
) -> dict:
    """A table for the template: headers, and per row its CSS class and cells (text, CSS class). Numbers get
    class `n` (right-aligned); row_class(row) / cell_class(column, value) add their own."""
    rows = []
    for _, row in df.iterrows():
        cells = []
        for col, (_, spec) in columns.items():
            v = row.get(col)
            classes = ["n"] if isinstance(v, numbers.Real) and not isinstance(v, bool) and not is_missing(v) else []
            extra = cell_class(col, v) if cell_class else None
            cells.append({"text": fmt(v, spec, missing=DASH), "cls": " ".join([*classes, *([extra] if extra else [])])})
        rows.append({"cls": row_class(row) if row_class else None, "cells": cells})
    return {"id": table_id, "headers": [h for h, _ in columns.values()], "rows": rows}


def axes_columns(data: ReportData, extra: Columns) -> dict:
    """Label column + the axes that vary, for compact tables."""
    varied = {a: (axis_name(a), None) for a in data.counts["varied"]}
    return {"label": ("point", None), **varied, **extra}


VERDICT_CLASS = {"faster": "good", "slower": "bad", "inconclusive": "warn"}


def decision_context(view: DecisionView | None) -> dict | None:
    """The page's opening view (bench.report.decision): its sentences, caveats and narrow table, as text."""
    if view is None or not view.rows:
        return None
    frame = table_frame(view)
    return {
        "sentences": view.sentences,
        "caveats": [c.text for c in view.caveats],
        "table": table(
            frame,
            {c: (TABLE_HEADERS[c], None) for c in frame.columns},
            cell_class=lambda c, v: VERDICT_CLASS.get(str(v)) if c.endswith("verdict") else None,
            table_id="decision-table",
        ),
        "goodput_note": GOODPUT_NOTE.format(slo=view.slo.label) if view.slo is not None else None,
    }


def _best_ids(view: DecisionView | None) -> set[str]:
    """The points the decision view names best at their shape (highlighted in the results table)."""
    return {row.best.point_id for row in view.rows if row.best is not None} if view is not None else set()


def point_tables(data: ReportData) -> dict[str, dict]:
    """The tables with one row per point: results, latency, Pareto, acceptance, heatmap cells."""
    best = _best_ids(data.decision)
    par = data.pareto
    optimal = {True: "optimal", False: ""}
    shown = par.assign(pareto_user=par.pareto_user.map(optimal), pareto_tpot=par.pareto_tpot.map(optimal))
    acc = data.acceptance
    positions = {c: (f"position {c[3:]}", ".4f") for c in acc.columns if c.startswith("pos") and c[3:].isdigit()}
    acc_cols = {
        "acceptance_rate": ("acceptance rate", ".4f"),
        "mean_acceptance_length": ("mean acceptance length", ".4f"),
        **positions,
    }
    speedup = SPEEDUP_COLUMNS if "speedup_output" in data.points else {}
    if not speedup_stated(data.points):
        speedup = {c: v for c, v in speedup.items() if c != "speedup_output_pm"}
    ok = data.points[data.points.status == "ok"]
    return {
        "results": table(
            result_fields.with_precision(ok),
            axes_columns(data, {**result_fields.html_columns(ok), **speedup}),  # bench/report/result_fields.py
            row_class=lambda r: "best" if r["point_id"] in best else None,
            table_id="results",
        ),
        "latency": table(data.latency, LATENCY_COLUMNS, table_id="latency"),
        "pareto": table(
            shown,
            PARETO_COLUMNS,
            row_class=lambda r: "best" if r["pareto_user"] or r["pareto_tpot"] else None,
            table_id="pareto",
        ),
        "acceptance": table(acc, axes_columns(data, acc_cols), table_id="acceptance"),
        "heatmap": table(
            data.heatmap,
            HEATMAP_COLUMNS,
            cell_class=lambda c, v: "bad" if c == "note" and not is_missing(v) else None,
            table_id="heatmap",
        ),
    }


def problems(data: ReportData) -> tuple[dict, bool]:
    """The failed and skipped points (detail cut, a log signature that agrees with the recorded reason said
    once), and whether some log now names a different cause than the recorded one."""
    bad = data.problems.copy()
    bad["detail"] = bad["detail"].map(
        lambda d: None if is_missing(d) else (d if len(d) <= DETAIL_CHARS else d[:DETAIL_CHARS] + " …")
    )
    same = pd.Series(
        [not is_missing(s) and str(s).startswith(f"{r}:") for s, r in zip(bad.log_signature, bad.reason)],
        index=bad.index,
        dtype=bool,
    )
    differs = bool((bad.log_signature.notna() & ~same).any())
    bad.loc[same, "log_signature"] = "(same as the classified reason)"
    shown = table(bad, PROBLEM_COLUMNS, cell_class=lambda c, v: "bad" if c == "reason" else None, table_id="problems")
    return shown, differs


def provenance(data: ReportData) -> tuple[list[tuple[str, str]], dict[str, dict]]:
    """(key, value) rows of the provenance, and the tables of the patch state and the recorded patch actions."""
    env = data.manifest.get("environment") or {}
    vllm = env.get("vllm") or {}
    git = env.get("suite_git") or {}
    sha = git.get("sha")
    if sha and not all(ch in "0123456789abcdef" for ch in str(sha).lower()):
        sha = f"{sha} (not a commit id: the sweep recorded an unresolved ref)"
    pairs = [
        *data.provenance.items(),
        ("suite git sha", sha),
        ("suite git dirty", git.get("dirty")),
        ("patch series", vllm.get("series")),
        ("platform", env.get("platform")),
        ("python executable", env.get("python_executable")),
        ("results directory", str(data.sweep_dir)),
    ]
    fixes = pd.DataFrame(vllm.get("fixes") or [], columns=["fix", "state", "in_code", "detail"])
    record = pd.DataFrame(
        [
            {
                "time": r.get("time"),
                "action": r.get("action"),
                "series": r.get("series"),
                "vllm": r.get("vllm_version"),
                "fixes": ", ".join(r.get("fixes") or []),
                "files": len(r.get("files") or {}),
            }
            for r in vllm.get("record") or []
        ],
        columns=["time", "action", "series", "vllm", "fixes", "files"],
    )
    tables = {
        name: table(df, {c: (c, None) for c in df.columns}) for name, df in (("fixes", fixes), ("patch_record", record))
    }
    return [(k, fmt(v, missing=DASH)) for k, v in pairs], tables


def nvtx_tables(data: ReportData) -> list[dict]:
    """Per profiling capture: its file (relative to the results directory) and its 40 largest ranges in ms."""
    out = []
    for path, summary in data.nvtx:
        shown = summary.assign(
            cpu_ms_mean=summary.cpu_ns_mean / 1e6,
            gpu_busy_ms_mean=summary.gpu_busy_ns_mean / 1e6,
            cpu_ms_total=summary.cpu_ns_total / 1e6,
        )
        rel = path.relative_to(data.sweep_dir) if path.is_relative_to(data.sweep_dir) else path
        shares = data.step_shares.get(path.parent)
        out.append(
            {
                "path": str(rel),
                "table": table(shown.head(40), NVTX_COLUMNS),
                "shares": None if shares is None else table(shares.table, SHARE_COLUMNS),
                "decode_steps": None if shares is None else f"{shares.decode} of {shares.engine_steps}",
            }
        )
    return out


def _html_spec(digits: int | None) -> str | None:
    """The markdown table's digits as an HTML table format (thousands separated)."""
    return None if digits is None else f",.{digits}f"


def page_context(data: ReportData, images: Mapping[str, bytes | None]) -> dict:
    """Everything the template shows, formatted; no markup."""
    c, p = data.counts, data.provenance
    problem_table, log_differs = problems(data)
    provenance_rows, patch_tables = provenance(data)
    eff = data.effective
    tables = {
        **point_tables(data),
        "roofline_points": table(data.roofline, ROOFLINE_INPUT_COLUMNS, table_id="roofline-points"),
        "roofline": table(data.roofline, ROOFLINE_COLUMNS, table_id="roofline"),
        "roofline_check": table(
            data.roofline.assign(achieved_tb_s=pd.to_numeric(data.roofline.achieved_bytes_s, errors="coerce") / 1e12),
            CHECK_COLUMNS,
            table_id="roofline-check",
        ),
        "roofline_inputs": table(data.roofline_inputs, MODEL_INPUT_COLUMNS, table_id="roofline-inputs"),
        "problems": problem_table,
        "categories": table(data.categories, html_columns(data.categories), table_id="categories"),
        "dcp": table(data.dcp, {k: (h, _html_spec(d)) for k, (h, d) in DCP_COLUMNS.items()}, table_id="dcp"),
        "effective": table(
            eff,
            EFFECTIVE_COLUMNS,
            cell_class=lambda col, v: "warn" if col == "mismatch" and not is_missing(v) else None,
            table_id="effective",
        ),
        "servers": table(
            shown_servers(data.servers),
            {k: (h, ".0f" if k == "starts" else None) for k, h in SERVER_HEADERS.items()},
            table_id="servers",
        ),
        **patch_tables,
    }
    return {
        "profile": p["profile"],
        "description": (data.manifest.get("profile") or {}).get("description") or "",
        "created": p["created"],
        "vllm": p["vllm"],
        "machine": p["machine"],
        "counts": c,
        "varied": [AXIS_LONG.get(a) or axis_name(a) for a in c["varied"]],
        "any_ok": bool(c["ok"]),
        "decision": decision_context(data.decision),
        "lens_vary": any(a in c["varied"] for a in ("input_len", "output_len")),
        "synthetic": "synthetic" in set(data.points.acceptance_mode.dropna()),
        "images": {name: base64.b64encode(png).decode() for name, png in images.items() if png is not None},
        "tables": tables,
        "roofline_notes": data.roofline_notes,
        **page_notes(data.points),
        "speedup_within_start": WITHIN_START if speedup_stated(data.points) else None,
        "has_roofline": bool(len(data.roofline)),
        "dcp_note": DCP_NOTE,
        "gpu_bandwidth": [(name, fmt(bw / 1e12, "g"), part) for name, bw, part in R.GPU_BANDWIDTH],
        "nvtx": nvtx_tables(data),
        "log_differs": log_differs,
        "flagged": int(eff.mismatch.notna().sum()) if len(eff) else 0,
        "provenance": provenance_rows,
        "profile_text": data.manifest.get("profile_text"),
        "sweep_name": data.sweep_dir.name,
        "server_note": SERVER_NOTE,
    }


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2")


def _static(name: str) -> Markup:
    """A file of static/, trusted as is: it is inlined into <style> / <script>, where escaping would break it."""
    return Markup(files("bench.report").joinpath("static", name).read_text(encoding="utf-8"))


def render_html(data: ReportData, images: Mapping[str, bytes | None]) -> str:
    return _template().render(**page_context(data, images), css=_static("report.css"), js=_static("image-check.js"))
