"""The configuration a server really runs with, compared with what the point asked for: a point that ran with
something else is flagged, not reported under the wrong label.

Two sources, the first wins where it knows a value:
- the effective-configuration records the vLLM workers write from inside (bench.profiling.effective_record): per
  attention layer, target or draft, the backend in use, the KV cache dtype and its storage dtype, the block size;
  the CUDA graph mode, the DCP world size, the V1/V2 runner, the vLLM version. The sweep points
  BENCH_EFFECTIVE_DIR at `effective/<engine id>/` of the results directory.
- the server log and /metrics (regexes): all there is for a vLLM the plugin is not loaded in, and for results
  written before the record existed. The log names the draft's backend only when it differs from the target's,
  and nothing says the draft's KV dtype.

The model configs a server ran (its target's and draft's config.json) are stored in `models/<engine id>/`, so that
a report is rebuilt from the results alone (bench.report.roofline reads them from there).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes
from bench.measure.metrics import info_labels
from bench.profiling.effective_record import FILE_PREFIX
from bench.profiling.plugin import ENV_EFFECTIVE_DIR
from bench.results.records import EngineRecord, parse

log = logging.getLogger(__name__)

RECORDS_DIR = "effective"
MODELS_DIR = "models"
ROLES = ("target", "draft")
_BACKEND_RE = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention )?backend")
_CUDAGRAPH_RE = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_DCP_RE = re.compile(r"decode_context_parallel_size=(\d+)")
_KV_TOKENS_RE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")  # under DCP N: the group's tokens, N x local
_KV_RE = re.compile(r"kv_cache_dtype=(\w+)")
# vLLM lowers the whole engine's CUDA graph mode when one backend cannot take it with spec decode (seen on vLLM
# 0.26.0: a TRITON_MLA draft takes a Kimi K2.6 rank's target from FULL_AND_PIECEWISE to PIECEWISE, 3-5x slower,
# reports/examples/kimi-rank-h200). The config line still shows the asked mode; only this warning tells.
_CUDAGRAPH_DOWNGRADE_RE = re.compile(
    r"CUDAGraphMode\.(\w+) is not supported with spec-decode for attention backend (\w+).*?setting cudagraph_mode=(\w+)"
)
# Per-layer fields summarized per model; a field whose layers disagree reads "A | B".
_LAYER_FIELDS = ("backend", "backend_class", "impl_class", "kv_cache_dtype", "kv_spec_dtype", "block_size")
_RECORD_FIELDS = (
    *("runner", "runner_class", "vllm_version", "cudagraph_mode", "dcp_world_size", "model_dtype"),
    *("draft_model_dtype", "speculative_method", "num_speculative_tokens", "dcp_loopback"),
)


# --- where the records and model configs live ---------------------------------------------------------------


def records_dir(root: Path, engine_id: str) -> Path:
    return Path(root) / RECORDS_DIR / engine_id


def record_env(root: Path, engine_id: str) -> dict[str, str]:
    """The environment that makes the plugin in a server's vLLM processes write their records."""
    return {ENV_EFFECTIVE_DIR: str(records_dir(root, engine_id).resolve())}


def clear_records(root: Path, engine_id: str) -> None:
    """Remove the records of an earlier start of this engine config (resume, rerun), before a new one."""
    for path in records_dir(root, engine_id).glob(f"{FILE_PREFIX}*.json"):
        path.unlink(missing_ok=True)


def load_records(root: Path, engine_id: str) -> list[dict]:
    """The records of an engine config's server, lowest rank first; an unreadable one is skipped (logged)."""
    out = []
    for path in sorted(records_dir(root, engine_id).glob(f"{FILE_PREFIX}*.json")):
        try:
            record = json.loads(path.read_text())
            parse(EngineRecord, record, path.relative_to(root))
        except (OSError, ValueError, BenchError) as exc:
            log.warning("effective-configuration record %s unreadable: %s", path, exc)
            continue
        record["path"] = str(path.relative_to(root))
        out.append(record)
    return sorted(out, key=lambda r: (r.get("rank") is None, r.get("rank") or 0, r.get("pid") or 0))


def store_model_configs(root: Path, engine_id: str, target: str, draft: str | None) -> dict[str, str | None]:
    """Copy the config.json the server is started with (a local folder's, or a hub id's in the Hugging Face
    cache; never downloaded) to models/<engine id>/{target,draft}.json. Returns where each came from (None:
    not found, so the report says unknown)."""
    found: dict[str, str | None] = {}
    for role, name in (("target", target), ("draft", draft)):
        source = _config_path(name) if name else None
        found[role] = str(source) if source else None
        if source is not None:
            atomic_write_bytes(Path(root) / MODELS_DIR / engine_id / f"{role}.json", source.read_bytes())
    return found


def stored_model_configs(root: Path) -> dict[str, dict[str, dict | None]]:
    """{engine id: {"target": config or None, "draft": config or None}} for the configs a sweep stored."""
    out: dict[str, dict[str, dict | None]] = {}
    for folder in sorted((Path(root) / MODELS_DIR).glob("*/")):
        configs: dict[str, dict | None] = {}
        for role in ROLES:
            path = folder / f"{role}.json"
            try:
                configs[role] = json.loads(path.read_text()) if path.is_file() else None
            except (OSError, ValueError):
                configs[role] = None
        out[folder.name] = configs
    return out


def _config_path(name: str) -> Path | None:
    local = Path(name) / "config.json"
    if local.is_file():
        return local
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
    except Exception:  # not a hub id, no hub client: unknown
        return None
    return Path(cached) if isinstance(cached, str) and Path(cached).is_file() else None


# --- reading back ---------------------------------------------------------------------------------------------


def read_effective(log_text: str, metric_samples, records: list[dict] | None = None) -> dict:
    """What the server runs with: the log / metrics fields, overridden by the engine records where they know."""
    eff = _from_log(log_text, metric_samples)
    if records:
        eff.update(_from_records(records, eff))
    return eff


def _from_log(log_text: str, metric_samples) -> dict:
    backends = []
    for name in _BACKEND_RE.findall(log_text):
        if name not in backends:
            backends.append(name)
    cache_info = info_labels(metric_samples, "vllm:cache_config_info") or {}

    def first(regex):
        m = regex.search(log_text)
        return m.group(1) if m else None

    dcp = first(_DCP_RE)
    return {
        "source": "server log",
        "attention_backends_logged": backends,
        "target_attention_backend": backends[0] if backends else None,
        # vLLM logs the draft's selection only when it differs from the target's; unknown stays None.
        "draft_attention_backend": backends[1] if len(backends) > 1 else None,
        "kv_cache_dtype": cache_info.get("cache_dtype") or first(_KV_RE),
        "cudagraph_mode": first(_CUDAGRAPH_RE),
        "cudagraph_downgrade": _downgrade(log_text),
        "dcp_size": int(dcp) if dcp else None,
        "block_size": int(cache_info["block_size"]) if cache_info.get("block_size", "").isdigit() else None,
        "kv_cache_tokens": int(kv.replace(",", "")) if (kv := first(_KV_TOKENS_RE)) else None,
    }


def _from_records(records: list[dict], logged: dict) -> dict:
    """The summary of the lowest rank's record, the flat fields the points table reads, and a note when the
    ranks disagree."""
    summaries = [summarize_record(r) for r in records]
    out = {**summaries[0], "source": "engine record", "records": [r.get("path") for r in records]}
    out["ranks_differ"] = any(s != summaries[0] for s in summaries[1:])
    target, draft = out.get("target") or {}, out.get("draft") or {}
    flat = {
        "target_attention_backend": target.get("backend"),
        "draft_attention_backend": draft.get("backend"),
        "kv_cache_dtype": target.get("kv_cache_dtype"),
        "block_size": target.get("block_size"),
        "cudagraph_mode": out.get("cudagraph_mode"),
        "dcp_size": out.get("dcp_world_size"),
    }
    out.update({k: logged.get(k) if v is None else v for k, v in flat.items()})
    return out


def summarize_record(record: dict) -> dict:
    """One record as {target: {...}, draft: {...}} (None for a model with no layer) plus the engine fields."""
    out = {k: record.get(k) for k in _RECORD_FIELDS}
    layers = record.get("layers") or []
    for role in ROLES:
        mine = [layer for layer in layers if layer.get("role") == role]
        out[role] = (
            {"layers": len(mine), **{f: _one(lay.get(f) for lay in mine) for f in _LAYER_FIELDS}} if mine else None
        )
    out["unknown_layers"] = sum(layer.get("role") not in ROLES for layer in layers)
    return out


def _one(values) -> object:
    """The value all layers share; 'A | B' when they differ; None when none is known."""
    distinct = sorted({v for v in values if v is not None}, key=str)
    if not distinct:
        return None
    return distinct[0] if len(distinct) == 1 else " | ".join(map(str, distinct))


# --- asked vs ran ---------------------------------------------------------------------------------------------


def _downgrade(log_text: str) -> dict | None:
    m = _CUDAGRAPH_DOWNGRADE_RE.search(log_text)
    return {"asked": m.group(1), "ran": m.group(3), "because_of": m.group(2)} if m else None


def mismatches(engine: dict, effective: dict) -> list[str]:
    """Human-readable differences between what was asked and what ran (only where both are known)."""
    out = []
    if down := effective.get("cudagraph_downgrade"):
        out.append(
            f"cudagraph_mode: asked {down['asked']}, ran {down['ran']} for the whole engine "
            f"({down['because_of']} does not support it with spec decode)"
        )
    if effective.get("dcp_size") is not None and effective["dcp_size"] != engine["dcp_size"]:
        out.append(f"dcp_size: asked {engine['dcp_size']}, ran {effective['dcp_size']}")
    if engine.get("num_speculative_tokens", 1):
        out += _draft_flags(engine, effective)
    out += _target_flags(engine, effective)
    if effective.get("ranks_differ"):
        out.append("the workers' records differ between ranks: see effective/")
    return out


def _draft_flags(engine: dict, eff: dict) -> list[str]:
    asked = engine["draft_attention_backend"]
    ran, target_ran = eff.get("draft_attention_backend"), eff.get("target_attention_backend")
    out = []
    if asked != "auto" and ran is not None and _norm(ran) != _norm(asked):
        if eff.get("source") != "engine record":
            out.append(
                f"draft_attention_backend: asked {asked}, the server log shows the draft selecting {ran} "
                f"(backends logged in order: {', '.join(eff.get('attention_backends_logged') or [])})"
            )
        elif ran == target_ran:
            out.append(f"draft_attention_backend: asked {asked}, ran {ran}: the draft inherited the target's backend")
        else:
            out.append(f"draft_attention_backend: asked {asked}, ran {ran}")
    if eff.get("source") == "engine record":
        draft = eff.get("draft")
        if draft is None:
            out.append("draft: the engine record has no draft attention layer")
        else:
            model_dtype = eff.get("draft_model_dtype") or eff.get("model_dtype")
            out += _kv_flag("draft", engine["draft_kv_cache_dtype"], draft, model_dtype)
    return out


def _target_flags(engine: dict, eff: dict) -> list[str]:
    server = engine.get("server") or {}
    asked_backend, ran = server.get("attention_backend"), eff.get("target_attention_backend")
    out = []
    if asked_backend and ran is not None and _norm(ran) != _norm(asked_backend):
        out.append(f"target attention_backend: asked {asked_backend}, ran {ran}")
    asked_kv = str(server.get("kv_cache_dtype", "auto"))
    target = eff.get("target") if eff.get("source") == "engine record" else None
    if target is not None:
        out += _kv_flag("target", asked_kv, target, eff.get("model_dtype"))
    elif eff.get("kv_cache_dtype") is not None and _kv_name(eff["kv_cache_dtype"], None) != _kv_name(asked_kv, None):
        out.append(f"target kv_cache_dtype: asked {asked_kv}, ran {eff['kv_cache_dtype']}")
    return out


def _kv_flag(role: str, asked: str, ran: dict, model_dtype: str | None) -> list[str]:
    """A flag when a model's KV cache is not the asked dtype ("auto" = the model's dtype): by the layers'
    configured dtype, and by the cache's storage dtype (fp8 is stored as uint8 or a float8 type)."""
    configured, storage = ran.get("kv_cache_dtype"), ran.get("kv_spec_dtype")
    want, got = _kv_name(asked, model_dtype), _kv_name(configured, model_dtype)
    if got is None or (want == got and _stored_as(got, storage)):
        return []
    return [f"{role} kv_cache_dtype: asked {asked}, ran {configured} ({storage or '?'} cache)"]


def _stored_as(kv: str, storage: str | None) -> bool:
    """Whether a cache of KV dtype `kv` may be stored as `storage` (unknown storage, or a format other than
    fp8 and the float types, is not checked)."""
    if storage is None:
        return True
    if kv.startswith("fp8"):
        return storage == "uint8" or storage.startswith("float8")
    return storage == kv if kv in ("bfloat16", "float16", "float32") else True


def _kv_name(name: str | None, model_dtype: str | None) -> str | None:
    """A KV dtype in one vocabulary: 'auto' -> the model dtype (when known), 'fp8' -> 'fp8_e4m3', 'bf16' ->
    'bfloat16'."""
    if name is None:
        return None
    n = str(name).lower().removeprefix("torch.")
    if n == "auto":
        return model_dtype or "auto"
    return {"fp8": "fp8_e4m3", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}.get(n, n)


def _norm(backend: str) -> str:
    return str(backend).upper()
