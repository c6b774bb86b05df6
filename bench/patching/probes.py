"""Detect each fix by reading the code itself (AST), independent of hashes and state files."""

from __future__ import annotations

import ast
from pathlib import Path

SPECULATIVE_CONFIG = "vllm/config/speculative.py"
V2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/speculator.py"
_DRAFT_METADATA_BUILDERS = {"_build_draft_attn_metadata", "_build_attn_metadata"}


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(), str(path))
    except (OSError, SyntaxError):
        return None


def has_draft_overrides(base: Path) -> bool | None:
    """SpeculativeConfig declares draft_attention_backend and draft_kv_cache_dtype (None: no such file)."""
    tree = _parse(base / SPECULATIVE_CONFIG)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeConfig":
            names = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            return {"draft_attention_backend", "draft_kv_cache_dtype"} <= names
    return None


def has_dcp_draft_seq_lens(base: Path) -> bool | None:
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


def _call_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


PROBES = {"draft-overrides": has_draft_overrides, "dcp-draft-seq-lens": has_dcp_draft_seq_lens}
