"""One tensor-parallel rank of Kimi K2.6, as a model vLLM loads on one GPU with dummy weights.

A TP-N rank of Kimi K2.6 holds 1/N of the attention heads, of the dense and expert MLP intermediate sizes and of
the vocabulary, and all 384 routed experts (TP, not EP, as in the Kimi launch configs). Written as a TP1 model
with those per-rank shapes, vLLM runs the kernels one GPU of a real TP-N node runs (Marlin MoE on Kimi's int4
experts, the DeepSeek-V3 fused-A and router GEMMs, the MLA decode kernel on 64/N heads), minus the all-reduces.
Every full-model value below is a fact of the public Kimi K2.x configs; docs/kimi-rank.md cites each one.

A profile names it as `kimi-rank` or `kimi-rank:tp=8,layers=61,experts=int4`; `estimate()` gives the memory one
rank needs before any GPU time is spent, and `fit_problem()` says why a GPU cannot hold it. `dcp=N` (set by the plan
for a `dcp_emulated` axis value, bench/models/dcp_emulation.py) gives the attention layers the 64/TP x N query heads a
DCP-N rank's MLA decode kernel sees after vLLM's all-gather; everything else stays the rank's.

Over 400 lines on purpose: the configs, the memory estimate and the step-bytes model share one per-rank arithmetic
that the tests check together; split, a change to one shape could miss the other two.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError
from bench.models.models import MLA_DIMS, NOAUX_TC_ROUTING  # DeepSeek-V3 MLA dims: the tiny model and Kimi share them

NAME = "kimi-rank"
# The full model (public Kimi K2 / K2.5 / K2.6 text config; docs/kimi-rank.md).
HIDDEN = 7168
LAYERS = 61
HEADS = 64
Q_LORA_RANK = 1536
INTERMEDIATE = 18432
MOE_INTERMEDIATE = 2048
N_ROUTED_EXPERTS = 384
TOP_K = 8
N_SHARED_EXPERTS = 1
FIRST_K_DENSE = 1
VOCAB = 163840
AUX_LAYERS_61 = (1, 29, 57)  # the Kimi K2.6 EAGLE3 draft's auxiliary hidden-state layers at 61 layers
ROPE_SCALING = {
    "type": "yarn",
    "factor": 64.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 1.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
ROPE_THETA = 50000.0
MAX_POSITIONS = 262144  # 4096 x 64
ROUTED_SCALING = 2.827
RMS_NORM_EPS = 1e-5
# Kimi K2 Thinking / K2.5 / K2.6 ship their routed experts as compressed-tensors W4A16; these stay bf16.
KIMI_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]
EXPERT_FORMATS = ("int4", "fp8", "bf16")
# Bytes per routed-expert weight: int4 packs 2 per byte + one bf16 scale per group of 32; fp8 is 1 byte + one
# fp32 scale per output channel (counted separately); bf16 is 2.
INT4_GROUP = 32
GIB = 1024**3


@dataclass(frozen=True)
class RankSpec:
    """Which rank: tensor-parallel degree, depth, routed-expert format, and the DCP size it emulates (1: none)."""

    tp: int = 8
    layers: int = LAYERS
    experts: str = "int4"
    dcp: int = 1

    def __post_init__(self):
        for what, full in (
            ("heads", HEADS),
            ("intermediate_size", INTERMEDIATE),
            ("moe_intermediate_size", MOE_INTERMEDIATE),
            ("vocab", VOCAB),
        ):
            if self.tp < 1 or full % self.tp:
                raise BenchError(f"{NAME}: tp={self.tp} does not divide Kimi's {what} ({full})")
        if not 4 <= self.layers <= LAYERS:
            raise BenchError(f"{NAME}: layers={self.layers}: 4..{LAYERS} (3 distinct aux layers need 4)")
        if self.experts not in EXPERT_FORMATS:
            raise BenchError(f"{NAME}: experts={self.experts!r}: one of {', '.join(EXPERT_FORMATS)}")
        if self.dcp < 1 or self.tp % self.dcp:  # vLLM's ParallelConfig: tp_size must be divisible by dcp_size
            raise BenchError(f"{NAME}: dcp={self.dcp} must divide tp={self.tp} (a DCP group lies inside the TP group)")

    @property
    def name(self) -> str:
        dcp = f",dcp={self.dcp}" if self.dcp > 1 else ""
        return f"{NAME}:tp={self.tp},layers={self.layers},experts={self.experts}{dcp}"

    @property
    def heads(self) -> int:
        """Query heads one TP rank projects (q_b, kv_b, o_proj are this wide on a real rank)."""
        return HEADS // self.tp

    @property
    def attention_heads(self) -> int:
        """num_attention_heads of the generated configs: the rank's heads, x dcp when emulating a DCP rank (the
        heads its decode kernel sees; the projections then grow with them, bench/models/dcp_emulation.py)."""
        return self.heads * self.dcp

    @property
    def intermediate(self) -> int:
        return INTERMEDIATE // self.tp

    @property
    def moe_intermediate(self) -> int:
        return MOE_INTERMEDIATE // self.tp

    @property
    def vocab(self) -> int:
        return VOCAB // self.tp


def is_kimi_rank(model: str) -> bool:
    return model == NAME or model.startswith(NAME + ":")


def parse_spec(text: str) -> RankSpec:
    """`kimi-rank` (TP8, 61 layers, int4) or `kimi-rank:tp=4,layers=8,experts=bf16,dcp=2` (any subset of keys)."""
    if not is_kimi_rank(text):
        raise BenchError(f"{text!r} is not a {NAME} model name")
    fields: dict[str, object] = {}
    for item in filter(None, text[len(NAME) + 1 :].split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in ("tp", "layers", "experts", "dcp") or not value.strip():
            raise BenchError(f"{text!r}: options are tp=N, layers=N, experts={'|'.join(EXPERT_FORMATS)}, dcp=N")
        fields[key] = value.strip() if key == "experts" else _int(text, key, value)
    return RankSpec(**fields)  # type: ignore[arg-type]


def _int(text: str, key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BenchError(f"{text!r}: {key} must be an integer, got {value!r}") from None


def aux_layers(layers: int) -> list[int]:
    """Kimi's [1, 29, 57] at 61 layers, scaled to `layers`: distinct, increasing, in 1..layers-1."""
    out: list[int] = []
    for full in AUX_LAYERS_61:
        v = max(1, round(full * (layers - 1) / (LAYERS - 1)))
        out.append(min(max(v, out[-1] + 1 if out else 1), layers - 1))
    return out


def quantization_config(experts: str) -> dict | None:
    """compressed-tensors config for the routed experts (Linear layers outside Kimi's ignore list)."""
    if experts == "bf16":
        return None
    if experts == "int4":  # Kimi K2 Thinking's published quantization_config
        weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": INT4_GROUP}
        group = {"targets": ["Linear"], "weights": {**_QUANT_DEFAULTS, **weights}, "input_activations": None}
        fmt = "pack-quantized"
    else:  # fp8 W8A8: per-channel weights, dynamic per-token activations (vLLM's fp8 MoE path)
        weights = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel", "group_size": None}
        acts = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token", "dynamic": True}
        group = {"targets": ["Linear"], "weights": {**_QUANT_DEFAULTS, **weights}, "input_activations": acts}
        fmt = "float-quantized"
    return {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {**group, "output_activations": None}},
        "ignore": list(KIMI_IGNORE),
        "kv_cache_scheme": None,
    }


_QUANT_DEFAULTS = {"actorder": None, "block_structure": None, "dynamic": False, "observer": "minmax"}


def _common(spec: RankSpec) -> dict:
    return {
        "hidden_size": HIDDEN,
        "num_attention_heads": spec.attention_heads,
        "num_key_value_heads": spec.attention_heads,
        "q_lora_rank": Q_LORA_RANK,
        **MLA_DIMS,
        "intermediate_size": spec.intermediate,
        "vocab_size": spec.vocab,
        "hidden_act": "silu",
        "rms_norm_eps": RMS_NORM_EPS,
        "max_position_embeddings": MAX_POSITIONS,
        "rope_theta": ROPE_THETA,
        "rope_scaling": dict(ROPE_SCALING),
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def target_config(spec: RankSpec) -> dict:
    """DeepseekV3ForCausalLM / deepseek_v3 (the CUDA flavour, docs/facts.md) at one rank's shapes."""
    cfg = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        **_common(spec),
        "num_hidden_layers": spec.layers,
        "moe_intermediate_size": spec.moe_intermediate,
        "n_routed_experts": N_ROUTED_EXPERTS,
        "num_experts_per_tok": TOP_K,
        "n_shared_experts": N_SHARED_EXPERTS,
        "first_k_dense_replace": FIRST_K_DENSE,
        **NOAUX_TC_ROUTING,
        "routed_scaling_factor": ROUTED_SCALING,
        "num_nextn_predict_layers": 0,
        "initializer_range": 0.02,
    }
    quant = quantization_config(spec.experts)
    if quant:
        cfg["quantization_config"] = quant
    return cfg


def draft_config(spec: RankSpec) -> dict:
    """The EAGLE3 MLA draft: one MLA decoder layer at the rank's heads and MLP width, unquantized.
    model_type deepseek_v2: deepseek_v3 would be rewritten to an MTP model (docs/facts.md)."""
    aux = aux_layers(spec.layers)
    return {
        "architectures": ["Eagle3DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v2",
        **_common(spec),
        "num_hidden_layers": 1,
        "draft_vocab_size": spec.vocab,
        "target_hidden_size": HIDDEN,
        "eagle_aux_hidden_state_layer_ids": aux,  # the V2 runner reads only the top level
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": aux, "use_aux_hidden_state": True},
    }


# --- memory ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank's weights take, by component, and KV-cache bytes per token."""

    spec: RankSpec
    components: dict[str, float]
    target_kv_per_token: dict[str, float]  # by KV dtype ("auto" = bf16, "fp8")
    draft_kv_per_token: dict[str, float]

    @property
    def weights(self) -> float:
        return sum(self.components.values())

    def kv_per_token(self, target_kv: str, draft_kv: str | None) -> float:
        draft = self.draft_kv_per_token[_kv_key(draft_kv)] if draft_kv is not None else 0.0
        return self.target_kv_per_token[_kv_key(target_kv)] + draft

    def table(self) -> str:
        rows = [f"{NAME} {self.spec.name}: weights per component (GB = 1e9 bytes)"]
        rows += [f"  {k:<28} {v / 1e9:9.3f}" for k, v in self.components.items()]
        rows.append(f"  {'total weights':<28} {self.weights / 1e9:9.3f}  ({self.weights / GIB:.2f} GiB)")
        for kv in ("fp8", "auto"):
            t, d = self.target_kv_per_token[kv], self.draft_kv_per_token[kv]
            rows.append(
                f"  KV per token, {kv:<4} target {t / 1e3:.1f} kB ({self.spec.layers} layers) + draft {d:.0f} B"
            )
        return "\n".join(rows)


def _kv_key(dtype: str | None) -> str:
    return "fp8" if str(dtype or "auto").startswith("fp8") else "auto"


def mla_params(heads: int, input_size: int) -> int:
    """One MLA attention block: q_a (+norm), q_b, kv_a_with_mqa (+norm), kv_b, o."""
    kv, nope, rope, v = (MLA_DIMS[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    q = input_size * Q_LORA_RANK + Q_LORA_RANK + Q_LORA_RANK * heads * (nope + rope)
    return q + input_size * (kv + rope) + kv + kv * heads * (nope + v) + heads * v * HIDDEN


def routed_expert_bytes(spec: RankSpec) -> float:
    """All routed experts of one MoE layer (gate, up, down) in the chosen format."""
    params = N_ROUTED_EXPERTS * 3 * HIDDEN * spec.moe_intermediate
    if spec.experts == "int4":
        return params * (0.5 + 2 / INT4_GROUP)
    if spec.experts == "fp8":
        return params + N_ROUTED_EXPERTS * (2 * spec.moe_intermediate + HIDDEN) * 4
    return params * 2.0


def estimate(spec: RankSpec) -> MemoryEstimate:
    bf16, moe_layers = 2.0, spec.layers - FIRST_K_DENSE
    expert_mlp = 3 * HIDDEN * spec.moe_intermediate
    comps = {
        "target embed_tokens": spec.vocab * HIDDEN * bf16,
        "target attention (MLA)": spec.layers * mla_params(spec.attention_heads, HIDDEN) * bf16,
        "target norms": (spec.layers * 2 + 1) * HIDDEN * bf16,
        "target dense MLP": FIRST_K_DENSE * 3 * HIDDEN * spec.intermediate * bf16,
        "target router": moe_layers * (N_ROUTED_EXPERTS * HIDDEN * bf16 + N_ROUTED_EXPERTS * 4),
        "target shared experts": moe_layers * N_SHARED_EXPERTS * expert_mlp * bf16,
        "target routed experts": moe_layers * routed_expert_bytes(spec),
        "target lm_head": spec.vocab * HIDDEN * bf16,
        # The draft: fc over 3 aux states, one MLA layer whose q_a / kv_a take [embeds, hidden], dense MLP. Its
        # embed_tokens and lm_head are the target's (same vocab): measured on the H200, target + draft load took
        # 71.57 GiB against 71.10 GiB without the draft, this line's 0.49 GB (docs/kimi-rank.md).
        "draft fc + layer + norms": (
            3 * HIDDEN * HIDDEN
            + mla_params(spec.attention_heads, 2 * HIDDEN)
            + 3 * HIDDEN * spec.intermediate
            + 4 * HIDDEN
        )
        * bf16,
    }
    latent = MLA_DIMS["kv_lora_rank"] + MLA_DIMS["qk_rope_head_dim"]
    return MemoryEstimate(
        spec,
        comps,
        {"fp8": spec.layers * latent * 1.0, "auto": spec.layers * latent * 2.0},
        {"fp8": latent * 1.0, "auto": latent * 2.0},
    )


def decode_step_bytes(
    spec: RankSpec,
    *,
    concurrency: int,
    context: float,
    k: int,
    target_kv: str,
    draft_kv: str | None,
    routing: str = "uniform",
) -> dict[str, float]:
    """HBM bytes one decode step reads on the rank (a roofline model, not a measurement): the target's weights
    once (routed experts: the expected distinct experts that concurrency x (k+1) uniformly routed tokens touch,
    per MoE layer, or with routing="top_k" only the top-k of one token, the lower bound; the embedding is a row
    lookup and not counted), k draft passes (layer + the shared lm_head; fc once), and the KV cache of every
    sequence at `context` tokens for the target and for each draft pass."""
    est, bf16 = estimate(spec), 2.0
    c = est.components
    tokens = concurrency * (k + 1)
    touched = N_ROUTED_EXPERTS * (1.0 - (1.0 - TOP_K / N_ROUTED_EXPERTS) ** tokens)
    if routing == "top_k":
        touched = float(TOP_K)
    elif routing != "uniform":
        raise ValueError(f"routing {routing!r}: uniform or top_k")
    experts = (spec.layers - FIRST_K_DENSE) * routed_expert_bytes(spec) / N_ROUTED_EXPERTS * touched
    target_w = sum(v for n, v in c.items() if n.startswith("target") and "routed" not in n and "embed" not in n)
    draft_pass = c["draft fc + layer + norms"] - 3 * HIDDEN * HIDDEN * bf16 + c["target lm_head"]
    draft_w = (k * draft_pass + 3 * HIDDEN * HIDDEN * bf16) if k else 0.0
    kv = concurrency * context * (est.target_kv_per_token[_kv_key(target_kv)])
    draft_kv_bytes = k * concurrency * context * est.draft_kv_per_token[_kv_key(draft_kv)] if k else 0.0
    parts = {
        "target weights (no routed experts)": target_w,
        "routed experts touched": experts,
        "draft weights": draft_w,
        "target KV": kv,
        "draft KV": draft_kv_bytes,
    }
    return {**parts, "experts touched per layer": touched, "total": sum(parts.values())}


def spec_from_config(target: dict | None) -> RankSpec | None:
    """The rank whose generated target config is exactly `target` (a stored config.json), else None: how the
    report knows, from the results alone, that a target was this generator's and which shapes it had."""
    if not target or target.get("n_routed_experts") != N_ROUTED_EXPERTS:
        return None
    try:
        tp = MOE_INTERMEDIATE // int(target["moe_intermediate_size"])
        dcp = int(target["num_attention_heads"]) * tp // HEADS
        quant = target.get("quantization_config") or {}
        bits = quant.get("config_groups", {}).get("group_0", {}).get("weights", {}).get("num_bits")
        experts = {4: "int4", 8: "fp8", None: "bf16"}[bits]
        spec = RankSpec(tp, int(target["num_hidden_layers"]), experts, dcp)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, BenchError):
        return None
    return spec if json.loads(json.dumps(target_config(spec))) == target else None


# Activations, CUDA graphs, sampler and allocator slack outside weights and KV: what vLLM needs on top of the
# weights before its KV cache; about 4-6 GiB was seen for one rank at 0.85 (docs/kimi-rank.md), 8 leaves room.
RUNTIME_RESERVE_BYTES = 8 * GIB


def fit_problem(
    spec: RankSpec,
    gpu_memory_bytes: float | None,
    *,
    utilization: float = 0.9,
    max_model_len: int = 4096,
    target_kv: str = "auto",
    draft_kv: str | None = "auto",
) -> str | None:
    """Why a GPU of `gpu_memory_bytes` cannot hold this rank (weights + runtime reserve + one sequence of
    max_model_len in KV, under vLLM's gpu_memory_utilization), or None (None also when the size is unknown)."""
    if not gpu_memory_bytes:
        return None
    est = estimate(spec)
    usable = utilization * gpu_memory_bytes
    kv_one_seq = est.kv_per_token(target_kv, draft_kv) * max_model_len
    need = est.weights + RUNTIME_RESERVE_BYTES + kv_one_seq
    if need <= usable:
        return None
    return (
        f"{spec.name} does not fit: weights {est.weights / GIB:.1f} GiB + runtime {RUNTIME_RESERVE_BYTES / GIB:.0f} "
        f"GiB + KV for one {max_model_len}-token sequence {kv_one_seq / GIB:.2f} GiB = {need / GIB:.1f} GiB > "
        f"{utilization:g} x {gpu_memory_bytes / GIB:.1f} GiB = {usable / GIB:.1f} GiB"
    )


def engine_fit_problem(model: str, server: dict, draft_kv: str | None, machine) -> str | None:
    """fit_problem for a sweep engine: the model name, its `vllm serve` arguments, the draft KV dtype (None: no
    draft), on `machine` (a bench.core.hardware.Machine; unknown GPU memory = no check)."""
    gib = getattr(machine, "gpu_memory_gib", None)
    return fit_problem(
        parse_spec(model),
        gib * GIB if gib else None,
        utilization=float(server.get("gpu_memory_utilization", 0.9)),
        max_model_len=int(server.get("max_model_len") or 4096),
        target_kv=str(server.get("kv_cache_dtype", "auto")),
        draft_kv=draft_kv,
    )


# --- files -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankModels:
    target: Path
    draft: Path
    spec: RankSpec


def cache_folder(root: Path, spec: RankSpec) -> Path:
    """Named by the spec and a hash of both configs: a generator change never reuses another shape's folder."""
    from bench.models import models

    key = [target_config(spec), draft_config(spec), {"tokenizer": getattr(models, "TOKENIZER_VERSION", 1)}]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    dcp = f"-dcp{spec.dcp}" if spec.dcp > 1 else ""
    return Path(root) / f"{NAME}-tp{spec.tp}-l{spec.layers}-{spec.experts}{dcp}-{digest.hexdigest()[:8]}"


H200_MEMORY_BYTES = 143771 * 1024**2  # nvidia-smi's memory.total of an H200: the GPU this model is sized for


def write_checked(out: Path, spec: RankSpec, gpu_memory_gib: float | None = None, force: bool = False) -> RankModels:
    """write_rank_models after the fit check (profile settings: utilization 0.85, fp8 KV, one 4096-token sequence)
    against `gpu_memory_gib`, else this machine's GPU, else an H200; refuses with the numbers unless `force`."""
    if gpu_memory_gib is None:
        from bench.core.hardware import detect_machine

        gpu_memory_gib = detect_machine().gpu_memory_gib
    memory = gpu_memory_gib * GIB if gpu_memory_gib else H200_MEMORY_BYTES
    problem = fit_problem(spec, memory, utilization=0.85, target_kv="fp8", draft_kv="fp8")
    if problem and not force:
        raise BenchError(f"{problem}; --force writes it anyway")
    return write_rank_models(out, spec)


def write_rank_models(out: Path, spec: RankSpec) -> RankModels:
    """DIR/target and DIR/draft: config.json, generation_config.json and a word-level tokenizer of the rank's
    vocab. No weights: serve with --load-format dummy. Deterministic and idempotent."""
    from bench.models.models import _write_json, _write_tokenizer

    out = Path(out)
    models = RankModels(out / "target", out / "draft", spec)
    for folder, config in ((models.target, target_config(spec)), (models.draft, draft_config(spec))):
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "config.json", config)
        _write_tokenizer(folder, spec.vocab)
        _write_json(folder / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    return models
