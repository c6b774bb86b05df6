"""Decode context parallelism (DCP) emulated on one GPU: one rank of a DCP-N deployment, without a DCP group.

What a DCP-N rank does differently from a plain TP rank, as read in vLLM 0.26.0:
- KV: each sequence's latent cache is split by token over the N ranks of the DCP group (`cp_kv_cache_interleave_size`
  tokens to rank i, the next ones to rank i+1: `config/parallel.py`; `get_dcp_local_seq_lens`,
  `v1/attention/backends/utils.py`), and the MLA decode metadata runs the kernel over those local lengths
  (`seq_lens = dcp_local_seq_lens`, `MLACommonMetadataBuilder`, `model_executor/layers/attention/mla_attention.py`).
- Query heads: the decode query, after the W_UK absorption (B x 64/TP heads x (kv_lora_rank + qk_rope_head_dim)),
  is all-gathered over the DCP group along the heads (`get_dcp_group().all_gather(mqa_q, dim=1)`, the MLA decode
  forward in mla_attention.py), so the kernel sees 64/TP x N heads: FlashMLA's scheduler metadata is built with
  `num_q_heads *= self.dcp_world_size` (`v1/attention/backends/mla/flashmla.py`), TRITON_MLA with
  `q_num_heads = self.num_heads * self.dcp_world_size` (`triton_mla.py`).
- Output: the N partial outputs are combined with their log-sum-exp and reduce-scattered back to 64/TP heads
  (`cp_lse_ag_out_rs`, `v1/attention/ops/common.py`; `dcp_a2a_lse_reduce` with `dcp_comm_backend = "a2a"`),
  then v_up and o_proj run on the rank's own heads. The draft's MLA layers are MLA layers too: the same applies.

The emulation serves the generated `kimi-rank` model with `num_attention_heads = 64/TP x N` (bench.kimi_rank
`RankSpec.dcp`) and prompts of ceil(L / N) tokens (rank 0's share, the largest), with no
`--decode-context-parallel-size`: the decode kernel then runs on the heads and the context one DCP-N rank's kernel
runs on. `MODELLED` and `NOT_MODELLED` say what that does and does not reproduce; plan, point records
(`config.emulation`), dry run and report carry them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from bench import kimi_rank
from bench.errors import BenchError
from bench.profile import Shape

LABEL = "emulated"
MODELLED = (
    "the MLA decode kernel (target and draft) on the 64/TP x N query heads a DCP-N rank's kernel sees after the "
    "all-gather",
    "per-rank context: prompts of ceil(L/N) tokens, so the kernel reads 1/N of each sequence's prompt KV",
    "every other weight the rank reads (experts, router, dense MLP, lm_head) and the batch's concurrency",
)
NOT_MODELLED = (
    "no all-gather of the query heads and no LSE-corrected reduce-scatter (or all-to-all) of the output: no "
    "communication at all",
    "the projections are N times too wide: q_b, kv_b (W_UK / W_UV) and o_proj are sized for the gathered heads, "
    "where a real DCP rank keeps 64/TP (the step reads the extra bytes; the roofline counts them)",
    "decode-time KV growth is not split: the rank holds all of the output tokens (ceil(L/N) + out, not (L + out)/N)",
    "prefill: a real DCP rank prefills the whole prompt; the emulated one prefills ceil(L/N) tokens, so TTFT and "
    "output tok/s are not a DCP rank's (read TPOT)",
)


@dataclasses.dataclass(frozen=True)
class DcpEmulation:
    """How a point emulates one rank of DCP-N: the full batch shape it stands for, and the heads involved."""

    dcp_size: int
    full_shape: Shape
    rank_heads: int  # the heads a real TP rank projects
    kernel_heads: int  # the heads its decode kernel sees: rank_heads x dcp_size

    @property
    def label(self) -> str:
        return f"DCP{self.dcp_size} rank of {self.full_shape.label}, {LABEL}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "dcp",
            "label": LABEL,
            "dcp_size": self.dcp_size,
            "full_shape": self.full_shape.model_dump(),
            "rank_input_len": rank_input_len(self.full_shape.input_len, self.dcp_size),
            "rank_heads": self.rank_heads,
            "kernel_heads": self.kernel_heads,
            "not_modelled": list(NOT_MODELLED),
        }


def rank_input_len(input_len: int, dcp_size: int) -> int:
    """The prompt tokens DCP rank 0 holds of an `input_len`-token prompt: ceil(L / N), the largest share (with
    vLLM's default interleave of 1 token the shares differ by at most one token, and the slowest rank sets the
    step)."""
    return math.ceil(input_len / dcp_size)


def emulated_target(target: str, dcp_size: int) -> str:
    """The model name an engine emulating DCP-`dcp_size` serves (`target` itself for 1)."""
    if dcp_size == 1:
        return target
    if not kimi_rank.is_kimi_rank(target):
        raise BenchError(
            f"dcp_emulated = {dcp_size} needs a generated kimi-rank target (its heads are set in the generated "
            f"config), not {target!r}"
        )
    return dataclasses.replace(kimi_rank.parse_spec(target), dcp=dcp_size).name


def dcp_emulated(target: str) -> int:
    """The DCP size a served model name emulates (1: none)."""
    return kimi_rank.parse_spec(target).dcp if kimi_rank.is_kimi_rank(target) else 1


def excess_projection_bytes(target: str, k: int) -> float:
    """Bytes a decode step of an emulating engine reads beyond a real DCP rank's: the attention projections of
    the target (once) and of the draft (k passes) at N x the heads. Independent of batch and context (the
    latent KV per token does not depend on the heads). 0 for a plain rank."""
    spec = kimi_rank.parse_spec(target)
    if spec.dcp == 1:
        return 0.0
    real = dataclasses.replace(spec, dcp=1)
    kw: dict[str, Any] = {"concurrency": 1, "context": 0, "k": k, "target_kv": "auto", "draft_kv": "auto"}
    return kimi_rank.decode_step_bytes(spec, **kw)["total"] - kimi_rank.decode_step_bytes(real, **kw)["total"]


def describe(target: str, k: int) -> str:
    """One line for the dry run: what an emulating engine is and what it leaves out."""
    spec = kimi_rank.parse_spec(target)
    extra = excess_projection_bytes(target, k) / 1e9
    return (
        f"  {LABEL}: one DCP{spec.dcp} rank on one GPU: {spec.attention_heads} query heads in the decode kernel "
        f"(rank's {spec.heads} x {spec.dcp}), prompts ceil(L/{spec.dcp}); not modelled: all-gather, LSE "
        f"reduce-scatter, prefill; projections sized for {spec.attention_heads} heads read +{extra:.2f} GB/step"
    )
