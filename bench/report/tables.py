"""Pure analysis: a results directory -> tidy pandas tables. No printing, no plotting."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.config import axes as server_axes
from bench.models.dcp_comm import chunked_prefill_workspace
from bench.results.environment import point_sessions
from bench.results.records import (
    Effective,
    EngineSettings,
    Metrics,
    PointRecord,
    Precision,
    Served,
    SpecDecode,
    Steady,
    Summary,
    WorkloadRecord,
)
from bench.results.store import SweepStore

POINT_COLUMNS = [
    "point_id",
    "engine_id",
    "status",
    "reason",
    "draft_attention_backend",
    "draft_kv_cache_dtype",
    "dcp_size",
    "dcp_emulated",  # N: one rank of DCP-N emulated on one GPU (input_len is its share); None: not emulated
    "dcp_loopback",  # True: DCP N as rank 0 of N identical ranks on a loopback group (bench/profiling/dcp_loopback)
    "num_speculative_tokens",
    "server_axes",  # the server axes' part of the engine label (bench/config/axes.py), None without; each has a column too
    "engine_base",  # hash of the target, its weights and the [server] settings (EngineSettings.base_id)
    "concurrency",
    "input_len",
    "output_len",
    "acceptance_mode",
    "window",  # "steady": the headline figures are the steady span's (bench.measure.window); "whole": the whole window's
    "output_throughput",
    "output_throughput_whole",  # over the whole measured window (ramp-up and drain included), labelled apart
    "throughput_halfwidth",  # relative 95% half-width of the steady output tok/s (ratio over whole cycles)
    "tpot_halfwidth",
    "step_p50_ms",  # the engine's step in the steady span: the gap between a request's successive chunks
    "steady_fraction",  # the steady span's share of the measured window
    "steady_cycles",  # whole cycles of the loop under the headline (bench.measure.window); None: an older record
    "steady_short",  # fewer than 3 whole cycles: no precision, never a report's best figure
    "precision_units",  # the units the +- is computed over (blocks or whole-cycle sub-windows)
    "within_block_cv",  # sub-windows about their block's rate (bench.measure.window.precision)
    "between_block_cv",  # a start's blocks, each at its own phase, about the headline
    "target",  # the target model as the profile named it ("tiny", "kimi-rank:tp=8,...", a model id)
    "weights",  # "dummy", "zero-final-norm" or "real"
    "prefix_cache_hit_rate",
    "served_token_ratio",  # vLLM's generated tokens / the client's received ones over the windows (1: they agree)
    "tpot_client_over_vllm",  # the client's mean TPOT / vLLM's (request_time_per_output_token) over the windows
    "ttft_client_minus_vllm_ms",  # the client's mean TTFT - vLLM's (from its front end's arrival): the client's share
    "contamination",  # what ran inside the window besides the load (compile, preemption...), after re-measures
    "contamination_checked",  # where it was looked for ("server log, preemption counter"); None: older record
    "per_user_output_throughput",
    "request_throughput",
    "ttft_p50_ms",
    "ttft_window",  # set only where the TTFT's window differs from the headline's ("whole" under a steady headline)
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "errors",
    "acceptance_rate",
    "mean_acceptance_length",
    "per_position_acceptance",
    "target_attention_backend_ran",
    "draft_attention_backend_ran",
    "kv_cache_dtype_ran",
    "cudagraph_mode",
    "kv_cache_tokens",  # vLLM's "GPU KV cache size" (under DCP N: the group's tokens, N x the rank's local slots)
    "mla_prefill_workspace",  # rows of vLLM's MLA chunked-prefill workspace (bench.models.dcp_comm), None when unknown
    "mismatch",
    "detail",
    "workload",  # None for the default workload (random ids at fixed concurrency); else `<id> <sampling>`
    "load",  # the point's load label (the batch shape, or workload, sampling and arrival)
    "arrival",
    "categories",  # bench.measure.metrics.category_metrics rows (bench.report.categories)
]


def _client_against_vllm(served: Served | None) -> dict:
    """The client's mean TPOT over vLLM's, and its mean TTFT less vLLM's, over the same windows (None: unknown)."""
    s = served or Served()
    return {
        "tpot_client_over_vllm": s.tpot_ms_client / s.tpot_ms_vllm if s.tpot_ms_client and s.tpot_ms_vllm else None,
        "ttft_client_minus_vllm_ms": (
            s.ttft_ms_client - s.ttft_ms_vllm if s.ttft_ms_client is not None and s.ttft_ms_vllm is not None else None
        ),
    }


def _workspace(eng: EngineSettings, e: Effective) -> int | None:
    """vLLM's MLA chunked-prefill workspace from the server's max_model_len, max_num_seqs and the block size it ran
    with (configured, else unknown: vLLM's defaults depend on the model and the platform)."""
    settings = {**eng.server, **eng.axes}
    block = e.block_size or settings.get("block_size")
    if not (settings.get("max_model_len") and settings.get("max_num_seqs") and block):
        return None
    return chunked_prefill_workspace(int(settings["max_model_len"]), int(settings["max_num_seqs"]), int(block))


def point_row(p: PointRecord) -> dict:
    cfg, eng = p.config, p.config.engine
    m, s, e = p.metrics or Metrics(), p.spec_decode or SpecDecode(), p.effective or Effective()
    precision, steady = m.precision or Precision(), m.steady or Steady()

    def pct(summary: Summary | None, q: str) -> float | None:
        return getattr(summary, q) if summary is not None else None

    shape = cfg.shape  # a text point has none
    sampling = cfg.workload.sampling if cfg.workload else None
    arrival = cfg.workload.arrival if cfg.workload else None

    return {
        "point_id": p.point_id,
        "engine_id": p.engine_id,
        "status": p.status,
        "reason": p.reason,
        "draft_attention_backend": eng.draft_attention_backend,
        "draft_kv_cache_dtype": eng.draft_kv_cache_dtype,
        "dcp_size": eng.dcp_size,
        "dcp_emulated": cfg.emulation.dcp_size if cfg.emulation else None,
        # bench.config.plan.EngineConfig.dcp_loopback's rule: DCP N > 1 on TP 1
        "dcp_loopback": eng.dcp_size > 1 and eng.tensor_parallel_size() == 1,
        "num_speculative_tokens": eng.num_speculative_tokens,
        "server_axes": server_axes.label(sorted(eng.axes.items())) or None,
        "engine_base": eng.base_id(),
        **{axis_column(k): v for k, v in eng.axes.items()},
        "concurrency": shape.concurrency if shape else arrival.max_concurrency if arrival else None,
        "input_len": shape.input_len if shape else None,
        "output_len": shape.output_len if shape else sampling.max_tokens if sampling else None,
        "acceptance_mode": eng.acceptance["mode"],
        "window": m.window,  # records before the steady window: the whole window (bench.results.migrate)
        "output_throughput": m.output_throughput,
        "output_throughput_whole": m.whole_window().output_throughput,
        "throughput_halfwidth": precision.output_throughput_halfwidth,
        "tpot_halfwidth": precision.tpot_halfwidth,
        "step_p50_ms": pct(m.step_ms, "p50"),
        "steady_fraction": steady.fraction_of_window,
        "steady_cycles": steady.cycles,
        "steady_short": bool(steady.short),
        "precision_units": precision.sub_windows,
        "within_block_cv": precision.within_block_cv,
        "between_block_cv": precision.between_block_cv,
        "target": eng.target,
        "weights": eng.weights,
        "prefix_cache_hit_rate": p.cache.prefix_cache_hit_rate if p.cache else None,
        "served_token_ratio": p.served.token_ratio if p.served else None,
        **_client_against_vllm(p.served),
        "contamination": ", ".join(sorted({event.kind for event in p.contamination})) or None,
        "contamination_checked": ", ".join(p.contamination_checked) if p.contamination_checked is not None else None,
        "per_user_output_throughput": m.per_user_output_throughput,
        "request_throughput": m.request_throughput,
        "ttft_p50_ms": pct(m.ttft_ms, "p50"),
        # where the TTFT's window is not the headline's (bench.measure.metrics: a steady span into which no request was sent)
        "ttft_window": steady.ttft_window if steady.ttft_window != m.window else None,
        "ttft_p90_ms": pct(m.ttft_ms, "p90"),
        "ttft_p99_ms": pct(m.ttft_ms, "p99"),
        "tpot_p50_ms": pct(m.tpot_ms, "p50"),
        "tpot_p90_ms": pct(m.tpot_ms, "p90"),
        "tpot_p99_ms": pct(m.tpot_ms, "p99"),
        "itl_p50_ms": pct(m.itl_ms, "p50"),
        "itl_p99_ms": pct(m.itl_ms, "p99"),
        "e2e_p50_ms": pct(m.e2e_ms, "p50"),
        "e2e_p99_ms": pct(m.e2e_ms, "p99"),
        "errors": m.errors,
        "acceptance_rate": s.acceptance_rate,
        "mean_acceptance_length": s.mean_acceptance_length,
        "per_position_acceptance": s.per_position_acceptance,
        "target_attention_backend_ran": e.target_attention_backend,
        "draft_attention_backend_ran": e.draft_attention_backend,
        "kv_cache_dtype_ran": e.kv_cache_dtype,
        "cudagraph_mode": e.cudagraph_mode,
        "kv_cache_tokens": e.kv_cache_tokens,
        "mla_prefill_workspace": _workspace(eng, e),
        "mismatch": "; ".join(p.mismatch) or None,
        "detail": p.detail,
        **_workload_columns(p),
    }


def _workload_columns(p: PointRecord) -> dict:
    w = p.workload or WorkloadRecord()
    return {
        "workload": None if not p.config.workload else f"{w.id} {w.sampling_label or ''}".strip(),
        "load": p.label.get("shape"),
        "arrival": w.arrival.label if w.arrival else None,
        "categories": p.categories,
    }


AXIS_PREFIX = "axis."


def axis_column(name: str) -> str:
    """The points table's column of a server axis (bench/config/axes.py)."""
    return AXIS_PREFIX + name


def axis_columns(points: pd.DataFrame) -> list[str]:
    """The server-axis columns a points table has, in name order."""
    return sorted(c for c in points.columns if c.startswith(AXIS_PREFIX))


def points_table(sweep_dir: Path) -> pd.DataFrame:
    rows = [point_row(p) for p in SweepStore(sweep_dir).records().values()]
    extra = sorted({k for r in rows for k in r if k.startswith(AXIS_PREFIX)})
    df = pd.DataFrame(rows, columns=POINT_COLUMNS + extra)
    return df.sort_values(
        [
            "draft_attention_backend",
            "draft_kv_cache_dtype",
            "dcp_size",
            "num_speculative_tokens",
            *extra,
            "concurrency",
            "input_len",
            "output_len",
        ],
        kind="stable",
    ).reset_index(drop=True)


def provenance(sweep_dir: Path) -> dict:
    m = SweepStore(sweep_dir).manifest()
    env, vllm = m["environment"], m["environment"].get("vllm", {})
    machine = env["machine"]
    return {
        "profile": m["profile"]["name"],
        "created": m["created"],
        "vllm": f"{vllm.get('vllm_version')} ({vllm.get('distribution')}) at {vllm.get('vllm_root')}",
        "patches": ", ".join(f"{f['fix']}: {f['state']}" for f in vllm.get("fixes", [])) or vllm.get("problem"),
        "machine": (
            f"{machine['gpus']} x {machine['gpu_name']} ({machine['arch']}, driver {machine['driver']})"
            if machine["platform"] == "gpu"
            else f"CPU: {machine['cpu']} ({machine['cpu_count']} cores)"
        ),
        "bench": f"{env['bench_version']} git {(env['suite_git'] or {}).get('sha') or '?'}"
        f"{' (dirty)' if (env['suite_git'] or {}).get('dirty') else ''}",
        "python": env["python"],
        **({"sessions": sessions_line(m, SweepStore(sweep_dir).records())} if len(m.get("sessions") or []) > 1 else {}),
    }


def sessions_line(manifest: dict, points: dict[str, PointRecord]) -> str:
    """The sessions that measured this directory's points (a resume appends one), each with its time, the suite's
    commit, the driver and how many points it measured (a point belongs to the last session started before it)."""
    sessions = manifest["sessions"]
    counts = [0] * len(sessions)
    for i in point_sessions(manifest, points).values():
        counts[i] += 1
    parts = []
    for s, n in zip(sessions, counts, strict=True):
        sha = (s.get("suite_git") or {}).get("sha") or "?"
        driver = (s.get("machine") or {}).get("driver")
        parts.append(f"{s.get('time')} git {sha}{f' driver {driver}' if driver else ''} ({n} points)")
    return f"{len(sessions)}: " + "; ".join(parts)


def plain_points(df: pd.DataFrame) -> pd.DataFrame:
    """The points that are not an emulated DCP rank (bench.models.dcp_emulation): one rank at 1/N of the context is not
    comparable cell by cell with the plain ranks (the heatmap and the headline speedup leave them out)."""
    return df[df.dcp_emulated.isna()] if "dcp_emulated" in df else df
