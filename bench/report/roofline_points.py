"""The roofline model (bench.report.roofline) applied to a sweep: per ok point the bandwidth bound on decode
tok/s and the achieved fraction of it, the table of every model input, and notes on why there is no bound."""

from __future__ import annotations

import math

import pandas as pd

from bench.report.roofline import (
    draft_fc_params,
    draft_pass_params,
    gpu_bandwidth,
    linear_bytes,
    step_bytes,
    target_weight_params,
)

STEP_PARTS = [
    "target_weight_bytes",
    "draft_weight_bytes",
    "target_kv_bytes",
    "draft_kv_bytes",
    "bytes_per_step_per_gpu",
]
ROOFLINE_COLUMNS = ["point_id", "label", "concurrency", "input_len", "output_len", "context_len", "tp", "dcp_size"]
ROOFLINE_COLUMNS += ["num_speculative_tokens", "target_kv_dtype", "draft_kv_cache_dtype", "mean_acceptance_length"]
ROOFLINE_COLUMNS += ["tokens_per_step", *STEP_PARTS, "bandwidth_bytes_s", "max_output_tok_s", "output_throughput"]
ROOFLINE_COLUMNS += ["fraction_of_max", "uniform_experts_read", "bytes_per_step_uniform", "max_output_tok_s_uniform"]
ROOFLINE_COLUMNS += ["fraction_of_max_uniform"]


def roofline(
    points: pd.DataFrame, manifest: dict, models: dict[str, tuple[dict | None, dict | None]]
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(per-point roofline table, model inputs table, notes). `models`: per engine id, the (target, draft)
    configs the sweep stored (bench.report.roofline.model_configs). Only ok points whose engine has both configs
    and a measured mean acceptance length get a row; the notes say why nothing could be computed (unknown GPU
    or model configs)."""
    notes: list[str] = []
    machine = (manifest.get("environment") or {}).get("machine") or {}
    known: dict[str, tuple[dict, dict]] = {engine: (t, d) for engine, (t, d) in models.items() if t and d}
    first = next(iter(known), None)
    target, draft = known[first] if first else (None, None)
    source = f"models/{first}/ (target.json, draft.json)" if first else "unknown: not stored with these results"
    bw = gpu_bandwidth(machine.get("gpu_name")) if machine.get("platform") == "gpu" else None
    inputs = model_inputs_table(target, draft, source, machine, bw)
    if machine.get("platform") != "gpu":
        notes.append("CPU run: memory bandwidth unknown to this table; no roofline.")
    elif bw is None:
        notes.append(f"GPU {machine.get('gpu_name')!r} is not in the bandwidth table; no roofline.")
    if not known:
        notes.append("model configs unknown (the results hold no models/<engine id>/ configs); no roofline.")
    elif len({repr(pair) for pair in known.values()}) > 1:
        notes.append(f"the engine configs ran different models; the inputs table shows engine {first}'s.")
    if bw is None or not known:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS), inputs, notes
    ok = points[points.status == "ok"]
    rows = [_point_row(r, *known[r.engine_id], bw[0]) if r.engine_id in known else None for r in ok.itertuples()]
    missing = sum(row is None for row in rows)
    if missing:
        notes.append(f"{missing} ok point(s) have no measured mean acceptance length or no stored configs: left out.")
    if not len(ok):
        notes.append("no ok points: nothing to compare with the roofline.")
    return pd.DataFrame([row for row in rows if row is not None], columns=ROOFLINE_COLUMNS), inputs, notes


def _point_row(r, target: dict, draft: dict, bandwidth: float) -> dict | None:
    """One ok point's bound (top-k and uniform routing) and achieved fraction; None without a measured mean
    acceptance length (tokens per step are unknown then)."""
    mal = _num(r.mean_acceptance_length)
    if mal is None:
        return None
    server = dict(getattr(r, "server", None) or {})
    tp = int(server.get("tensor_parallel_size") or 1)
    dcp = int(r.dcp_size or 1)
    ctx = r.input_len + r.output_len / 2
    t_kv = str(server.get("kv_cache_dtype") or "auto")
    kw = dict(
        concurrency=int(r.concurrency),
        context_len=ctx,
        num_spec=int(r.num_speculative_tokens),
        target_kv_dtype=t_kv,
        draft_kv_dtype=str(r.draft_kv_cache_dtype),
        tp=tp,
        dcp=dcp,
        server=server,
    )
    b = step_bytes(target, draft, **kw)
    u = step_bytes(target, draft, routing="uniform", **kw)
    tokens = r.concurrency * mal
    max_tps = bandwidth / b["bytes_per_step_per_gpu"] * tokens
    max_u = bandwidth / u["bytes_per_step_per_gpu"] * tokens
    out = _num(r.output_throughput)
    return {
        "point_id": r.point_id,
        "label": getattr(r, "label", r.point_id),
        "concurrency": r.concurrency,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "context_len": ctx,
        "tp": tp,
        "dcp_size": dcp,
        "num_speculative_tokens": r.num_speculative_tokens,
        "target_kv_dtype": t_kv,
        "draft_kv_cache_dtype": r.draft_kv_cache_dtype,
        "mean_acceptance_length": mal,
        "tokens_per_step": tokens,
        **{k: b[k] for k in STEP_PARTS},
        "bandwidth_bytes_s": bandwidth,
        "max_output_tok_s": max_tps,
        "output_throughput": out,
        "fraction_of_max": None if out is None else out / max_tps,
        "uniform_experts_read": u["routed_experts_read"],
        "bytes_per_step_uniform": u["bytes_per_step_per_gpu"],
        "max_output_tok_s_uniform": max_u,
        "fraction_of_max_uniform": None if out is None else out / max_u,
    }


CONFIG_KEYS = ["architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank"]
CONFIG_KEYS += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size"]
CONFIG_KEYS += ["moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts"]
CONFIG_KEYS += ["first_k_dense_replace", "vocab_size", "draft_vocab_size", "target_hidden_size", "torch_dtype"]


def model_inputs_table(
    target: dict | None, draft: dict | None, source: str, machine: dict, bw: tuple[float, str] | None
) -> pd.DataFrame:
    """Every input of the model, as (quantity, value, where from) rows."""
    rows = [
        ("model configs", source, "results directory"),
        ("GPU", machine.get("gpu_name") or f"none ({machine.get('platform')})", "manifest environment.machine"),
        (
            "HBM bandwidth per GPU",
            f"{bw[0] / 1e12:g} TB/s ({bw[1]})" if bw else "unknown",
            "bench.report.roofline.GPU_BANDWIDTH",
        ),
    ]
    for role, cfg in (("target", target), ("draft", draft)):
        if cfg:
            rows += _config_rows(role, cfg)
    if target and draft:
        rows += [
            (f"target params read per pass: {k}", f"{v:,.0f}", "derived")
            for k, v in target_weight_params(target).items()
        ]
        rows += [
            (f"draft params read per pass: {k}", f"{v:,.0f}", "derived") for k, v in draft_pass_params(draft).items()
        ]
        rows.append(("draft fc params (once per step)", f"{draft_fc_params(draft):,.0f}", "derived"))
        rows.append(
            (
                "MLA latent elements per token per layer",
                f"{target['kv_lora_rank']} + {target['qk_rope_head_dim']}",
                "kv_lora_rank + qk_rope_head_dim",
            )
        )
    return pd.DataFrame(rows, columns=["quantity", "value", "source"])


def _config_rows(role: str, cfg: dict) -> list[tuple[str, str, str]]:
    """The config.json keys the model uses, and the bytes per linear weight it derives from them."""
    rows = []
    for k in CONFIG_KEYS:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            rows.append((f"{role}.{k}", ", ".join(v) if isinstance(v, list) else str(v), "config.json"))
    q = cfg.get("quantization_config")
    source = f"quantization_config: {q.get('quant_method')}" if q else "torch_dtype (no quantization)"
    rows.append((f"{role} linear weight bytes/param", f"{linear_bytes(cfg):g}", source))
    return rows


def _num(v) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f
