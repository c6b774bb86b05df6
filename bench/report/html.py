"""report.html: one self-contained page (inline CSS, plots as base64 PNG data: URIs, no external anything), so it
opens offline and can be mailed or attached as a single file.

Presentation only: the tables come from bench.report.analysis.collect, the figures from
bench.report.figures.draw_all.
A tiny inline script marks, on load, how many images decoded (body[data-images-loaded="N/M"]) for the browser
check; the page does not need JavaScript to be read.
"""

from __future__ import annotations

import base64
import html

import pandas as pd

from bench.fmt import fmt, is_missing
from bench.report import roofline as R
from bench.report.analysis import ReportData

CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1320px;padding:0 24px 48px;
color:#1d1d1f;line-height:1.45}
h1{margin:24px 0 4px;font-size:26px}h2{margin-top:40px;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{margin-top:24px}
nav{background:#f5f5f7;padding:8px 12px;border-radius:6px;margin:12px 0;font-size:14px;display:flex;flex-wrap:wrap;
gap:4px 16px}
nav a{white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:10px 0;font-size:13px}
th,td{border:1px solid #d0d0d5;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f3;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.best td{font-weight:600;background:#eef7ee}
td.warn{background:#fff1e6;color:#8a3b00}
td.bad{color:#9b0000}
.note{background:#fffbe6;border-left:4px solid #e6c200;padding:6px 10px;margin:10px 0;font-size:14px}
.model{background:#eef3fb;border-left:4px solid #4c72b0;padding:6px 10px;margin:10px 0;font-size:14px}
.muted{color:#666;font-size:13px}
figure{margin:12px 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:13px;color:#555;margin-top:4px}
pre{background:#f7f7f9;padding:8px;overflow-x:auto;font-size:12px}
code{background:#f3f3f6;padding:0 3px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{background:#f5f5f7;border-radius:6px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:22px}
details summary{cursor:pointer}
"""

IMG_CHECK_JS = """
window.addEventListener('load', function () {
  var imgs = document.images, ok = 0, bad = [];
  for (var i = 0; i < imgs.length; i++) {
    if (imgs[i].complete && imgs[i].naturalWidth > 0) { ok++; } else { bad.push(imgs[i].getAttribute('data-plot')); }
  }
  document.body.setAttribute('data-images-loaded', ok + '/' + imgs.length);
  document.body.setAttribute('data-images-broken', bad.join(','));
});
"""

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


def esc(v) -> str:
    return html.escape(str(v), quote=True)


def cell_text(v, spec: str | None = None) -> str:
    """A cell: '–' for unknown."""
    return fmt(v, spec, missing="–")


def table(
    df: pd.DataFrame,
    columns: dict[str, tuple[str, str | None]],
    *,
    row_class=None,
    cell_class=None,
    table_id: str | None = None,
) -> str:
    """columns: {column: (header, format spec)}; row_class(row) / cell_class(column, value) -> css class."""
    if not len(df):
        return '<p class="muted">(none)</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h, _ in columns.values())
    body = []
    for _, row in df.iterrows():
        cells = []
        for col, (_, spec) in columns.items():
            v = row.get(col)
            cls = ["n"] if isinstance(v, (int, float)) and not isinstance(v, bool) and not is_missing(v) else []
            if cell_class:
                extra = cell_class(col, v)
                if extra:
                    cls.append(extra)
            cells.append(f"<td{_cls(' '.join(cls))}>{esc(cell_text(v, spec))}</td>")
        body.append(f"<tr{_cls(row_class(row) if row_class else None)}>{''.join(cells)}</tr>")
    tid = f' id="{esc(table_id)}"' if table_id else ""
    return f'<div class="scroll"><table{tid}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _cls(name: str | None) -> str:
    return f' class="{esc(name)}"' if name else ""


def kv_table(pairs: list[tuple[str, object]]) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(cell_text(v))}</td></tr>" for k, v in pairs)
    return f"<table>{rows}</table>"


def img(name: str, png: bytes | None, alt: str, caption: str) -> str:
    if png is None:
        return f'<p class="note">No data to plot for this section ({esc(alt)}).</p>'
    b64 = base64.b64encode(png).decode()
    return (
        f'<figure><img src="data:image/png;base64,{b64}" alt="{esc(alt)}" data-plot="{esc(name)}" '
        f"onload=\"this.setAttribute('data-loaded','1')\" onerror=\"this.setAttribute('data-loaded','0')\">"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{body}</section>'


def axes_columns(data: ReportData, extra: dict | None = None) -> dict:
    """Label column + the axes that vary, for compact tables."""
    cols = {"label": ("point", None)}
    for a in data.counts["varied"]:
        cols[a] = (AXIS_NAMES.get(a, a), None)
    return {**cols, **(extra or {})}


# --- sections ----------------------------------------------------------------------------------------------


def header(data: ReportData) -> str:
    prof = data.manifest.get("profile") or {}
    c = data.counts
    varied = ", ".join(AXIS_LONG.get(a, a) for a in c["varied"]) or "nothing (a single configuration)"
    cards = "".join(
        f'<div class="card"><b>{v}</b>{esc(k)}</div>'
        for k, v in (("points", c["points"]), ("ok", c["ok"]), ("failed", c["failed"]), ("skipped", c["skipped"]))
    )
    best = (
        f"<p>Highest output throughput: <b>{c['best_output_throughput']:,.1f} tok/s</b> ({esc(c['best_label'])}).</p>"
        if c["best_label"]
        else '<p class="note">No point ran successfully: the plots are empty; see the failed and skipped points.</p>'
    )
    p = data.provenance
    return (
        f"<h1>Sweep <code>{esc(p['profile'])}</code></h1>"
        f'<p class="muted">{esc(prof.get("description") or "")} — created {esc(p["created"])} — '
        f"vLLM {esc(p['vllm'])} — {esc(p['machine'])}</p>"
        f'<div class="cards">{cards}</div><p>Axes the sweep varied: {esc(varied)}.</p>{best}'
    )


def nav(sections: list[tuple[str, str]]) -> str:
    return "<nav>" + "".join(f'<a href="#{sid}">{esc(t)}</a>' for sid, t in sections) + "</nav>"


def results_section(data: ReportData) -> str:
    ok = data.points[data.points.status == "ok"]
    cols = axes_columns(
        data,
        {
            "output_throughput": ("output tok/s", ",.1f"),
            "per_user_output_throughput": ("tok/s/user", ",.1f"),
            "request_throughput": ("req/s", ",.2f"),
            "ttft_p50_ms": ("TTFT p50 ms", ",.1f"),
            "tpot_p50_ms": ("TPOT p50 ms", ".2f"),
            "itl_p50_ms": ("ITL p50 ms", ".2f"),
            "e2e_p50_ms": ("E2E p50 ms", ",.0f"),
            "errors": ("errors", ".0f"),
            "acceptance_rate": ("accept", ".3f"),
            "mean_acceptance_length": ("mean len", ".3f"),
            "per_position_acceptance": ("per position", ".3f"),
            "acceptance_mode": ("acceptance", None),
        },
    )
    best = data.counts["best_label"]
    return table(ok, cols, row_class=lambda r: "best" if r["label"] == best else None, table_id="results")


def throughput_section(data: ReportData, images: dict) -> str:
    lens = any(a in data.counts["varied"] for a in ("input_len", "output_len"))
    return img(
        "throughput",
        images.get("throughput"),
        "throughput vs concurrency",
        "Left: output tokens/s over all requests; right: output tokens/s per user (1000 / mean TPOT). "
        "One line per (draft backend, draft KV dtype, DCP): color = draft backend × KV dtype, line style = "
        "draft KV dtype, marker = DCP size."
        + (" Input/output lengths vary, so the x axis is the batch shape (concurrency, input/output)." if lens else ""),
    )


def latency_section(data: ReportData, images: dict) -> str:
    cols = {"label": ("point", None)}
    for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")):
        for q in ("p50", "p90", "p99"):
            cols[f"{m}_{q}_ms"] = (f"{name} {q}", ",.2f")
    return img(
        "latency",
        images.get("latency"),
        "latency percentiles per point",
        "Per point: p99 (light), p90 (medium), p50 (dark) overlaid, p99 value written at the bar's end. "
        "TTFT = send to first streamed token; TPOT = (last − first token time) / tokens after the first "
        "chunk, per request; ITL = gap between streamed chunks spread over the tokens each chunk carries "
        "(a chunk may carry several accepted speculative tokens).",
    ) + table(data.latency, cols, table_id="latency")


def pareto_section(data: ReportData, images: dict) -> str:
    par = data.pareto
    cols = {
        "label": ("point", None),
        "output_throughput": ("output tok/s", ",.1f"),
        "per_user_output_throughput": ("tok/s/user", ",.1f"),
        "tpot_p50_ms": ("TPOT p50 ms", ".2f"),
        "pareto_user": ("Pareto (tok/s vs tok/s/user)", None),
        "pareto_tpot": ("Pareto (tok/s vs TPOT)", None),
    }
    shown = par.assign(
        pareto_user=par.pareto_user.map({True: "optimal", False: ""}),
        pareto_tpot=par.pareto_tpot.map({True: "optimal", False: ""}),
    )
    return img(
        "pareto",
        images.get("pareto"),
        "throughput-latency Pareto front",
        "Pareto-optimal points (no other point is at least as good on both axes and better on one) are "
        "ringed in black and joined by the dashed front; labels give the concurrency.",
    ) + table(
        shown, cols, row_class=lambda r: "best" if r["pareto_user"] or r["pareto_tpot"] else None, table_id="pareto"
    )


def acceptance_section(data: ReportData, images: dict) -> str:
    acc = data.acceptance
    pos = [c for c in acc.columns if c.startswith("pos") and c[3:].isdigit()]
    cols = axes_columns(
        data,
        {
            "acceptance_rate": ("acceptance rate", ".4f"),
            "mean_acceptance_length": ("mean acceptance length", ".4f"),
            **{c: (f"position {c[3:]}", ".4f") for c in pos},
        },
    )
    modes = sorted(set(data.points.acceptance_mode.dropna()))
    note = ""
    if "synthetic" in modes:
        note = (
            '<p class="note">Acceptance is <b>synthetic</b> here (vLLM\'s synthetic rejection sampler at the '
            "asked per-position rates): it measures the serving path, not the draft's quality.</p>"
        )
    return (
        note
        + img(
            "acceptance",
            images.get("acceptance"),
            "acceptance",
            "Acceptance rate = accepted / drafted tokens; mean acceptance length = 1 + accepted per "
            "draft (tokens each verify step emits); per-position = share of drafts whose i-th token "
            "was accepted. From the server's /metrics counters over the measured window.",
        )
        + table(acc, cols, table_id="acceptance")
    )


def heatmap_section(data: ReportData, images: dict) -> str:
    cols = {
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
    return img(
        "heatmap",
        images.get("heatmap"),
        "draft backend x draft KV heatmap",
        "Best output tok/s per (draft backend, draft KV dtype) cell at the sweep's largest concurrency; grey "
        "cells had no ok point there, with the classified reason written in.",
    ) + table(
        data.heatmap,
        cols,
        cell_class=lambda c, v: "bad" if c == "note" and not is_missing(v) else None,
        table_id="heatmap",
    )


def roofline_section(data: ReportData, images: dict) -> str:
    intro = (
        '<div class="model"><b>This is a model, not a measurement.</b> Decode is taken to be bound by HBM '
        "bandwidth: each step reads the active weights of the target (one verify pass over k+1 positions) "
        "and of the EAGLE3 draft (k passes, plus its fc once), and the MLA latent KV cache of every sequence. "
        "<br><code>bytes/step (per GPU) = (target weights + k × draft-pass weights + draft fc) / TP + "
        "(target KV + k × draft KV) / DCP</code><br>"
        "<code>KV = layers × (kv_lora_rank + qk_rope_head_dim) × KV-dtype bytes × (input_len + output_len/2) "
        "× concurrency</code><br>"
        "<code>tokens/step = concurrency × mean acceptance length (measured)</code><br>"
        "<code>max decode tok/s = bandwidth / bytes per step × tokens per step</code><br>"
        "Weights: MLA projections, norms, dense MLP layers, per MoE layer the router, shared experts and "
        "<i>top-k</i> routed experts (a lower bound on expert reads, so an upper bound on speed; the "
        "<i>uniform routing</i> columns read the expected number of distinct experts that concurrency × (k+1) "
        "uniformly routed tokens touch), final norm and lm_head; bf16 = 2 bytes, fp8 = 1. The embedding is a "
        "row lookup and not counted. Not modelled: activations, prefill, sampler, launch overhead, "
        "communication, kernel efficiency. The achieved number includes prefill and queueing (it is the "
        "benchmark's output tok/s), so the fraction is conservative.</div>"
    )
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data.roofline_notes)
    inputs = {
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
        "bandwidth_bytes_s": ("bandwidth B/s", ".3g"),
    }
    result = {
        "label": ("point", None),
        "target_weight_bytes": ("target weights", "bytes"),
        "draft_weight_bytes": ("draft weights (k passes + fc)", "bytes"),
        "target_kv_bytes": ("target KV", "bytes"),
        "draft_kv_bytes": ("draft KV (k passes)", "bytes"),
        "bytes_per_step_per_gpu": ("bytes/step/GPU", "bytes"),
        "max_output_tok_s": ("max tok/s", ",.0f"),
        "output_throughput": ("achieved tok/s", ",.1f"),
        "fraction_of_max": ("achieved / max", ".3%"),
        "uniform_experts_read": ("experts/MoE layer (uniform)", ".2f"),
        "max_output_tok_s_uniform": ("max tok/s (uniform)", ",.0f"),
        "fraction_of_max_uniform": ("achieved / max (uniform)", ".3%"),
    }
    body = intro + notes
    if len(data.roofline):
        body += img(
            "roofline",
            images.get("roofline"),
            "speed of light vs achieved",
            "Per point, log scale: the roofline bound with top-k expert reads (red) and with uniform "
            "routing (orange), and the achieved output tok/s (blue).",
        )
        body += (
            "<h3>Per point: inputs</h3>"
            + table(data.roofline, inputs, table_id="roofline-points")
            + "<h3>Per point: bytes per decode step and the bound</h3>"
            + table(data.roofline, result, table_id="roofline")
        )
    body += "<h3>Model inputs</h3>" + table(
        data.roofline_inputs,
        {"quantity": ("quantity", None), "value": ("value", None), "source": ("source", None)},
        table_id="roofline-inputs",
    )
    bw = "".join(
        f"<tr><td>{esc(k)}</td><td class=n>{v / 1e12:g}</td><td>{esc(label)}</td></tr>"
        for k, v, label in R.GPU_BANDWIDTH
    )
    body += (
        "<details><summary>GPU bandwidth table (matched against the GPU name, first match wins)</summary>"
        f"<table><tr><th>name contains</th><th>TB/s</th><th>part</th></tr>{bw}</table>"
        "<p class=muted>CPU runs: bandwidth unknown, no roofline.</p></details>"
    )
    return body


def nvtx_section(data: ReportData, images: dict) -> str:
    parts = []
    for i, (path, summary) in enumerate(data.nvtx):
        shown = summary.assign(
            cpu_ms_mean=summary.cpu_ns_mean / 1e6,
            gpu_busy_ms_mean=summary.gpu_busy_ns_mean / 1e6,
            cpu_ms_total=summary.cpu_ns_total / 1e6,
        )
        cols = {
            "domain": ("domain", None),
            "name": ("range", None),
            "count": ("count", None),
            "cpu_ms_total": ("CPU ms total", ",.2f"),
            "cpu_ms_mean": ("CPU ms mean", ",.4f"),
            "gpu_busy_ms_mean": ("GPU busy ms mean", ",.4f"),
            "kernels_mean": ("kernels/range", ",.1f"),
        }
        try:
            rel = path.relative_to(data.sweep_dir)
        except ValueError:
            rel = path
        parts.append(
            f"<h3><code>{esc(rel)}</code></h3>"
            + img(
                f"nvtx{i}",
                images.get(f"nvtx{i}"),
                "NVTX range breakdown",
                "Mean CPU time vs GPU busy time per NVTX range name (bench.profiling).",
            )
            + table(shown.head(40), cols)
        )
    return "".join(parts)


def problems_section(data: ReportData) -> str:
    bad = data.problems.copy()
    if not len(bad):
        return "<p>Every point ran.</p>"
    bad["detail"] = bad["detail"].map(lambda d: None if is_missing(d) else (d if len(d) <= 400 else d[:400] + " …"))
    cols = {
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
    same = bad.apply(
        lambda r: not is_missing(r.log_signature) and str(r.log_signature).startswith(f"{r.reason}:"), axis=1
    )
    differs = bad[bad.log_signature.notna() & ~same]
    bad.loc[same, "log_signature"] = "(same as the classified reason)"
    note = ""
    if len(differs):
        note = (
            '<p class="note">For some points the server log matches a more specific failure signature today '
            "than the reason recorded at run time (column on the right): the recorded reason is kept.</p>"
        )
    return note + table(bad, cols, cell_class=lambda c, v: "bad" if c == "reason" else None, table_id="problems")


def effective_section(data: ReportData) -> str:
    eff = data.effective
    cols = {
        "label": ("point", None),
        "status": ("status", None),
        "draft_attention_backend": ("draft backend asked", None),
        "draft_attention_backend_ran": ("draft backend logged", None),
        "target_attention_backend_ran": ("target backend logged", None),
        "draft_kv_cache_dtype": ("draft KV asked", None),
        "kv_cache_dtype_ran": ("target KV (cache config)", None),
        "dcp_size": ("DCP asked", None),
        "dcp_size_ran": ("DCP ran", ".0f"),
        "block_size_ran": ("block size", ".0f"),
        "cudagraph_mode": ("CUDA graphs", None),
        "mismatch": ("mismatch flags", None),
    }
    flagged = int(eff.mismatch.notna().sum()) if len(eff) else 0
    head = (
        f'<p class="note">{flagged} point(s) ran with something else than asked: see the flags.</p>'
        if flagged
        else "<p>No point is flagged: where the server logged it, what ran is what was asked.</p>"
    )
    return (
        head + "<p class=\"muted\">Read back from each server's log and /metrics. vLLM logs the draft's "
        "attention backend only when it differs from the target's (– = not logged); the KV dtype read back is "
        "the target's cache config (the draft's KV dtype is not exported by vLLM).</p>"
        + table(
            eff,
            cols,
            cell_class=lambda c, v: "warn" if c == "mismatch" and not is_missing(v) else None,
            table_id="effective",
        )
    )


def provenance_section(data: ReportData) -> str:
    env = data.manifest.get("environment") or {}
    vllm = env.get("vllm") or {}
    git = env.get("suite_git") or {}
    sha = git.get("sha")
    if sha and not all(ch in "0123456789abcdef" for ch in str(sha).lower()):
        sha = f"{sha} (not a commit id: the sweep recorded an unresolved ref)"
    pairs = list(data.provenance.items()) + [
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
    text = data.manifest.get("profile_text")
    return (
        kv_table(pairs)
        + "<h3>Patch state</h3>"
        + table(fixes, {c: (c, None) for c in fixes.columns})
        + "<h3>Patch actions recorded in the vLLM install</h3>"
        + table(record, {c: (c, None) for c in record.columns})
        + (f"<details><summary>Profile file</summary><pre>{esc(text)}</pre></details>" if text else "")
    )


def render_html(data: ReportData, images: dict[str, bytes | None]) -> str:
    secs = [
        ("results", "Results", results_section(data)),
        ("throughput", "Throughput vs concurrency", throughput_section(data, images)),
        ("latency", "Latency percentiles", latency_section(data, images)),
        ("pareto", "Throughput–latency Pareto front", pareto_section(data, images)),
        ("acceptance", "Speculative decoding acceptance", acceptance_section(data, images)),
        ("heatmap", "Draft backend × draft KV dtype", heatmap_section(data, images)),
        ("roofline", "Speed of light (roofline model)", roofline_section(data, images)),
    ]
    if data.nvtx:
        secs.append(("nvtx", "NVTX range breakdown", nvtx_section(data, images)))
    secs += [
        ("problems", "Failed and skipped points", problems_section(data)),
        ("effective", "Effective configuration", effective_section(data)),
        ("provenance", "Provenance", provenance_section(data)),
    ]
    title = f"bench report: {data.provenance['profile']}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body>"
        + header(data)
        + nav([(sid, t) for sid, t, _ in secs])
        + "".join(section(sid, t, body) for sid, t, body in secs)
        + f'<p class="muted">Built by <code>python -m bench report</code> from {esc(data.sweep_dir.name)} '
        "alone.</p>" + f"<script>{IMG_CHECK_JS}</script></body></html>\n"
    )
