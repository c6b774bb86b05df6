"""The report's analysis: a results directory -> the tables the report shows (pure pandas, no plotting).

`collect` reads the results directory once and derives every table into a `ReportData`; bench.report.figures
draws from it and bench.report.html lays it out. Missing measurements stay NaN / None, never 0.
Just over 400 lines on purpose: every table the report shows is derived here, from one read, next to the others
it must agree with (the golden CSVs in tests/data check them together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.measure.failures import classify_log
from bench.profiling.nsys_analysis import summarize_ranges
from bench.profiling.step_shares import RANGE_COLUMNS, CaptureShares, shares_of
from bench.report.categories import category_table, has_workloads
from bench.report.dcp_view import dcp_rows
from bench.report.decision import DecisionView, sweep_view
from bench.report.request_views import latency_samples, read_raw, timelines
from bench.report.roofline import model_configs
from bench.report.roofline_check import step_facts
from bench.report.roofline_points import roofline
from bench.report.servers import server_table
from bench.report.speedup import with_speedups
from bench.report.tables import axis_columns, plain_points, points_table, provenance
from bench.results.records import Effective, EffectiveModel, PointRecord
from bench.results.store import SweepStore

SERIES_AXES = ["draft_attention_backend", "draft_kv_cache_dtype", "dcp_size"]
FACET_AXES = ["num_speculative_tokens", "input_len", "output_len"]
CONFIG_AXES = SERIES_AXES + FACET_AXES + ["concurrency"]
NUMERIC = [
    *("output_throughput", "per_user_output_throughput", "request_throughput"),
    *(f"{m}_{q}_ms" for m in ("ttft", "tpot", "itl") for q in ("p50", "p90", "p99")),
    *("e2e_p50_ms", "e2e_p99_ms", "errors", "acceptance_rate", "mean_acceptance_length"),
]
LATENCY_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL"}
EXTRA_COLUMNS = ["point_id", "itl_p90_ms", "server", "asked_rates", "trials", "phase", "log", "gpus", "full_input_len"]


def point_extras(records: dict[str, PointRecord]) -> pd.DataFrame:
    """What points_table leaves out and the report needs, one row per point id: ITL p90, the server arguments,
    the asked synthetic acceptance rates, trials, the GPUs the engine ran on (tensor x pipeline parallel: a
    loopback DCP group runs on one) and, for an emulated DCP rank (bench.models.dcp_emulation), the deployment's input
    length (the point's own is the rank's share)."""
    rows = []
    for pid, p in records.items():
        eng = p.config.engine
        settings = {**eng.server, **eng.axes}
        rows.append(
            {
                "point_id": pid,
                "itl_p90_ms": p.metrics.itl_ms.p90 if p.metrics and p.metrics.itl_ms else None,
                "server": eng.server,
                "asked_rates": eng.acceptance.get("rates") if eng.acceptance.get("mode") == "synthetic" else None,
                "trials": len(p.trials) or None,
                "phase": p.phase,
                "log": p.server.log,
                "gpus": eng.tensor_parallel_size() * int(settings.get("pipeline_parallel_size") or 1),
                "full_input_len": _full_input_len(p),
            }
        )
    return pd.DataFrame(rows, columns=EXTRA_COLUMNS)


def _full_input_len(p: PointRecord) -> int | None:
    full = p.config.emulation.full_shape if p.config.emulation else None
    return full.input_len if full else None


def varied_axes(points: pd.DataFrame) -> list[str]:
    """The configuration axes with more than one value in the sweep (all points, whatever their status), the
    server axes (bench/config/axes.py) included."""
    axes = CONFIG_AXES + axis_columns(points)
    return [a for a in axes if a in points and points[a].nunique(dropna=False) > 1]


def enrich(points: pd.DataFrame, extras: pd.DataFrame | None = None) -> pd.DataFrame:
    """points_table + extras, numeric metric columns as floats (None -> NaN), and strings naming each point by
    the axes that vary: `series` (draft backend / KV dtype, DCP and k), `shape` (concurrency, or the whole
    batch shape when input/output lengths vary) and `label` (both)."""
    df = points.copy()
    if extras is not None and len(extras):
        df = df.merge(extras, on="point_id", how="left")
    for col in NUMERIC:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else np.nan
    if "server" not in df:
        df["server"] = [{} for _ in range(len(df))]
    df["server"] = df["server"].map(lambda v: v if isinstance(v, dict) else {})
    varied = set(varied_axes(points))
    lens_vary = bool({"input_len", "output_len"} & varied)
    df["series"] = [series_label(r, varied) for r in df.itertuples()]
    df["shape"] = [
        f"{r.concurrency}x{r.input_len}x{r.output_len}" if lens_vary else f"c{r.concurrency}" for r in df.itertuples()
    ]
    if has_workloads(df):  # workloads other than the default: named by them (bench.report.categories)
        named = df.workload.notna()
        df.loc[named, "series"] = df.series[named] + " " + df.workload[named]
        df["shape"] = [_load_shape(r, lens_vary) for r in df.itertuples()]
    df["label"] = [f"{a} {b}" for a, b in zip(df["series"], df["shape"])]
    df["lengths"] = [lengths_label(r) for r in df.itertuples()]
    return df


TEXT_LENGTHS = "text workloads"


def lengths_label(row) -> str:
    """The input/output length a point's figures belong with: `in 8192 / out 256`, the deployment's input length
    for an emulated DCP rank (its own is the rank's share), TEXT_LENGTHS for a point without a fixed input length.
    Figures draw one panel per value and join no line across two."""
    full = getattr(row, "full_input_len", None)
    inp = _known(full)
    inp = inp if inp is not None else _known(row.input_len)
    if inp is None:
        return TEXT_LENGTHS
    out = _known(row.output_len)
    return f"in {inp} / out {out}" if out is not None else f"in {inp}"


def _known(value) -> int | None:
    """A length as an int; None when missing (None, NaN) or not a number."""
    return int(value) if isinstance(value, (int, float, np.integer, np.floating)) and value == value else None


def _load_shape(row, lens_vary: bool) -> str:
    """A point's load in a sweep with workloads: a text point's arrival (`c4`, `r8-b1-c4`), a random point's
    shape (with its arrival when paced)."""
    if pd.isna(row.input_len):
        return str(row.arrival)
    c, i, o = (int(v) for v in (row.concurrency, row.input_len, row.output_len))
    base = f"{c}x{i}x{o}" if lens_vary else f"c{c}"
    return f"{base} {row.arrival}" if isinstance(row.workload, str) and isinstance(row.arrival, str) else base


def series_label(row, varied: set[str]) -> str:
    no_spec = row.num_speculative_tokens == 0  # the baseline: no draft backend or KV to name
    parts = ["no-spec" if no_spec else f"{row.draft_attention_backend}/{row.draft_kv_cache_dtype}"]
    emulated = getattr(row, "dcp_emulated", None)
    if isinstance(emulated, (int, float)) and emulated == emulated:  # one DCP rank emulated on one GPU
        parts.append(f"dcp{int(emulated)}-emulated")
    elif "dcp_size" in varied or (row.dcp_size or 1) != 1:
        parts.append(f"dcp{row.dcp_size}")
    if "num_speculative_tokens" in varied:
        parts.append(f"k{row.num_speculative_tokens}")
    if isinstance(getattr(row, "server_axes", None), str):
        parts.append(row.server_axes)
    return " ".join(parts)


def ok_points(df: pd.DataFrame) -> pd.DataFrame:
    return df[df.status == "ok"].reset_index(drop=True)


def throughput_series(df: pd.DataFrame) -> pd.DataFrame:
    """Ok points with a measured output throughput, one row per point, ordered for line plots: output tok/s per
    GPU the engine ran on (`gpus`), per-user tok/s, their stated precision (relative 95% half-widths; the per-user
    figure is 1000 / mean TPOT, so its interval is the mean TPOT's), and `lengths` (bench.report.analysis
    .lengths_label), the panel each point belongs to."""
    cols = ["series", *SERIES_AXES, "dcp_emulated", *FACET_AXES, "lengths", "concurrency", "shape"]
    cols += ["output_throughput", "gpus", "output_throughput_per_gpu", "throughput_halfwidth"]
    cols += ["per_user_output_throughput", "tpot_halfwidth", "label"]
    cols += ["workload"] if "workload" in df and df.workload.notna().any() else []  # text workloads: own colors
    ok = ok_points(df)
    ok = ok[ok.output_throughput.notna() | ok.per_user_output_throughput.notna()].copy()
    gpus = pd.to_numeric(ok.get("gpus", pd.Series(1, index=ok.index)), errors="coerce").fillna(1)
    ok["gpus"] = gpus.astype(int)
    ok["output_throughput_per_gpu"] = ok.output_throughput / ok.gpus
    for c in ("throughput_halfwidth", "tpot_halfwidth", "dcp_emulated"):
        ok[c] = pd.to_numeric(ok[c], errors="coerce") if c in ok else np.nan
    return ok[cols].sort_values(["series", "concurrency", *FACET_AXES], kind="stable").reset_index(drop=True)


def latency_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per ok point: TTFT, TPOT and ITL p50/p90/p99 in ms (NaN where not measured)."""
    ok = ok_points(df)
    cols = ["label", "series", "concurrency"] + [f"{m}_{q}_ms" for m in LATENCY_METRICS for q in ("p50", "p90", "p99")]
    cols += ["point_id", "lengths", "shape", *SERIES_AXES, "dcp_emulated"]
    cols += ["workload"] if "workload" in df and df.workload.notna().any() else []  # text workloads: own colors
    for c in cols:
        if c not in ok:
            ok[c] = np.nan
    return ok[cols].reset_index(drop=True)


def pareto_mask(xs, ys, maximize_x: bool = True, maximize_y: bool = True) -> np.ndarray:
    """True where no other point is at least as good on both and strictly better on one. NaN never optimal."""
    x = np.asarray(xs, float) * (1 if maximize_x else -1)
    y = np.asarray(ys, float) * (1 if maximize_y else -1)
    valid = ~(np.isnan(x) | np.isnan(y))
    out = np.zeros(len(x), bool)
    for i in np.flatnonzero(valid):
        dominated = valid & (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        out[i] = not dominated.any()
    return out


def pareto_table(df: pd.DataFrame) -> pd.DataFrame:
    """Ok points with output tok/s, per-user tok/s and TPOT p50; `pareto_user`: optimal for (output tok/s max,
    per-user tok/s max); `pareto_tpot`: optimal for (output tok/s max, TPOT p50 min). Optimal among the points of
    the same input/output lengths (`lengths`) only: a 1k-input point does not dominate an 8k one."""
    cols = ["label", "series", *SERIES_AXES, "lengths", "concurrency", "shape", "output_throughput"]
    cols += ["per_user_output_throughput", "tpot_p50_ms"]
    out = ok_points(df)[cols].copy()
    out["pareto_user"] = False
    out["pareto_tpot"] = False
    for _, grp in out.groupby("lengths", sort=False):
        out.loc[grp.index, "pareto_user"] = pareto_mask(grp.per_user_output_throughput, grp.output_throughput)
        out.loc[grp.index, "pareto_tpot"] = pareto_mask(grp.tpot_p50_ms, grp.output_throughput, maximize_x=False)
    return out.reset_index(drop=True)


def acceptance_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per ok point: acceptance rate, mean acceptance length and per-position acceptance (pos1..posK)."""
    ok = ok_points(df)
    k = max([len(v) for v in ok.per_position_acceptance if isinstance(v, list)] or [0])
    cols = ["label", "series", *SERIES_AXES, *FACET_AXES, "lengths", "concurrency", "acceptance_rate"]
    cols += ["mean_acceptance_length"]
    out = ok[cols].copy()
    for i in range(k):
        out[f"pos{i + 1}"] = [
            v[i] if isinstance(v, list) and len(v) > i and v[i] is not None else np.nan
            for v in ok.per_position_acceptance
        ]
    out["asked_rates"] = ok.get("asked_rates", None)
    return out.reset_index(drop=True)


HEATMAP_COLUMNS = ["dcp_size", "draft_attention_backend", "draft_kv_cache_dtype", "concurrency", "value"]
HEATMAP_COLUMNS += ["best_label", "n_ok", "n_failed", "n_skipped", "note"]


def heatmap_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (DCP size, draft backend, draft KV dtype) cell: the best output tok/s among the cell's ok
    points at the largest concurrency any ok point ran at (`value`, NaN if none) and, when there is none, why (`note`:
    the failed / skipped reasons, or which concurrencies did run)."""
    if not len(df) or df.concurrency.isna().all():  # (text workloads paced without a cap have no concurrency)
        return pd.DataFrame(columns=HEATMAP_COLUMNS)
    ran = df[(df.status == "ok") & df.output_throughput.notna()].concurrency.dropna()
    # the largest concurrency that some point ran at: one failed or skipped point above it (an OOM at 64 users)
    # would otherwise blank every cell (found in review)
    top = int(ran.max() if len(ran) else df.concurrency.max())
    cells = df.groupby(["dcp_size", "draft_attention_backend", "draft_kv_cache_dtype"], sort=False, dropna=False)
    rows = [_heatmap_cell(key, cell, top) for key, cell in cells]
    return pd.DataFrame(rows, columns=HEATMAP_COLUMNS)


def _heatmap_cell(key: tuple, cell: pd.DataFrame, top: int) -> dict:
    at = cell[(cell.status == "ok") & (cell.concurrency == top) & cell.output_throughput.notna()]
    value, best, note = np.nan, None, None
    if len(at):
        i = at.output_throughput.idxmax()
        value, best = float(at.output_throughput[i]), at.label[i]
    else:
        note = _why_empty(cell, top)
    dcp, backend, kv = key
    return {
        "dcp_size": dcp,
        "draft_attention_backend": backend,
        "draft_kv_cache_dtype": kv,
        "concurrency": top,
        "value": value,
        "best_label": best,
        "n_ok": int((cell.status == "ok").sum()),
        "n_failed": int((cell.status == "failed").sum()),
        "n_skipped": int((cell.status == "skipped").sum()),
        "note": note,
    }


def _why_empty(cell: pd.DataFrame, top: int) -> str:
    """Why a heatmap cell has no ok point at the largest concurrency: the failed / skipped reasons there (or
    anywhere in the cell), else the concurrencies that did run."""
    bad = cell[cell.status != "ok"]
    bad_top = bad[bad.concurrency == top]
    reasons = (bad_top if len(bad_top) else bad).apply(lambda r: f"{r.status}: {r.reason or '?'}", axis=1)
    if len(reasons):
        return "; ".join(sorted(set(reasons)))
    ran = sorted(cell[cell.status == "ok"].concurrency.unique())
    return f"no ok point at concurrency {top}" + (f" (ran at {', '.join(map(str, ran))})" if ran else "")


def problems_table(df: pd.DataFrame, sweep_dir: Path | None = None) -> pd.DataFrame:
    """Failed and skipped points with their classified reason; `log_signature`: what the current failure
    signatures find in the engine's server log (may name the root cause when the recorded reason is generic)."""
    bad = df[df.status != "ok"].copy()
    cols = ["point_id", "engine_id", *SERIES_AXES, *FACET_AXES, "concurrency", "status", "reason", "detail"]
    cols += ["log_signature"]
    bad["log_signature"] = None
    if sweep_dir is not None and len(bad):
        store = SweepStore(sweep_dir)
        sigs = {eng: _log_signature(store.log_path(eng)) for eng in bad.engine_id.dropna().unique()}
        bad["log_signature"] = bad.engine_id.map(sigs)
    return bad[cols].reset_index(drop=True)


def _log_signature(path: Path) -> str | None:
    if not path.is_file():
        return None
    found = classify_log(path.read_text(errors="replace"))
    return f"{found[0]}: {found[1]}" if found else None


EFFECTIVE_COLUMNS = ["engine", "engine_id", "points", "source", "draft_backend_asked", "draft_backend_ran"]
EFFECTIVE_COLUMNS += ["draft_kv_asked", "draft_kv_ran", "draft_block_size", "target_backend_asked"]
EFFECTIVE_COLUMNS += ["target_backend_ran", "target_kv_asked", "target_kv_ran", "target_block_size"]
EFFECTIVE_COLUMNS += ["cudagraph_mode", "dcp_asked", "dcp_ran", "runner", "vllm_version", "mismatch"]


def effective_table(records: dict[str, PointRecord]) -> pd.DataFrame:
    """One row per engine config whose server started: what it asked vs what ran, from the engine's record
    (bench.profiling.effective_record) or, for results without one, the server log (`source`), and the
    mismatch flags of its points. A KV dtype that ran reads "configured (storage)", e.g. "auto (bfloat16)"."""
    by_engine: dict[str, list[PointRecord]] = {}
    for p in records.values():
        if p.effective is not None:
            by_engine.setdefault(p.engine_id, []).append(p)
    df = pd.DataFrame([_effective_row(ps) for ps in by_engine.values()], columns=EFFECTIVE_COLUMNS)
    order = ["draft_backend_asked", "draft_kv_asked", "dcp_asked", "engine"]
    return df.sort_values(order, kind="stable").reset_index(drop=True)


def _effective_row(points: list[PointRecord]) -> dict:
    p = points[0]
    eng, e = p.config.engine, p.effective or Effective()
    spec = bool(eng.num_speculative_tokens)
    target, draft = e.target or EffectiveModel(), e.draft or EffectiveModel()
    flags = sorted({f for q in points for f in q.mismatch})
    return {
        "engine": p.label.get("engine"),
        "engine_id": p.engine_id,
        "points": len(points),
        "source": e.source or "server log",
        "draft_backend_asked": eng.draft_attention_backend if spec else None,
        "draft_backend_ran": (draft.backend or e.draft_attention_backend) if spec else None,
        "draft_kv_asked": eng.draft_kv_cache_dtype if spec else None,
        "draft_kv_ran": draft.kv_ran(),
        "draft_block_size": draft.block_size,
        "target_backend_asked": eng.server.get("attention_backend") or "auto",
        "target_backend_ran": target.backend or e.target_attention_backend,
        "target_kv_asked": eng.server.get("kv_cache_dtype") or "auto",
        "target_kv_ran": target.kv_ran() or e.kv_cache_dtype,
        "target_block_size": target.block_size or e.block_size,
        "cudagraph_mode": e.cudagraph_mode,
        "dcp_asked": eng.dcp_size,
        "dcp_ran": e.dcp_size,
        "runner": " ".join(str(v).rsplit(".", 1)[-1] for v in (e.runner, e.runner_class) if v) or None,
        "vllm_version": e.vllm_version,
        "mismatch": "; ".join(flags) or None,
    }


def summary_counts(df: pd.DataFrame) -> dict:
    ok = ok_points(df)
    return {
        "points": len(df),
        "ok": len(ok),
        "failed": int((df.status == "failed").sum()),
        "skipped": int((df.status == "skipped").sum()),
        "varied": varied_axes(df),
    }


SUMMARY_KEYS = {"name", "count", "cpu_ns_total", "cpu_ns_mean", "gpu_busy_ns_mean"}
RANGES_KEYS = {"name", "cpu_ns", "gpu_busy_ns", "gpu_sum_ns", "gpu_span_ns", "launches"}


ProfilingTables = dict[Path, dict[str, tuple[Path, pd.DataFrame]]]  # folder -> kind -> (file, table)


def profiling_tables(sweep_dir: Path) -> ProfilingTables:
    """Each folder of profiling tables (profile/**.parquet, where `bench profile` writes its analyses), read once:
    its summary table (nsys_summary / summary) and its ranges table, by kind; other tables (kernels) are ignored."""
    by_dir: ProfilingTables = {}
    for path in sorted(Path(sweep_dir).glob("profile/**/*.parquet")):
        try:
            table = pd.read_parquet(path)
        except (OSError, ValueError):
            continue
        cols = set(table.columns)
        kind = "summary" if cols >= SUMMARY_KEYS else "ranges" if cols >= RANGES_KEYS else None
        if kind:
            by_dir.setdefault(path.parent, {}).setdefault(kind, (path, table))
    return by_dir


def nvtx_summaries(tables: ProfilingTables) -> list[tuple[Path, pd.DataFrame]]:
    """(file, per-range-name summary) per profiling folder: its summary table as is, or its ranges table
    summarized with bench.profiling.nsys_analysis.summarize_ranges. Empty when there are none, and the HTML then
    has no NVTX section."""
    return [found.get("summary") or _summarized(*found["ranges"]) for _, found in sorted(tables.items())]


def _summarized(path: Path, ranges: pd.DataFrame) -> tuple[Path, pd.DataFrame]:
    """A ranges table summarized per range name; the columns an older export lacks (domain, API calls,
    kernels) are filled with their neutral value so the summary does not fail on them."""
    defaults = {"domain": "", "api_calls": 0, "kernels": 0}
    ranges = ranges.assign(**{c: v for c, v in defaults.items() if c not in ranges})
    return path, summarize_ranges(ranges)


def nvtx_step_shares(tables: ProfilingTables) -> dict[Path, CaptureShares]:
    """Decode-step shares (bench.profiling.step_shares) per profiling folder whose ranges table has threads and
    times (an nsys capture's analysis) and decode steps, keyed by the folder."""
    out = {}
    for folder, found in sorted(tables.items()):
        ranges = found.get("ranges", (None, None))[1]
        if ranges is None or not set(RANGE_COLUMNS) <= set(ranges.columns):
            continue
        shares = shares_of(ranges[RANGE_COLUMNS], folder)
        if shares.table is not None:
            out[folder] = shares
    return out


@dataclass
class ReportData:
    """Every table the report shows, computed from the results directory alone."""

    sweep_dir: Path
    manifest: dict
    provenance: dict
    points: pd.DataFrame
    counts: dict
    throughput: pd.DataFrame
    latency: pd.DataFrame
    pareto: pd.DataFrame
    acceptance: pd.DataFrame
    heatmap: pd.DataFrame
    problems: pd.DataFrame
    effective: pd.DataFrame
    roofline: pd.DataFrame
    roofline_inputs: pd.DataFrame
    roofline_notes: list[str]
    nvtx: list[tuple[Path, pd.DataFrame]] = field(default_factory=list)
    step_shares: dict[Path, CaptureShares] = field(default_factory=dict)  # by profiling folder
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)  # acceptance per workload and category
    dcp: pd.DataFrame = field(default_factory=pd.DataFrame)  # the DCP view (bench.report.dcp_view)
    servers: pd.DataFrame = field(default_factory=pd.DataFrame)  # start-up and memory (bench.report.servers)
    decision: DecisionView | None = None  # the view the page opens with (bench.report.decision)
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)  # per point: TPOT and ITL samples (request_views)
    timelines: pd.DataFrame = field(default_factory=pd.DataFrame)  # per point: tok/s over the window (request_views)


def collect(
    sweep_dir: Path,
    points: pd.DataFrame | None = None,
    servers: pd.DataFrame | None = None,
    view: DecisionView | None = None,
) -> ReportData:
    """Every table of the report; `points`, `servers`, `view`: an already read points_table / server_table / built
    decision view of the same directory."""
    sweep_dir = Path(sweep_dir)
    store = SweepStore(sweep_dir)
    manifest = store.manifest()
    records = store.records()
    raw = read_raw(sweep_dir, records)  # once: the latency samples, the timelines and the prefill overlap
    df = enrich(points_table(sweep_dir) if points is None else points, point_extras(records))
    df = with_speedups(df)  # over the k = 0 baseline, when the sweep has one
    models = model_configs(sweep_dir)
    roof, inputs, notes = roofline(df, manifest, models, step_facts(sweep_dir, records, raw))
    profiling = profiling_tables(sweep_dir)
    if servers is None:
        servers = server_table(sweep_dir, records)
    return ReportData(
        sweep_dir=sweep_dir,
        manifest=manifest,
        provenance=provenance(sweep_dir),
        points=df,
        counts=summary_counts(df),
        throughput=throughput_series(df),
        latency=latency_table(df),
        pareto=pareto_table(df),
        acceptance=acceptance_table(df),
        heatmap=heatmap_table(plain_points(df)),
        problems=problems_table(df, sweep_dir),
        effective=effective_table(records),
        roofline=roof,
        roofline_inputs=inputs,
        roofline_notes=notes,
        nvtx=nvtx_summaries(profiling),
        step_shares=nvtx_step_shares(profiling),
        categories=category_table(df),
        dcp=dcp_rows(df, models),
        servers=servers,
        decision=view or sweep_view(sweep_dir, df, servers),
        samples=latency_samples(records, raw),
        timelines=timelines(records, raw),
    )
