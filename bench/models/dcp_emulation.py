"""Reading the records of the removed DCP emulation (issue 21): committed results (reports/examples/kimi-rank-h200,
tests/data/results/kimi-rank-h200) hold points of "one DCP-N rank emulated on one GPU", served as a kimi-rank model
whose attention projections were N times too wide (`kimi-rank:...,dcp=N`, 64/TP x N heads), with no DCP group and
prompts of ceil(L/N) tokens. The report still labels them `emulated`, lists what they left out, and the roofline
counts their extra projection bytes. New DCP points run vLLM's own DCP code on a loopback group instead
(bench/profiling/dcp_loopback.py, axes.dcp_size, docs/kimi-rank.md); a plan refuses a widened target.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.models import kimi_rank

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
