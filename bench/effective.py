"""The configuration a server really runs with, read back from its log and /metrics, and compared with what the
point asked for: a point that ran with something else is flagged, not reported under the wrong label."""

from __future__ import annotations

import re

from bench.metrics import info_labels

_BACKEND_RE = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend")
_CUDAGRAPH_RE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_DCP_RE = re.compile(r"decode_context_parallel_size=(\d+)")
_KV_RE = re.compile(r"kv_cache_dtype=(\w+)")


def read_effective(log_text: str, metric_samples) -> dict:
    backends = []
    for name in _BACKEND_RE.findall(log_text):
        if name not in backends:
            backends.append(name)
    cache_info = info_labels(metric_samples, "vllm:cache_config_info") or {}

    def first(regex):
        m = regex.search(log_text)
        return m.group(1) if m else None

    dcp = first(_DCP_RE)
    return {
        "attention_backends_logged": backends,
        "target_attention_backend": backends[0] if backends else None,
        # vLLM logs the draft's selection only when it differs from the target's; unknown stays None.
        "draft_attention_backend": backends[1] if len(backends) > 1 else None,
        "kv_cache_dtype": cache_info.get("cache_dtype") or first(_KV_RE),
        "cudagraph_mode": first(_CUDAGRAPH_RE),
        "dcp_size": int(dcp) if dcp else None,
        "block_size": int(cache_info["block_size"]) if cache_info.get("block_size", "").isdigit() else None,
    }


def mismatches(engine: dict, effective: dict) -> list[str]:
    """Human-readable differences between what was asked and what ran (only where both are known)."""
    out = []
    if effective["dcp_size"] is not None and effective["dcp_size"] != engine["dcp_size"]:
        out.append(f"dcp_size: asked {engine['dcp_size']}, ran {effective['dcp_size']}")
    asked_backend = engine["draft_attention_backend"]
    ran_draft = effective["draft_attention_backend"]
    if asked_backend != "auto" and ran_draft is not None and ran_draft != asked_backend:
        out.append(f"draft_attention_backend: asked {asked_backend}, logged {effective['attention_backends_logged']}")
    asked_kv = str(engine["server"].get("kv_cache_dtype", "auto"))
    if effective["kv_cache_dtype"] is not None and effective["kv_cache_dtype"] != asked_kv:
        out.append(f"target kv_cache_dtype: asked {asked_kv}, ran {effective['kv_cache_dtype']}")
    return out
