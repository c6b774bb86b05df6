"""Pure analysis: a results directory -> tidy pandas tables. No printing, no plotting."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench import axes as server_axes
from bench.store import SweepStore

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
    "server_axes",  # the server axes' part of the engine label (bench/axes.py), None without; each has a column too
    "concurrency",
    "input_len",
    "output_len",
    "acceptance_mode",
    "window",  # "steady": the headline figures are the steady span's (bench.window); "whole": the whole window's
    "output_throughput",
    "output_throughput_whole",  # over the whole measured window (ramp-up and drain included), labelled apart
    "throughput_halfwidth",  # relative 95% half-width of the steady output tok/s (sub-window batch means)
    "tpot_halfwidth",
    "step_p50_ms",  # the engine's step in the steady span: the gap between a request's successive chunks
    "steady_fraction",  # the steady span's share of the measured window
    "prefix_cache_hit_rate",
    "contamination",  # what ran inside the window besides the load (compile, preemption...), after re-measures
    "contamination_checked",  # where it was looked for ("server log, preemption counter"); None: older record
    "per_user_output_throughput",
    "request_throughput",
    "ttft_p50_ms",
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
    "mismatch",
    "detail",
    "workload",  # None for the default workload (random ids at fixed concurrency); else `<id> <sampling>`
    "load",  # the point's load label (the batch shape, or workload, sampling and arrival)
    "arrival",
    "categories",  # bench.metrics.category_metrics rows (bench.report.categories)
]


def point_row(p: dict) -> dict:
    cfg, eng = p["config"], p["config"]["engine"]
    m, s, e = p.get("metrics") or {}, p.get("spec_decode") or {}, p.get("effective") or {}

    def pct(metric, q):
        return (m.get(metric) or {}).get(q)

    shape, workload = cfg.get("shape") or {}, cfg.get("workload") or {}  # a text point has no shape
    arrival = workload.get("arrival") or {}

    return {
        "point_id": p["point_id"],
        "engine_id": p["engine_id"],
        "status": p["status"],
        "reason": p.get("reason"),
        "draft_attention_backend": eng["draft_attention_backend"],
        "draft_kv_cache_dtype": eng["draft_kv_cache_dtype"],
        "dcp_size": eng["dcp_size"],
        "dcp_emulated": (cfg.get("emulation") or {}).get("dcp_size"),
        "dcp_loopback": eng["dcp_size"] > 1  # bench.plan.EngineConfig.dcp_loopback's rule: DCP N > 1 on TP 1
        and int({**(eng.get("server") or {}), **(eng.get("axes") or {})}.get("tensor_parallel_size", 1)) == 1,
        "num_speculative_tokens": eng["num_speculative_tokens"],
        "server_axes": server_axes.label(sorted((eng.get("axes") or {}).items())) or None,
        **{axis_column(k): v for k, v in (eng.get("axes") or {}).items()},
        "concurrency": shape.get("concurrency", arrival.get("max_concurrency")),
        "input_len": shape.get("input_len"),
        "output_len": shape.get("output_len", (workload.get("sampling") or {}).get("max_tokens")),
        "acceptance_mode": eng["acceptance"]["mode"],
        "window": m.get("window", "whole"),  # records before the steady window: the whole window
        "output_throughput": m.get("output_throughput"),
        "output_throughput_whole": (m.get("whole") or {}).get("output_throughput", m.get("output_throughput")),
        "throughput_halfwidth": (m.get("precision") or {}).get("output_throughput_halfwidth"),
        "tpot_halfwidth": (m.get("precision") or {}).get("tpot_halfwidth"),
        "step_p50_ms": (m.get("step_ms") or {}).get("p50"),
        "steady_fraction": (m.get("steady") or {}).get("fraction_of_window"),
        "prefix_cache_hit_rate": (p.get("cache") or {}).get("prefix_cache_hit_rate"),
        "contamination": ", ".join(sorted({e["kind"] for e in p.get("contamination") or []})) or None,
        "contamination_checked": ", ".join(p["contamination_checked"]) if "contamination_checked" in p else None,
        "per_user_output_throughput": m.get("per_user_output_throughput"),
        "request_throughput": m.get("request_throughput"),
        "ttft_p50_ms": pct("ttft_ms", "p50"),
        "ttft_p90_ms": pct("ttft_ms", "p90"),
        "ttft_p99_ms": pct("ttft_ms", "p99"),
        "tpot_p50_ms": pct("tpot_ms", "p50"),
        "tpot_p90_ms": pct("tpot_ms", "p90"),
        "tpot_p99_ms": pct("tpot_ms", "p99"),
        "itl_p50_ms": pct("itl_ms", "p50"),
        "itl_p99_ms": pct("itl_ms", "p99"),
        "e2e_p50_ms": pct("e2e_ms", "p50"),
        "e2e_p99_ms": pct("e2e_ms", "p99"),
        "errors": m.get("errors"),
        "acceptance_rate": s.get("acceptance_rate"),
        "mean_acceptance_length": s.get("mean_acceptance_length"),
        "per_position_acceptance": s.get("per_position_acceptance"),
        "target_attention_backend_ran": e.get("target_attention_backend"),
        "draft_attention_backend_ran": e.get("draft_attention_backend"),
        "kv_cache_dtype_ran": e.get("kv_cache_dtype"),
        "cudagraph_mode": e.get("cudagraph_mode"),
        "kv_cache_tokens": e.get("kv_cache_tokens"),
        "mismatch": "; ".join(p.get("mismatch") or []) or None,
        "detail": p.get("detail"),
        **_workload_columns(p),
    }


def _workload_columns(p: dict) -> dict:
    w = p.get("workload") or {}
    default = not p["config"].get("workload")
    return {
        "workload": None if default else f"{w.get('id')} {w.get('sampling_label') or ''}".strip(),
        "load": (p.get("label") or {}).get("shape"),
        "arrival": (w.get("arrival") or {}).get("label"),
        "categories": p.get("categories"),
    }


AXIS_PREFIX = "axis."


def axis_column(name: str) -> str:
    """The points table's column of a server axis (bench/axes.py)."""
    return AXIS_PREFIX + name


def axis_columns(points: pd.DataFrame) -> list[str]:
    """The server-axis columns a points table has, in name order."""
    return sorted(c for c in points.columns if c.startswith(AXIS_PREFIX))


def points_table(sweep_dir: Path) -> pd.DataFrame:
    rows = [point_row(p) for p in SweepStore(sweep_dir).points().values()]
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
    }


def plain_points(df: pd.DataFrame) -> pd.DataFrame:
    """The points that are not an emulated DCP rank (bench.dcp_emulation): one rank at 1/N of the context is not
    comparable cell by cell with the plain ranks (the heatmap and the headline speedup leave them out)."""
    return df[df.dcp_emulated.isna()] if "dcp_emulated" in df else df
