"""Speed of light for decode: a memory-bandwidth roofline per point, from the model config and the GPU.

This is a MODEL, not a measurement. Decode of a large MLA+MoE model is bound by the bytes each step reads from
HBM, so an upper bound on decode throughput is

    bytes per step  = per GPU: (target weights read + k x draft pass weights + draft fc) / TP
                      + (target KV read + k x draft KV read) / DCP
    tokens per step = concurrency x mean acceptance length            (measured, per point)
    max decode tok/s = bandwidth per GPU / bytes per step x tokens per step

One step = one EAGLE3 round: the draft runs k = num_speculative_tokens passes (its `fc` over the target's
auxiliary hidden states once, its decoder layer + final norm + lm_head per pass), then the target verifies all
k + 1 positions in one forward pass (every weight it touches read once).

Weights counted (parameters x bytes: bf16/fp16 2, fp32 4, fp8-quantized linears 1):
  MLA attention per layer (q_a + q_a norm + q_b, or q; kv_a_with_mqa + kv_a norm; kv_b; o), 2 RMSNorms per
  layer, dense MLP (gate/up/down) in the first `first_k_dense_replace` layers, and per MoE layer the router,
  the shared experts and `num_experts_per_tok` routed experts (the lower bound of expert reads: a batch whose
  tokens all pick the same experts; the "uniform routing" column instead reads the expected number of distinct
  experts that concurrency x (k + 1) uniformly routed tokens touch), the final norm and the lm_head. The input
  embedding is a row lookup (a few KB per step) and is not counted. The EAGLE3 draft's first layer takes
  [embeds, hidden] (2 x hidden) into q_a / kv_a, has a third RMSNorm (hidden_norm) and a dense MLP.

KV cache read (MLA latent cache): (kv_lora_rank + qk_rope_head_dim) elements per token per layer, x KV dtype
bytes (auto = model dtype; fp8* = 1; fp8_ds_mla = kv_lora_rank fp8 + one fp32 scale per 128 + rope in bf16),
x mean context during decode (input_len + output_len / 2) x concurrency, for the target's layers and the
draft's (per draft pass). Under TP the latent cache is replicated on every TP rank (one latent head) and DCP
splits it by token, so each GPU reads KV / DCP; weights are split across TP ranks (replicated small pieces
ignored).

A k = 0 (no speculation) step reads the target's weights and KV only; it needs no draft config.

A target that is bench.models.kimi_rank's generated rank (its stored config is exactly the generator's,
`kimi_rank.spec_from_config`) is counted by `kimi_rank.decode_step_bytes` instead (`rank_step_bytes`): that model
knows the compressed-tensors int4 experts (0.5 byte + a bf16 scale per 32 weights) and Kimi's ignore list, which
this config-generic count does not (it counts such experts at the model dtype).

Not modelled: activations, the sampler, prefill, kernel efficiency, launch overheads, communication.

The bandwidth is the datasheet's (GPU_BANDWIDTH). Where the sweep measured the GPU's device-to-device copy
ceiling (bench.engine.bandwidth, manifest environment["bandwidth"]; `measured_bandwidth`), the report shows it beside
the datasheet figure and the achieved bandwidth as a share of both.

This module is the model (bytes per step from the configs); bench.report.roofline_points applies it to a sweep
and bench.report.roofline_check compares it with the measured step time.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.core.fmt import fmt
from bench.measure.effective import stored_model_configs
from bench.models import kimi_rank

# Peak HBM bandwidth per GPU, bytes/s (vendor datasheets). Matched against nvidia-smi's name, most specific first.
GPU_BANDWIDTH = [
    ("GH200", 4.0e12, "GH200 (96 GB HBM3; the 144 GB HBM3e part has 4.9 TB/s)"),
    ("H200", 4.8e12, "H200 SXM/NVL 141 GB HBM3e"),
    ("H100 NVL", 3.9e12, "H100 NVL 94 GB"),
    ("H100 PCIe", 2.0e12, "H100 PCIe 80 GB"),
    ("H100", 3.35e12, "H100 SXM 80 GB HBM3"),
    ("H800", 3.35e12, "H800 SXM"),
    ("H20", 4.0e12, "H20 96 GB"),
    ("GB200", 8.0e12, "GB200 (per B200 GPU)"),
    ("B300", 8.0e12, "B300 / Blackwell Ultra"),
    ("B200", 8.0e12, "B200 HBM3e"),
    ("A100-SXM4-80GB", 2.039e12, "A100 SXM 80 GB"),
    ("A100 80GB PCIe", 1.935e12, "A100 PCIe 80 GB"),
    ("A100", 1.555e12, "A100 40 GB"),
    ("L40S", 0.864e12, "L40S"),
    ("L4", 0.3e12, "L4"),
    ("A10", 0.6e12, "A10"),
    ("MI300X", 5.3e12, "AMD MI300X"),
    ("MI325X", 6.0e12, "AMD MI325X"),
]

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}


def gpu_bandwidth(gpu_name: str | None) -> tuple[float, str] | None:
    """(bytes/s, table entry) for a GPU name as nvidia-smi prints it; None if unknown (or no GPU)."""
    if not gpu_name:
        return None
    for key, bw, label in GPU_BANDWIDTH:
        if key.lower() in gpu_name.lower():
            return bw, label
    return None


def measured_bandwidth(environment: dict) -> tuple[float | None, str]:
    """(bytes/s, what to show) of the device-to-device copy ceiling a sweep on a GPU measured (manifest
    environment["bandwidth"], bench.engine.bandwidth: best of its repeats, read + write counted); bytes/s None when it
    was not measured, with the reason."""
    entry = environment.get("bandwidth")
    if not isinstance(entry, dict):
        return None, "not measured (results from before bench.engine.bandwidth)"
    try:
        bw = float(entry.get("bytes_per_s") or 0)
    except (TypeError, ValueError):
        bw = 0.0
    if not (bw > 0 and math.isfinite(bw)):
        return None, f"not measured: {entry.get('reason') or 'no value recorded'}"
    size, median = entry.get("size_bytes"), entry.get("median_bytes_per_s")
    what = [
        "device-to-device copy" + (f" of {fmt(size / 2**30)} GiB" if isinstance(size, int | float) else ""),
        "read + write counted",
        f"best of {entry.get('repeats', '?')}"
        + (f" (median {fmt(median / 1e12, '.2f')})" if isinstance(median, int | float) else ""),
    ]
    return bw, f"{fmt(bw / 1e12, '.2f')} TB/s: {', '.join(what)}"


# --- model configs -----------------------------------------------------------------------------------------


def model_configs(sweep_dir: Path) -> dict[str, tuple[dict | None, dict | None]]:
    """{engine id: (target config.json dict, draft config.json dict)} as the sweep stored them with its results
    (bench.measure.effective.store_model_configs: models/<engine id>/{target,draft}.json). Results without them (sweeps
    before they were stored) give {}: their shapes are unknown, never re-read from today's generator or disk."""
    stored = stored_model_configs(sweep_dir)
    return {engine: (_language_model(c["target"]), _language_model(c["draft"])) for engine, c in stored.items()}


def _language_model(cfg: dict | None) -> dict | None:
    if cfg and isinstance(cfg.get("text_config"), dict):  # multimodal wrappers (e.g. Kimi K2.5+): the LM part
        cfg = {
            **cfg["text_config"],
            "quantization_config": cfg.get("quantization_config") or cfg["text_config"].get("quantization_config"),
        }
    return cfg


def model_dtype_bytes(cfg: dict, server: dict | None = None) -> int:
    name = str((server or {}).get("dtype") or cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return DTYPE_BYTES.get(name.replace("torch.", "").lower(), 2)


def linear_bytes(cfg: dict, server: dict | None = None) -> float:
    """Bytes per parameter of the quantizable linears (attention projections, MLPs, experts)."""
    q = cfg.get("quantization_config") or {}
    if str(q.get("quant_method", "")).lower() == "fp8" or str((server or {}).get("quantization", "")) == "fp8":
        return 1.0
    return float(model_dtype_bytes(cfg, server))


def kv_bytes_per_token_layer(cfg: dict, kv_dtype: str, model_bytes: int) -> float:
    """Bytes of MLA latent cache one token takes in one layer."""
    kv, rope = int(cfg.get("kv_lora_rank") or 0), int(cfg.get("qk_rope_head_dim") or 0)
    d = (kv_dtype or "auto").lower()
    if d == "fp8_ds_mla":
        return kv + 4 * math.ceil(kv / 128) + 2 * rope
    if d.startswith("fp8"):
        return float(kv + rope)
    if d == "auto":
        return float((kv + rope) * model_bytes)
    return float((kv + rope) * DTYPE_BYTES.get(d, model_bytes))


# --- parameter counts --------------------------------------------------------------------------------------


def mla_attention_params(cfg: dict, input_size: int | None = None) -> int:
    h = int(cfg["hidden_size"])
    d_in = input_size or h
    heads = int(cfg["num_attention_heads"])
    nope, rope, v = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
    kv, q_lora = int(cfg["kv_lora_rank"]), cfg.get("q_lora_rank")
    q = (d_in * q_lora + q_lora + q_lora * heads * (nope + rope)) if q_lora else d_in * heads * (nope + rope)
    return q + d_in * (kv + rope) + kv + kv * heads * (nope + v) + heads * v * h


def target_weight_params(cfg: dict, routed_experts_read: float | None = None) -> dict[str, float]:
    """Parameters one target forward pass reads, by component. routed_experts_read: experts read per MoE layer
    (default num_experts_per_tok)."""
    h, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    n_experts = int(cfg.get("n_routed_experts") or 0)
    dense_layers = min(int(cfg.get("first_k_dense_replace", 0)), layers) if n_experts else layers
    freq = int(cfg.get("moe_layer_freq") or 1)
    moe_layers = sum(1 for i in range(dense_layers, layers) if (i - dense_layers) % freq == 0) if n_experts else 0
    dense_layers = layers - moe_layers
    expert = 3 * h * int(cfg.get("moe_intermediate_size") or 0)
    topk = routed_experts_read if routed_experts_read is not None else int(cfg.get("num_experts_per_tok") or 0)
    bias = n_experts if cfg.get("topk_method") == "noaux_tc" else 0
    return {
        "attention": layers * mla_attention_params(cfg),
        "layer_norms": layers * 2 * h,
        "dense_mlp": dense_layers * 3 * h * int(cfg["intermediate_size"]),
        "moe_router": moe_layers * (h * n_experts + bias),
        "moe_shared_experts": moe_layers * int(cfg.get("n_shared_experts") or 0) * expert,
        "moe_routed_experts": moe_layers * topk * expert,
        "final_norm": h,
        "lm_head": int(cfg["vocab_size"]) * h,
    }


def draft_pass_params(cfg: dict) -> dict[str, float]:
    """Parameters one EAGLE3 MLA draft pass reads (decoder layers, final norm, lm_head), by component."""
    h, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    attn = sum(mla_attention_params(cfg, 2 * h if i == 0 else h) for i in range(layers))
    return {
        "attention": attn,
        "layer_norms": layers * 2 * h + h,  # input + post-attention per layer, hidden_norm in layer 0
        "dense_mlp": layers * 3 * h * int(cfg["intermediate_size"]),
        "final_norm": h,
        "lm_head": int(cfg.get("draft_vocab_size") or cfg["vocab_size"]) * h,
    }


def draft_fc_params(cfg: dict) -> int:
    """EAGLE3 fc: the target's auxiliary hidden states (3 layers, concatenated) -> draft hidden; once per step."""
    aux = len(
        cfg.get("eagle_aux_hidden_state_layer_ids")
        or (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        or [0, 0, 0]
    )
    return int(cfg.get("target_hidden_size") or cfg["hidden_size"]) * aux * int(cfg["hidden_size"])


def expected_experts_touched(n_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts that `tokens` tokens, each routed uniformly to top_k of n_experts, touch."""
    if n_experts <= 0 or top_k <= 0:
        return 0.0
    return n_experts * (1.0 - (1.0 - top_k / n_experts) ** max(tokens, 0.0))


LINEAR_PARTS = {"attention", "dense_mlp", "moe_shared_experts", "moe_routed_experts"}


def _bytes(params: dict[str, float], lin: float, model_bytes: int) -> float:
    """Quantizable linears at `lin` bytes; norms, router and lm_head at the model dtype."""
    return sum(v * (lin if k in LINEAR_PARTS else model_bytes) for k, v in params.items())


def step_bytes(
    target: dict,
    draft: dict | None,
    *,
    concurrency: int,
    context_len: float,
    num_spec: int,
    target_kv_dtype: str,
    draft_kv_dtype: str,
    tp: int = 1,
    dcp: int = 1,
    server: dict | None = None,
    routing: str = "top_k",
) -> dict:
    """Bytes one decode step reads on one GPU, by part (see the module docstring). routing: "top_k" (the lower
    bound: top-k experts per MoE layer) or "uniform" (expected distinct experts for the step's verify tokens).
    `draft` None: no draft (num_spec must be 0)."""
    if draft is None and num_spec:
        raise ValueError("a speculative step (num_spec > 0) needs the draft's config")
    mb_t, lin_t = model_dtype_bytes(target, server), linear_bytes(target, server)
    experts = None
    if routing == "uniform":
        experts = expected_experts_touched(
            int(target.get("n_routed_experts") or 0),
            int(target.get("num_experts_per_tok") or 0),
            concurrency * (num_spec + 1),
        )
    target_w = _bytes(target_weight_params(target, experts), lin_t, mb_t)
    t_kv_tok = kv_bytes_per_token_layer(target, target_kv_dtype, mb_t) * int(target["num_hidden_layers"])
    draft_w, d_kv_tok = 0.0, 0.0
    if draft is not None:
        mb_d, lin_d = model_dtype_bytes(draft, server), linear_bytes(draft)
        draft_w = num_spec * _bytes(draft_pass_params(draft), lin_d, mb_d) + draft_fc_params(draft) * lin_d
        d_kv_tok = kv_bytes_per_token_layer(draft, draft_kv_dtype, mb_d) * int(draft["num_hidden_layers"])
    target_kv = t_kv_tok * context_len * concurrency
    draft_kv = num_spec * d_kv_tok * context_len * concurrency
    per_gpu = (target_w + draft_w) / tp + (target_kv + draft_kv) / dcp
    return {
        "target_weight_bytes": target_w,
        "draft_weight_bytes": draft_w,
        "target_kv_bytes": target_kv,
        "draft_kv_bytes": draft_kv,
        "target_kv_bytes_per_token": t_kv_tok,
        "draft_kv_bytes_per_token": d_kv_tok,
        "routed_experts_read": experts if experts is not None else int(target.get("num_experts_per_tok") or 0),
        "bytes_per_step_per_gpu": per_gpu,
    }


def rank_step_bytes(
    spec: kimi_rank.RankSpec,
    *,
    concurrency: int,
    context_len: float,
    num_spec: int,
    target_kv_dtype: str,
    draft_kv_dtype: str | None,
    routing: str = "top_k",
) -> dict:
    """step_bytes' parts for a generated kimi-rank target, from bench.models.kimi_rank.decode_step_bytes (one GPU: the
    rank is a TP1 model, nothing is divided)."""
    b = kimi_rank.decode_step_bytes(
        spec,
        concurrency=concurrency,
        context=context_len,
        k=num_spec,
        target_kv=target_kv_dtype,
        draft_kv=draft_kv_dtype,
        routing=routing,
    )
    est = kimi_rank.estimate(spec)
    draft_kv_dtype = draft_kv_dtype if num_spec else None
    return {
        "target_weight_bytes": b["target weights (no routed experts)"] + b["routed experts touched"],
        "draft_weight_bytes": b["draft weights"],
        "target_kv_bytes": b["target KV"],
        "draft_kv_bytes": b["draft KV"],
        "target_kv_bytes_per_token": est.kv_per_token(target_kv_dtype, None),
        "draft_kv_bytes_per_token": est.kv_per_token(target_kv_dtype, draft_kv_dtype)
        - est.kv_per_token(target_kv_dtype, None),
        "routed_experts_read": b["experts touched per layer"],
        "bytes_per_step_per_gpu": b["total"],
    }
