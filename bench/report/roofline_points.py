"""The roofline model (bench.report.roofline) applied to a sweep: per ok point the bandwidth bound on decode
tok/s and the achieved fraction of it, the modelled bytes of a step against its measured time (achieved HBM
bandwidth, bench.report.roofline_check), the table of every model input, and notes on why there is no bound.

A k = 0 (no speculation) point needs only the target's stored config; a generated kimi-rank target is counted by
bench.models.kimi_rank.decode_step_bytes (bench.report.roofline.rank_step_bytes)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.core.fmt import fmt
from bench.models import dcp_emulation, kimi_rank
from bench.report.roofline import (
    draft_fc_params,
    draft_pass_params,
    gpu_bandwidth,
    linear_bytes,
    measured_bandwidth,
    rank_step_bytes,
    step_bytes,
    target_weight_params,
)
from bench.report.roofline_check import StepFacts, explain, number, step_measurement

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
# model vs measurement (bench.report.roofline_check): bytes (uniform routing) over the measured step time; the
# achieved bandwidth as a share of the datasheet's and, where the sweep measured it, of the copy ceiling
CHECK_COLUMNS = ["byte_model", "tpot_mean_ms", "step_ms", "step_source", "model_step_ms", "achieved_bytes_s"]
CHECK_COLUMNS += ["achieved_fraction", "measured_bandwidth_bytes_s", "achieved_fraction_measured"]
CHECK_COLUMNS += ["prefill_overlap", "note"]
ROOFLINE_COLUMNS += CHECK_COLUMNS
KIMI_MODEL = "bench.models.kimi_rank.decode_step_bytes"
GENERIC_MODEL = "bench.report.roofline.step_bytes"

Configs = dict[str, tuple[dict | None, dict | None]]


def roofline(
    points: pd.DataFrame, manifest: dict, models: Configs, facts: StepFacts | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(per-point roofline table, model inputs table, notes). `models`: per engine id, the (target, draft)
    configs the sweep stored (bench.report.roofline.model_configs); `facts`: what the raw records and logs say
    about the measured steps (bench.report.roofline_check.step_facts). Ok points whose engine has the configs
    it needs (the target's; the draft's too when k > 0) and, with a draft, a measured mean acceptance length get
    a row; the notes say why nothing could be computed (unknown GPU or model configs)."""
    notes: list[str] = []
    machine = (manifest.get("environment") or {}).get("machine") or {}
    known = {engine: pair for engine, pair in models.items() if pair[0]}
    first = next((e for e, (_, d) in known.items() if d), next(iter(known), None))
    target, draft = known[first] if first else (None, None)
    source = f"models/{first}/ ({'target.json, draft.json' if draft else 'target.json'})" if first else None
    bw = gpu_bandwidth(machine.get("gpu_name")) if machine.get("platform") == "gpu" else None
    measured = measured_bandwidth(manifest.get("environment") or {}) if machine.get("platform") == "gpu" else None
    inputs = model_inputs_table(
        target, draft, source or "unknown: not stored with these results", machine, bw, measured
    )
    if machine.get("platform") != "gpu":
        notes.append("CPU run: memory bandwidth unknown to this table; no roofline.")
    elif bw is None:
        notes.append(f"GPU {machine.get('gpu_name')!r} is not in the bandwidth table; no roofline.")
    if not known:
        notes.append("model configs unknown (the results hold no models/<engine id>/ configs); no roofline.")
    elif len({repr(t) for t, _ in known.values()}) > 1 or len({repr(d) for _, d in known.values() if d}) > 1:
        notes.append(f"the engine configs ran different models; the inputs table shows engine {first}'s.")
    if bw is None or not known:
        return pd.DataFrame(columns=ROOFLINE_COLUMNS), inputs, notes
    ok = points[points.status == "ok"]
    facts = facts or StepFacts()
    ceiling = measured[0] if measured else None
    rows = [_point_row(r, known.get(r.engine_id), bw[0], facts, ceiling) for r in ok.itertuples()]
    missing = sum(row is None for row in rows)
    if missing:
        notes.append(
            f"{missing} ok point(s) have no measured mean acceptance length, no stored configs, or no fixed "
            "concurrency and input/output length (text or rate-paced workloads): left out."
        )
    if not len(ok):
        notes.append("no ok points: nothing to compare with the roofline.")
    return pd.DataFrame([row for row in rows if row is not None], columns=ROOFLINE_COLUMNS), inputs, notes


def _point_row(
    r,
    configs: tuple[dict | None, dict | None] | None,
    bandwidth: float,
    facts: StepFacts,
    measured_bw: float | None = None,
) -> dict | None:
    """One ok point's bound (top-k and uniform routing), achieved fraction, and the model-vs-measurement check;
    None without the configs it needs or, with a draft, a measured mean acceptance length (tokens per step are
    unknown then). `bandwidth`: the datasheet's; `measured_bw`: the sweep's measured copy ceiling, if any."""
    k = int(r.num_speculative_tokens)
    mal = 1.0 if k == 0 else number(r.mean_acceptance_length)
    target, draft = configs or (None, None)
    shape = [number(getattr(r, f, None)) for f in ("concurrency", "input_len", "output_len")]
    if target is None or mal is None or (k and draft is None) or None in shape:
        return None  # a rate-paced text point has no concurrency, a text point no fixed input length
    server = dict(getattr(r, "server", None) or {})
    step = _Step(
        int(r.concurrency),
        r.input_len + r.output_len / 2,
        k,
        str(server.get("kv_cache_dtype") or "auto"),
        str(r.draft_kv_cache_dtype),
        int(server.get("tensor_parallel_size") or 1),
        int(r.dcp_size or 1),
        server,
    )
    spec = kimi_rank.spec_from_config(target)
    b, u = (step.bytes(target, draft, spec, routing) for routing in ("top_k", "uniform"))
    tokens = r.concurrency * mal
    max_tps = bandwidth / b["bytes_per_step_per_gpu"] * tokens
    max_u = bandwidth / u["bytes_per_step_per_gpu"] * tokens
    out = number(r.output_throughput)
    return {
        "point_id": r.point_id,
        "label": getattr(r, "label", r.point_id),
        "concurrency": r.concurrency,
        "input_len": r.input_len,
        "output_len": r.output_len,
        "context_len": step.context_len,
        "tp": step.tp,
        "dcp_size": step.dcp,
        "num_speculative_tokens": k,
        "target_kv_dtype": step.target_kv_dtype,
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
        **_check(r, mal, u["bytes_per_step_per_gpu"], bandwidth, facts, spec, measured_bw),
    }


@dataclass(frozen=True)
class _Step:
    """What a point's decode step is, for the byte model."""

    concurrency: int
    context_len: float
    num_spec: int
    target_kv_dtype: str
    draft_kv_dtype: str
    tp: int
    dcp: int
    server: dict

    def bytes(self, target: dict, draft: dict | None, spec: kimi_rank.RankSpec | None, routing: str) -> dict:
        """The step's bytes by part: a generated kimi-rank target (one GPU, int4 experts counted right) by
        bench.models.kimi_rank's model, any other by the config-generic one."""
        if spec is not None:
            return rank_step_bytes(
                spec,
                concurrency=self.concurrency,
                context_len=self.context_len,
                num_spec=self.num_spec,
                target_kv_dtype=self.target_kv_dtype,
                draft_kv_dtype=self.draft_kv_dtype,
                routing=routing,
            )
        return step_bytes(
            target,
            draft,
            concurrency=self.concurrency,
            context_len=self.context_len,
            num_spec=self.num_spec,
            target_kv_dtype=self.target_kv_dtype,
            draft_kv_dtype=self.draft_kv_dtype,
            tp=self.tp,
            dcp=self.dcp,
            server=self.server,
            routing=routing,
        )


def _check(
    r, mal: float, step_bytes_: float, bandwidth: float, facts: StepFacts, spec, measured_bw: float | None = None
) -> dict:
    """The model beside the measurement: the step's bytes (uniform routing) at peak bandwidth vs the measured
    step (the steady step's p50 where the record has it, else mean TPOT x mean acceptance length), the bandwidth
    that implies as a share of the datasheet's and of the measured copy ceiling, and the sentence on why they
    differ (against the datasheet's)."""
    tpot_ms, step_ms, source = step_measurement(r, mal)
    overlap = facts.prefill_overlap.get(r.point_id)
    out = {
        "byte_model": KIMI_MODEL if spec is not None else GENERIC_MODEL,
        "tpot_mean_ms": tpot_ms,
        "step_ms": None,
        "step_source": source,
        "model_step_ms": step_bytes_ / bandwidth * 1e3,
        "achieved_bytes_s": None,
        "achieved_fraction": None,
        "measured_bandwidth_bytes_s": measured_bw,
        "achieved_fraction_measured": None,
        "prefill_overlap": overlap,
        "note": None,
    }
    if step_ms is None:
        return out
    achieved = step_bytes_ / (step_ms / 1e3)
    extra = dcp_emulation.excess_projection_bytes(spec.name, int(r.num_speculative_tokens)) if spec else 0.0
    note = explain(
        concurrency=int(r.concurrency),
        k=int(r.num_speculative_tokens),
        fraction=achieved / bandwidth,
        overlap=overlap,
        downgrade=facts.downgrades.get(r.engine_id),
        emulated_extra=extra,
    )
    out.update(step_ms=step_ms, achieved_bytes_s=achieved, note=note)
    out["achieved_fraction"] = achieved / bandwidth
    out["achieved_fraction_measured"] = achieved / measured_bw if measured_bw else None
    return out


CONFIG_KEYS = ["architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "q_lora_rank"]
CONFIG_KEYS += ["kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "intermediate_size"]
CONFIG_KEYS += ["moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts"]
CONFIG_KEYS += ["first_k_dense_replace", "vocab_size", "draft_vocab_size", "target_hidden_size", "torch_dtype"]


def model_inputs_table(
    target: dict | None,
    draft: dict | None,
    source: str,
    machine: dict,
    bw: tuple[float, str] | None,
    measured: tuple[float | None, str] | None = None,
) -> pd.DataFrame:
    """Every input of the model, as (quantity, value, where from) rows. `measured`: the measured copy ceiling
    (bench.report.roofline.measured_bandwidth), shown beside the datasheet figure (GPU runs)."""
    rows = [
        ("model configs", source, "results directory"),
        ("GPU", machine.get("gpu_name") or f"none ({machine.get('platform')})", "manifest environment.machine"),
        (
            "HBM bandwidth per GPU",
            f"{fmt(bw[0] / 1e12)} TB/s ({bw[1]})" if bw else "unknown",
            "bench.report.roofline.GPU_BANDWIDTH",
        ),
    ]
    if measured is not None:
        rows.append(measured_bandwidth_row(measured, bw))
    spec = kimi_rank.spec_from_config(target)
    rows.append(_byte_model_row(spec))
    for role, cfg in (("target", target), ("draft", draft)):
        if cfg:
            rows += _config_rows(role, cfg, spec if role == "target" else None)
    if target and draft:
        rows += [
            (f"target params read per pass: {k}", f"{fmt(v, ',.0f')}", "derived")
            for k, v in target_weight_params(target).items()
        ]
        rows += [
            (f"draft params read per pass: {k}", f"{fmt(v, ',.0f')}", "derived")
            for k, v in draft_pass_params(draft).items()
        ]
        rows.append(("draft fc params (once per step)", f"{fmt(draft_fc_params(draft), ',.0f')}", "derived"))
        rows.append(
            (
                "MLA latent elements per token per layer",
                f"{target['kv_lora_rank']} + {target['qk_rope_head_dim']}",
                "kv_lora_rank + qk_rope_head_dim",
            )
        )
    return pd.DataFrame(rows, columns=["quantity", "value", "source"])


def measured_bandwidth_row(
    measured: tuple[float | None, str], datasheet: tuple[float, str] | None
) -> tuple[str, str, str]:
    """The inputs table's row for the measured copy ceiling, with its share of the datasheet figure."""
    value, text = measured
    if value is not None and datasheet:
        text += f"; {fmt(value / datasheet[0], '.0%')} of the datasheet's {fmt(datasheet[0] / 1e12)} TB/s"
    # the module's path before issue 41 (now bench.engine.bandwidth), kept so that the committed reports' text stays as it is
    return ("measured copy bandwidth per GPU", text, "manifest environment.bandwidth (bench.engine.bandwidth)")


def _byte_model_row(spec: kimi_rank.RankSpec | None) -> tuple[str, str, str]:
    if spec is None:
        return ("byte model", GENERIC_MODEL, "config-generic (bench/report/roofline.py)")
    return ("byte model", f"{KIMI_MODEL} ({spec.name})", "the stored target config is exactly this generator's")


def _config_rows(role: str, cfg: dict, spec: kimi_rank.RankSpec | None = None) -> list[tuple[str, str, str]]:
    """The config.json keys the model uses, and the bytes per linear weight it derives from them (a generated
    kimi-rank target: its routed experts' format, the other linears bf16 by Kimi's ignore list)."""
    rows = []
    for k in CONFIG_KEYS:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            rows.append((f"{role}.{k}", ", ".join(v) if isinstance(v, list) else str(v), "config.json"))
    q = cfg.get("quantization_config")
    if spec is not None:
        per_weight = kimi_rank.routed_expert_bytes(spec) / (
            kimi_rank.N_ROUTED_EXPERTS * 3 * kimi_rank.HIDDEN * spec.moe_intermediate
        )
        rows.append((f"{role} routed-expert bytes/weight", f"{fmt(per_weight)} ({spec.experts})", KIMI_MODEL))
        rows.append((f"{role} other linear weight bytes/param", "2", "bf16: Kimi's quantization ignore list"))
        return rows
    source = f"quantization_config: {q.get('quant_method')}" if q else "torch_dtype (no quantization)"
    rows.append((f"{role} linear weight bytes/param", f"{fmt(linear_bytes(cfg))}", source))
    return rows
