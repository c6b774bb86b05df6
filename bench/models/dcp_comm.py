"""The communication a DCP-N rank would do per engine step, modelled from the collectives' sizes (issue 21).

A loopback DCP point (bench/profiling/dcp_loopback.py) measures one rank's step with its collectives answered in
process; what they would cost over NVLink is computed here and shown apart, never folded into a measured number.

What vLLM 0.26.0 exchanges per MLA layer under DCP N (read in `model_executor/layers/attention/mla_attention.py`,
`v1/attention/ops/common.py` and the V2 runner's `v1/worker/gpu/spec_decode/autoregressive/speculator.py`), for T
query tokens and H query heads per rank:
- decode path (query length within the builder's `reorder_batch_threshold`): all-gather of the absorbed query along
  the heads, T x H x (kv_lora_rank + qk_rope_head_dim) from each rank, in bf16, or in fp8 when the KV cache is fp8
  (`MLACommonImpl` quantizes the query before the gather, mla_attention.py ~851-868); all-gather of the LSE,
  T x H*N from each rank (fp32 from FLASHMLA, bf16 from TRITON_MLA); reduce-scatter of the output,
  T x H*N x kv_lora_rank bf16 in, each rank keeping its H heads.
- prefill path with context (longer queries): the context KV each rank holds is all-gathered into a bf16
  workspace (bf16 even with an fp8 cache), context x (kv_lora_rank + qk_rope_head_dim) per request in all
  (`_compute_prefill_context` with DCP), one all-gather per workspace-sized chunk: the workspace
  (`chunked_prefill_workspace`) is split equally among the requests with context, and a context longer than its
  share takes several chunks. Under DCP > 1 a builder without DCP varlen support (FLASHMLA, TRITON_MLA in 0.26.0) has
  threshold 1, so the k + 1 tokens a speculative step verifies take this path: the whole context is gathered every
  step, in every layer.
- the draft (V2 runner): its first pass runs with the target's attention metadata, k + 1 tokens per request, so
  under threshold 1 it too gathers the whole context in each draft layer; its k - 1 further passes are one-token
  decodes.

Time of one collective (nccl-tests' definitions, ring algorithms): latency + bytes x (N-1)/N / bus bandwidth, with
bytes the all-gather's output or the reduce-scatter's input; a gather done in c chunks pays c latencies.
"""

from __future__ import annotations

import dataclasses
import math

FP8, BF16, FP32 = 1, 2, 4


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


def collective_s(nbytes: float, n: int, link: Link, pieces: int = 1) -> float:
    """Seconds of one all-gather (output bytes) or reduce-scatter (input bytes) over n ranks, done in `pieces`
    collectives of equal share (each pays the latency)."""
    if n <= 1:
        return 0.0
    return pieces * link.latency_us * 1e-6 + nbytes * (n - 1) / n / (link.busbw_gb_s * 1e9)


@dataclasses.dataclass(frozen=True)
class Backend:
    """What of a model's attention backend the collectives depend on."""

    varlen_dcp: bool = False  # its DCP metadata takes varlen decode queries: k + 1 tokens stay on the decode path
    query_bytes: int = BF16  # the absorbed query as gathered: FP8 when the KV cache is fp8
    lse_bytes: int = FP32  # FLASHMLA returns an fp32 LSE, TRITON_MLA a bf16 one

    @classmethod
    def of(cls, name: str | None, kv_cache_dtype: str | None) -> Backend:
        """vLLM 0.26.0's backend by name: varlen DCP for TOKENSPEED_MLA and FLASH_ATTN_MLA (the latter only at
        interleave 1, vLLM's default, assumed here); an fp8 query with an fp8 KV cache; a bf16 LSE from
        TRITON_MLA."""
        name = (name or "").upper()
        return cls(
            varlen_dcp=name in VARLEN_DCP,
            query_bytes=FP8 if str(kv_cache_dtype or "").startswith("fp8") else BF16,
            lse_bytes=BF16 if name == "TRITON_MLA" else FP32,
        )


VARLEN_DCP = {"FLASH_ATTN_MLA", "TOKENSPEED_MLA"}


def decode_layer_bytes(mla: Mla, tokens: int, n: int, backend: Backend = Backend()) -> dict[str, float]:
    """Bytes of the three decode-path collectives of one layer (all-gather outputs, reduce-scatter input)."""
    latent = mla.kv_lora_rank + mla.rope_dim
    return {
        "query_all_gather": n * tokens * mla.heads * latent * backend.query_bytes,
        "lse_all_gather": n * tokens * mla.heads * n * backend.lse_bytes,
        "output_reduce_scatter": tokens * mla.heads * n * mla.kv_lora_rank * BF16,
    }


def context_layer_bytes(mla: Mla, context_tokens: int) -> float:
    """Bytes of the prefill path's context all-gather of one layer (the gathered workspace, all requests)."""
    return context_tokens * (mla.kv_lora_rank + mla.rope_dim) * BF16


def chunked_prefill_workspace(max_model_len: int, max_num_seqs: int, block_size: int) -> int:
    """Rows of vLLM 0.26.0's MLA chunked-prefill workspace (`MLACommonMetadataBuilder`'s formula, mla_attention.py
    ~1693-1714): 8 full-length requests or 4 pages per request, at most 64Ki tokens, at least a page per request."""
    size = min(max(8 * max_model_len, 4 * max_num_seqs * block_size), 64 * 1024)
    return max(size, max_num_seqs * block_size)


def context_chunks(context: int, batch: int, workspace: int | None) -> int:
    """All-gathers per layer for `batch` requests with `context` tokens each: the workspace is shared equally among
    them (`build_chunked_context_metadata`); unknown workspace: one."""
    if not workspace:
        return 1
    return math.ceil(context / max(1, workspace // max(1, batch)))


@dataclasses.dataclass(frozen=True)
class StepComm:
    """The modelled communication of one engine step (target verify + k draft passes) of a DCP-N rank."""

    dcp: int
    verify_path: str  # "decode" or "prefill-context"
    target_s: float
    draft_s: float
    bytes_per_step: float
    link: Link
    context_chunks: int = 0  # all-gathers per layer of a prefill-context pass (0: none took that path)

    @property
    def total_s(self) -> float:
        return self.target_s + self.draft_s

    def to_dict(self) -> dict:
        return {
            "dcp": self.dcp,
            "verify_path": self.verify_path,
            "context_chunks": self.context_chunks,
            "target_ms": self.target_s * 1e3,
            "draft_ms": self.draft_s * 1e3,
            "total_ms": self.total_s * 1e3,
            "bytes_per_step": self.bytes_per_step,
            "link": self.link.name,
            "source": self.link.source,
        }


def _pass(
    mla: Mla, tokens: int, dcp: int, backend: Backend, link: Link, context: tuple[int, int] | None
) -> tuple[float, float]:
    """(seconds, bytes) of one forward pass of a model's layers: decode collectives for `tokens` query tokens, or
    with `context` = (context tokens of all requests, chunks per layer) the prefill path's context gather."""
    if context is None:
        parts = decode_layer_bytes(mla, tokens, dcp, backend).values()
        return mla.layers * sum(collective_s(b, dcp, link) for b in parts), mla.layers * sum(parts)
    nbytes = context_layer_bytes(mla, context[0])
    return mla.layers * collective_s(nbytes, dcp, link, pieces=context[1]), mla.layers * nbytes


def step_comm(
    target: Mla,
    draft: Mla | None,
    *,
    dcp: int,
    batch: int,
    k: int,
    context: int,
    target_backend: Backend = Backend(),
    draft_backend: Backend | None = None,
    workspace: int | None = None,
    link: Link = NVLINK_8X_H200,
) -> StepComm:
    """One step of `batch` requests at `context` tokens each, k speculative tokens (0: no draft), on vLLM 0.26.0's
    V2 runner (module docstring). The target verifies k + 1 tokens per request: on the decode path when k = 0 or its
    backend takes DCP with varlen queries, else on the prefill path, gathering the whole context in
    `context_chunks` pieces per layer (`workspace`: chunked_prefill_workspace). The draft's first pass takes the
    same k + 1 tokens through its own backend's path; its k - 1 further passes are one-token decodes."""
    if dcp <= 1:
        return StepComm(dcp, "decode", 0.0, 0.0, 0.0, link)
    draft_backend = draft_backend or target_backend
    chunks = context_chunks(context, batch, workspace)
    gathered = (batch * context, chunks)
    tokens = batch * (k + 1)
    verify_decodes = k == 0 or target_backend.varlen_dcp
    target_s, target_bytes = _pass(target, tokens, dcp, target_backend, link, None if verify_decodes else gathered)
    draft_s = draft_bytes = 0.0
    draft_gathers = False
    if draft is not None and k > 0:
        draft_gathers = not draft_backend.varlen_dcp
        first_s, first_bytes = _pass(draft, tokens, dcp, draft_backend, link, gathered if draft_gathers else None)
        one_s, one_bytes = _pass(draft, batch, dcp, draft_backend, link, None)
        draft_s, draft_bytes = first_s + (k - 1) * one_s, first_bytes + (k - 1) * one_bytes
    used = chunks if (not verify_decodes or draft_gathers) else 0
    verify = "decode" if verify_decodes else "prefill-context"
    return StepComm(dcp, verify, target_s, draft_s, target_bytes + draft_bytes, link, used)


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
