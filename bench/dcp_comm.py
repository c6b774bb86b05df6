"""The communication a DCP-N rank would do per engine step, modelled from the collectives' sizes (issue 21).

A loopback DCP point (bench/profiling/dcp_loopback.py) measures one rank's step with its collectives answered in
process; what they would cost over NVLink is computed here and shown apart, never folded into a measured number.

What vLLM 0.26.0 exchanges per MLA layer under DCP N (read in `model_executor/layers/attention/mla_attention.py` and
`v1/attention/ops/common.py`), for T query tokens and H query heads per rank:
- decode path (query length within the builder's `reorder_batch_threshold`): all-gather of the absorbed query along
  the heads, T x H x (kv_lora_rank + qk_rope_head_dim) bf16 from each rank; all-gather of the LSE, T x H*N fp32
  from each rank; reduce-scatter of the output, T x H*N x kv_lora_rank bf16 in, each rank keeping its H heads.
- prefill path with context (longer queries): the context KV each rank holds is all-gathered into a bf16
  workspace, context x (kv_lora_rank + qk_rope_head_dim) per request in all (`_compute_prefill_context` with DCP).
  Under DCP > 1 a builder without DCP varlen support (FLASHMLA, TRITON_MLA in 0.26.0) has threshold 1, so the
  k + 1 tokens a speculative step verifies take this path: the whole context is gathered every step, in every layer.

Time of one collective (nccl-tests' definitions, ring algorithms): latency + bytes x (N-1)/N / bus bandwidth, with
bytes the all-gather's output or the reduce-scatter's input.
"""

from __future__ import annotations

import dataclasses
import math

BF16, FP32 = 2, 4


@dataclasses.dataclass(frozen=True)
class Link:
    name: str
    busbw_gb_s: float  # NCCL bus bandwidth at large messages
    latency_us: float  # per collective at small messages
    source: str


# Both figures are 8 x H100 SXM measurements; an H200 SXM has the same NVLink 4 (18 links, 900 GB/s bidirectional per
# GPU) and NVSwitch, so they are taken for 8 x H200 (docs/kimi-rank.md, "The communication model's figures").
# - Bandwidth 370 GB/s: NCCL's maintainer, NVIDIA/nccl-tests issue 212 (2024-05-06): with the protocol overhead NCCL
#   gets "an effective NVLink bandwidth of 370GB/s, which you can observe as BusBw when running non-allreduce
#   operations" on H100 (all_reduce reaches ~480 GB/s only through NVLink SHARP, which all-gather and reduce-scatter
#   do not use).
# - Latency 15 us: NVIDIA/Megatron-LM pull request 5596 measured ring all-gather / reduce-scatter kernel device times
#   on 8 x H100 (NCCL, no symmetric memory): 20.2 / 18.6 us at 2 MiB, 43.4 / 47.0 us at 8 MiB, 118.9 / 112.6 us at
#   32 MiB, 385.3 us (all-gather) at 128 MiB. 20.2 us less 2 MiB x 7/8 at 370 GB/s (5.0 us) is 15.2 us. With these two
#   figures the model gives 20.0 / 34.8 / 94.4 / 332.4 us at those sizes: from 26% below to 7% above the measured
#   times, below at every size from 8 MiB up, so the modelled term leans low for large collectives
#   (tests/unit/test_dcp_comm.py reproduces these figures).
NVLINK_8X_H200 = Link(
    name="8 x H200 NVLink 4 (NCCL, ring)",
    busbw_gb_s=370.0,
    latency_us=15.0,
    source=(
        "busbw 370 GB/s: NVIDIA/nccl-tests#212, non-allreduce collectives on 8 x H100 NVLink 4; latency 15 us: "
        "fitted to NVIDIA/Megatron-LM#5596's 2 MiB ring all-gather kernel time on 8 x H100"
    ),
)


@dataclasses.dataclass(frozen=True)
class Mla:
    """The MLA shape of one model as a rank holds it."""

    layers: int
    heads: int  # query heads per rank
    kv_lora_rank: int
    rope_dim: int

    @classmethod
    def from_config(cls, config: dict, layers: int | None = None) -> Mla:
        return cls(
            layers=int(layers if layers is not None else config["num_hidden_layers"]),
            heads=int(config["num_attention_heads"]),
            kv_lora_rank=int(config["kv_lora_rank"]),
            rope_dim=int(config["qk_rope_head_dim"]),
        )


def collective_s(nbytes: float, n: int, link: Link) -> float:
    """Seconds of one all-gather (output bytes) or reduce-scatter (input bytes) over n ranks."""
    if n <= 1:
        return 0.0
    return link.latency_us * 1e-6 + nbytes * (n - 1) / n / (link.busbw_gb_s * 1e9)


def decode_layer_bytes(mla: Mla, tokens: int, n: int) -> dict[str, float]:
    """Bytes of the three decode-path collectives of one layer (all-gather outputs, reduce-scatter input)."""
    latent = mla.kv_lora_rank + mla.rope_dim
    return {
        "query_all_gather": n * tokens * mla.heads * latent * BF16,
        "lse_all_gather": n * tokens * mla.heads * n * FP32,
        "output_reduce_scatter": tokens * mla.heads * n * mla.kv_lora_rank * BF16,
    }


def context_layer_bytes(mla: Mla, context_tokens: int) -> float:
    """Bytes of the prefill path's context all-gather of one layer (the gathered workspace, all requests)."""
    return context_tokens * (mla.kv_lora_rank + mla.rope_dim) * BF16


@dataclasses.dataclass(frozen=True)
class StepComm:
    """The modelled communication of one engine step (target verify + k draft passes) of a DCP-N rank."""

    dcp: int
    verify_path: str  # "decode" or "prefill-context"
    target_s: float
    draft_s: float
    bytes_per_step: float
    link: Link

    @property
    def total_s(self) -> float:
        return self.target_s + self.draft_s

    def to_dict(self) -> dict:
        return {
            "dcp": self.dcp,
            "verify_path": self.verify_path,
            "target_ms": self.target_s * 1e3,
            "draft_ms": self.draft_s * 1e3,
            "total_ms": self.total_s * 1e3,
            "bytes_per_step": self.bytes_per_step,
            "link": self.link.name,
            "source": self.link.source,
        }


def step_comm(
    target: Mla,
    draft: Mla | None,
    *,
    dcp: int,
    batch: int,
    k: int,
    context: int,
    varlen_dcp: bool = False,
    link: Link = NVLINK_8X_H200,
) -> StepComm:
    """One step of `batch` requests at `context` tokens each, k speculative tokens (0: no draft). The target
    verifies k + 1 tokens per request: on the decode path when k = 0 or the backend takes DCP with varlen queries
    (`varlen_dcp`), else on the prefill path with the whole context gathered. The draft runs k passes of one token
    per request on the decode path (its first pass over the accepted tokens is counted as one token: a lower bound)."""
    if dcp <= 1:
        return StepComm(dcp, "decode", 0.0, 0.0, 0.0, link)
    tokens = batch * (k + 1)
    verify = "decode" if k == 0 or varlen_dcp else "prefill-context"
    if verify == "decode":
        parts = decode_layer_bytes(target, tokens, dcp).values()
        target_bytes = target.layers * sum(parts)
        target_s = target.layers * sum(collective_s(b, dcp, link) for b in parts)
    else:
        nbytes = context_layer_bytes(target, batch * context)
        target_bytes = target.layers * nbytes
        target_s = target.layers * collective_s(nbytes, dcp, link)
    draft_bytes = draft_s = 0.0
    if draft is not None and k > 0:
        parts = decode_layer_bytes(draft, batch, dcp).values()
        draft_bytes = k * draft.layers * sum(parts)
        draft_s = k * draft.layers * sum(collective_s(b, dcp, link) for b in parts)
    return StepComm(dcp, verify, target_s, draft_s, target_bytes + draft_bytes, link)


def kv_capacity(kv_cache_tokens: int | None, input_len: int, output_len: int) -> dict:
    """What a rank's KV cache holds, from vLLM's "GPU KV cache size: X tokens" (under DCP N, X counts the tokens of
    the whole group's sequences: N x the rank's local slots): the longest context and the largest batch at this
    shape."""
    if not kv_cache_tokens:
        return {"longest_context": None, "largest_batch": None}
    return {
        "longest_context": int(kv_cache_tokens),
        "largest_batch": math.floor(kv_cache_tokens / max(1, input_len + output_len)),
    }
