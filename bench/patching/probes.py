"""Detect each fix by reading the code itself (AST), independent of hashes and state files."""

from __future__ import annotations

import ast
from pathlib import Path

SPECULATIVE_CONFIG = "vllm/config/speculative.py"
V2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/speculator.py"
FLASHMLA = "vllm/v1/attention/backends/mla/flashmla.py"
_DRAFT_METADATA_BUILDERS = {"_build_draft_attn_metadata", "_build_attn_metadata"}
_DRAFT_KEYS = {"draft_attention_backend", "draft_kv_cache_dtype"}


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError):
        return None


def has_draft_overrides(base: Path, paths: list[str] | None = None) -> bool | None:
    """SpeculativeConfig declares draft_attention_backend and draft_kv_cache_dtype, and every other file the
    fix edits (`paths`: the V1 proposer, the V2 eagle loader) uses them (None: no config file). A config that
    accepts the keys while a runner ignores them is the half-applied state that made the draft inherit the
    target's settings, so it is not "in the code"."""
    tree = _parse(base / SPECULATIVE_CONFIG)
    if tree is None:
        return None
    declared = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            names = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            declared = names >= _DRAFT_KEYS
    if not declared:
        return declared
    return all(uses_draft_keys(base / p) for p in (paths or []) if p != SPECULATIVE_CONFIG)


def uses_draft_keys(path: Path) -> bool:
    """The file reads a draft_* override (an attribute, a name or a call of the helper that resolves it)."""
    tree = _parse(path)
    if tree is None:
        return False
    wanted = _DRAFT_KEYS | {"draft_attention_backend_override"}
    return any(
        (isinstance(n, ast.Attribute) and n.attr in wanted) or (isinstance(n, ast.Name) and n.id in wanted)
        for n in ast.walk(tree)
    )


def has_dcp_draft_seq_lens(base: Path, paths: list[str] | None = None) -> bool | None:
    """The V2 draft speculator passes dcp_local_seq_lens to build_attn_metadata (None: no V2 speculator)."""
    tree = _parse(base / V2_SPECULATOR)
    if tree is None:
        return None
    builders = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in _DRAFT_METADATA_BUILDERS]
    if not builders:
        return None
    for fn in builders:
        for call in ast.walk(fn):
            if (
                isinstance(call, ast.Call)
                and _call_name(call) == "build_attn_metadata"
                and any(k.arg == "dcp_local_seq_lens" for k in call.keywords)
            ):
                return True
    return False


def has_dcp_spec_decode(base: Path, paths: list[str] | None = None) -> bool | None:
    """FLASHMLA keeps speculative verify tokens on the decode path under DCP (None: no FLASHMLA backend): the
    module defines the per-token row builder, the metadata builder lifts DCP's forced threshold and calls the row
    builder, and the impl sizes the decode batch by its rows rather than by `num_decodes` (requests). Any one of
    them missing is a half-applied fix: a threshold without rows runs the kernel with the wrong causal mask."""
    tree = _parse(base / FLASHMLA)
    if tree is None:
        return None
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    builder, impl = classes.get("FlashMLAMetadataBuilder"), classes.get("FlashMLAImpl")
    if builder is None or impl is None:
        return None
    calls = [c for c in ast.walk(builder) if isinstance(c, ast.Call)]
    lifts = any(
        _call_name(c) == "_init_reorder_batch_threshold"
        and any(k.arg == "supports_dcp_with_varlen" and _is_true(k.value) for k in c.keywords)
        for c in calls
    )
    rows = "dcp_spec_decode_rows" in functions and any(_call_name(c) == "dcp_spec_decode_rows" for c in calls)
    forward = next((n for n in impl.body if isinstance(n, ast.FunctionDef) and n.name == "forward_mqa"), None)
    by_rows = forward is not None and not any(
        isinstance(n, ast.Attribute) and n.attr == "num_decodes" for n in ast.walk(forward)
    )
    return lifts and rows and by_rows


def _is_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


# fix id -> probe(vLLM base, the files the installed series' patch for it edits, or None)
PROBES = {
    "draft-overrides": has_draft_overrides,
    "dcp-draft-seq-lens": has_dcp_draft_seq_lens,
    "dcp-spec-decode": has_dcp_spec_decode,
}
