"""The DCP view of a sweep (issue 21): per shape and DCP size, the measured step of one rank, the communication a
DCP-N deployment would add (bench.models.dcp_comm, modelled and shown apart), tokens/s, and the KV capacity of a rank.

Rows are the ok points of a sweep that varies dcp_size. The MLA shapes come from the model configs the sweep
stored (bench.report.roofline.model_configs: {engine id: (target, draft)}); the KV capacity from vLLM's "GPU KV cache size" line (the record's
`effective.kv_cache_tokens`)."""

from __future__ import annotations

import pandas as pd

from bench.core.fmt import NO_PRECISION
from bench.models.dcp_comm import NVLINK_8X_H200, Backend, Mla, kv_capacity, step_comm
from bench.report.result_fields import pm_text

COLUMNS = {
    "load": ("shape", None),
    "dcp_size": ("DCP", 0),
    "loopback": ("loopback", None),
    "window": ("window", None),  # the headline's: "steady" or "whole" (bench.measure.window), never assumed
    "output_throughput": ("tok/s", 1),
    "throughput_pm": ("+-", None),
    "step_p50_ms": ("step p50 ms (measured)", 2),
    "comm_ms": ("comm ms/step (modelled)", 3),
    "verify_path": ("verify path", None),
    "context_chunks": ("context gathers/layer", 0),
    "step_with_comm_ms": ("step + comm ms", 2),
    "throughput_with_comm": ("tok/s with comm (modelled)", 1),
    "kv_cache_tokens": ("KV tokens (group)", 0),
    "largest_batch": ("largest batch at shape", 0),
}


FIGURE_COLUMNS = ["throughput_halfwidth", "concurrency", "input_len", "output_len"]


def _known(value) -> str | None:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _backends(r) -> tuple[Backend, Backend]:
    """The target's and the draft's backends as they ran (as asked where the run did not say), with their KV dtypes:
    a draft KV of "auto" is the target's."""
    target_kv = _known(getattr(r, "kv_cache_dtype_ran", None))
    draft_kv = _known(getattr(r, "draft_kv_cache_dtype", None))
    draft_kv = target_kv if draft_kv in (None, "auto") else draft_kv
    target_name = _known(getattr(r, "target_attention_backend_ran", None))
    draft_name = _known(getattr(r, "draft_attention_backend_ran", None)) or _known(
        getattr(r, "draft_attention_backend", None)
    )
    return Backend.of(target_name, target_kv), Backend.of(draft_name or target_name, draft_kv)


def dcp_rows(points: pd.DataFrame, models: dict[str, tuple[dict | None, dict | None]]) -> pd.DataFrame:
    """One row per ok point of a sweep with more than one DCP size; empty otherwise."""
    ok = points[points.status == "ok"]
    if ok.empty or ok.dcp_size.nunique() < 2:
        return pd.DataFrame(columns=[*COLUMNS, *FIGURE_COLUMNS])
    rows = []
    for r in ok.itertuples():
        target, draft = models.get(r.engine_id) or (None, None)
        k = int(r.num_speculative_tokens) if pd.notna(r.num_speculative_tokens) else 0
        comm = None
        # Text workloads and rate-driven loads have no fixed shape: the row stays, without the modelled columns.
        shaped = all(pd.notna(getattr(r, f, None)) for f in ("input_len", "output_len", "concurrency"))
        if shaped and target and all(key in target for key in ("kv_lora_rank", "qk_rope_head_dim")):
            target_backend, draft_backend = _backends(r)
            comm = step_comm(
                Mla.from_config(target),
                Mla.from_config(draft) if draft and k and "kv_lora_rank" in draft else None,
                dcp=int(r.dcp_size),
                batch=int(r.concurrency),
                k=k,
                context=int(r.input_len) + int(r.output_len) // 2,  # the mean context over a request's decode
                target_backend=target_backend,
                draft_backend=draft_backend,
                workspace=int(r.mla_prefill_workspace) if pd.notna(getattr(r, "mla_prefill_workspace", None)) else None,
            )
        comm_ms = comm.total_s * 1e3 if comm else None
        step = r.step_p50_ms if pd.notna(r.step_p50_ms) else None
        kv = r.kv_cache_tokens if pd.notna(r.kv_cache_tokens) else None
        cap = (
            kv_capacity(kv, int(r.input_len), int(r.output_len))
            if shaped
            else {"longest_context": kv, "largest_batch": None}
        )
        rows.append(
            {
                "load": r.load,
                "dcp_size": int(r.dcp_size),
                "loopback": "yes" if r.dcp_loopback else "no",
                "window": getattr(r, "window", None),
                "output_throughput": r.output_throughput,
                "throughput_pm": pm_text(r.throughput_halfwidth) or NO_PRECISION,
                "step_p50_ms": step,
                "comm_ms": comm_ms,
                "verify_path": comm.verify_path if comm and comm.dcp > 1 else None,
                "context_chunks": comm.context_chunks if comm and comm.dcp > 1 else None,
                "step_with_comm_ms": step + comm_ms if step is not None and comm_ms is not None else None,
                # the measured tok/s slowed by the modelled communication: each step takes step + comm instead
                "throughput_with_comm": r.output_throughput * step / (step + comm_ms)
                if step and comm_ms is not None and pd.notna(r.output_throughput)
                else None,
                "kv_cache_tokens": cap["longest_context"],
                "largest_batch": cap["largest_batch"],
                # not shown in the table; the DCP figure's (bench.report.figures.plot_dcp)
                "throughput_halfwidth": r.throughput_halfwidth if pd.notna(r.throughput_halfwidth) else None,
                "concurrency": r.concurrency,
                "input_len": r.input_len,
                "output_len": r.output_len,
            }
        )
    return pd.DataFrame(rows).sort_values(["load", "dcp_size"], kind="stable").reset_index(drop=True)


NOTE = (
    "Step p50 is measured on one GPU: with DCP N > 1 (loopback) vLLM's DCP code runs as rank 0 of N identical ranks, "
    "the collectives answered in process. `comm` is what the rank's collectives would take on "
    f"{NVLINK_8X_H200.name} ({NVLINK_8X_H200.source}), modelled from their sizes (bench/models/dcp_comm.py), never folded "
    "into the measured columns; `step + comm` is their sum, and `tok/s with comm` the measured tok/s scaled by "
    "step / (step + comm): what the deployment would serve if the communication added to every step and overlapped "
    "nothing. `verify path` prefill-context: vLLM 0.26.0 sends the "
    "k + 1 verify tokens of a backend without DCP varlen support through the prefill path, which all-gathers the "
    "whole context in every layer, in `context gathers/layer` pieces (vLLM's chunked-prefill workspace shared among "
    "the batch's requests; each piece pays the latency); the draft's first pass (k + 1 tokens on the target's "
    "metadata) gathers it too in its own layer. With an fp8 KV cache the query is gathered in fp8. KV tokens: vLLM's 'GPU KV cache size' (the DCP group's tokens); largest batch: "
    "that over input + output tokens."
)


def dcp_markdown(points: pd.DataFrame, models: dict[str, tuple[dict | None, dict | None]], table) -> list[str]:
    rows = dcp_rows(points, models)
    if rows.empty:
        return []
    return ["## DCP view", "", table(rows, COLUMNS), "", NOTE, ""]
