"""The effective-configuration record: what each model in a vLLM worker really got, written from inside the worker
right after `compile_or_warm_up_model` (models loaded, KV cache allocated, graphs captured).

Why from inside: the server log names the draft's attention backend only when it differs from the target's, and
never the draft's KV cache dtype; the attention layers themselves hold the backend class and the KV dtype they run
with, and the runner's KV cache config holds the block size and storage dtype of every layer. A layer is the
target's when it is one of `runner.get_model()`'s modules, the draft's when it is one of `get_draft_model()`'s
(or, when vLLM has no such method, any other layer).

Active when BENCH_EFFECTIVE_DIR (`plugin.ENV_EFFECTIVE_DIR`) names a folder (the sweep sets it per server),
independently of BENCH_NVTX / BENCH_TIMING: `plugin.activate_record` then wraps the rows of
`targets.EFFECTIVE_HOOKS` with `after_hook`.
Cheap: one walk over the layers, once per worker. One JSON file per worker process, written to a temp file and
renamed. A failure is logged and vLLM goes on: the sweep then has only what the server log says.

Runs inside vLLM's processes: standard library only. vLLM's objects are read by attribute (never imported), so a
renamed attribute gives a null field, not an error.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.profiling.wrapping import MARK

RECORD_VERSION = 1
FILE_PREFIX = "effective-"
logger = logging.getLogger("vllm.bench_profiling.effective")  # a child of plugin.LOGGER_NAME
_DONE = "_bench_effective_recorded"  # set on a worker once its record is written (a subclass calling super)


def after_hook(out_dir: str | os.PathLike, version: str) -> Callable[[Callable, str], Callable]:
    """The `Profiler.wrap` factory: `fn` runs as before, then the worker's record is written into out_dir."""

    def wrap(fn: Callable, name: str) -> Callable:
        @functools.wraps(fn)
        def wrapper(self, *args, **kwargs):
            result = fn(self, *args, **kwargs)
            if not getattr(self, _DONE, False):
                write_record(self, out_dir, version)
            return result

        setattr(wrapper, MARK, name)
        return wrapper

    return wrap


def write_record(worker: Any, out_dir: str | os.PathLike, version: str) -> Path | None:
    """Build the worker's record and write it (temp + rename); never raises."""
    try:
        record = build_record(worker, version)
        rank = record.get("rank")
        path = Path(out_dir) / f"{FILE_PREFIX}rank{rank if rank is not None else 'x'}-pid{os.getpid()}.json"
        _atomic_write(path, json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
        with contextlib.suppress(Exception):  # a worker that refuses attributes gets written twice at most
            setattr(worker, _DONE, True)
        logger.info("bench: effective configuration recorded in %s", path)
        return path
    except Exception:
        logger.exception("bench: could not write the effective-configuration record; vLLM goes on without it")
        return None


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_record(worker: Any, version: str) -> dict:
    """Everything the record holds, read from the worker, its model runner and their vLLM config."""
    runner = getattr(worker, "model_runner", None)
    config = getattr(runner, "vllm_config", None) or getattr(worker, "vllm_config", None)
    spec_cfg = getattr(config, "speculative_config", None)
    layers = attention_layers(config)
    roles = layer_roles(runner, layers)
    kv_specs = kv_cache_specs(runner)
    return {
        "record_version": RECORD_VERSION,
        "pid": os.getpid(),
        "rank": _int(getattr(worker, "rank", None)),
        "local_rank": _int(getattr(worker, "local_rank", None)),
        "vllm_version": version,
        "worker_class": _qualname(type(worker)),
        "runner_class": _qualname(type(runner)) if runner is not None else None,
        "runner": runner_kind(worker, runner),
        "cudagraph_mode": _enum_name(_attr(config, "compilation_config", "cudagraph_mode")),
        "dcp_world_size": dcp_world_size(config),
        "dcp_loopback": dcp_loopback_summary(),
        "tensor_parallel_size": _int(_attr(config, "parallel_config", "tensor_parallel_size")),
        "model_dtype": dtype_name(_attr(config, "model_config", "dtype")),
        "draft_model_dtype": dtype_name(_attr(spec_cfg, "draft_model_config", "dtype")),
        "speculative_method": _str(getattr(spec_cfg, "method", None)),
        "num_speculative_tokens": _int(getattr(spec_cfg, "num_speculative_tokens", None)),
        "layers": [layer_row(name, layer, roles.get(name), kv_specs.get(name)) for name, layer in layers.items()],
    }


def attention_layers(config: Any) -> dict[str, Any]:
    """Every layer that registered itself for attention (target's and draft's: the draft's vLLM config is a
    shallow copy that shares the compilation config), by name."""
    context = _attr(config, "compilation_config", "static_forward_context") or {}
    return {str(k): v for k, v in dict(context).items() if hasattr(v, "attn_backend") or hasattr(v, "impl")}


def layer_roles(runner: Any, layers: dict[str, Any]) -> dict[str, str]:
    """'target' / 'draft' per layer name, by module membership. When only one of the two models can be walked,
    every other layer is the other one's; when neither (or a layer is in neither), 'unknown'."""
    target = _module_ids(runner, "get_model")
    draft = _module_ids(runner, "get_draft_model")
    roles = {}
    for name, layer in layers.items():
        if id(layer) in target or (draft and not target and id(layer) not in draft):
            roles[name] = "target"
        elif id(layer) in draft or (target and not draft):
            roles[name] = "draft"
        else:
            roles[name] = "unknown"
    return roles


def _module_ids(runner: Any, getter: str) -> set[int]:
    try:
        model = getattr(runner, getter)()
        return {id(m) for m in model.modules()} if model is not None else set()
    except Exception:
        return set()


def kv_cache_specs(runner: Any) -> dict[str, Any]:
    """The KV cache spec of every layer in the runner's KV cache config (a group's spec, or its per-layer spec
    when the group holds several)."""
    out = {}
    for group in getattr(getattr(runner, "kv_cache_config", None), "kv_cache_groups", None) or []:
        spec = getattr(group, "kv_cache_spec", None)
        per_layer = getattr(spec, "kv_cache_specs", None)
        for name in getattr(group, "layer_names", None) or []:
            out[str(name)] = per_layer.get(name, spec) if isinstance(per_layer, dict) else spec
    return out


def layer_row(name: str, layer: Any, role: str | None, spec: Any) -> dict:
    backend = getattr(layer, "attn_backend", None)
    impl = getattr(layer, "impl", None)
    return {
        "name": name,
        "role": role or "unknown",
        "layer_class": _qualname(type(layer)),
        "backend": backend_name(backend),
        "backend_class": _qualname(backend if isinstance(backend, type) else type(backend)) if backend else None,
        "impl_class": _qualname(type(impl)) if impl is not None else None,
        "kv_cache_dtype": _str(getattr(layer, "kv_cache_dtype", None)),
        "block_size": _int(getattr(spec, "block_size", None)),
        "kv_spec_dtype": dtype_name(getattr(spec, "dtype", None)),
        "kv_spec_cache_dtype": _str(getattr(spec, "cache_dtype_str", None)),
        "kv_spec_class": _qualname(type(spec)) if spec is not None else None,
    }


def backend_name(backend: Any) -> str | None:
    """The backend's own name (`get_name()`, e.g. TRITON_MLA), else its enum name."""
    if backend is None:
        return None
    try:
        return str(backend.get_name())
    except Exception:
        return _enum_name(backend)


def runner_kind(worker: Any, runner: Any) -> str | None:
    """'v2' / 'v1': the worker's own flag, else the runner's package (V2 runners live in v1/worker/{gpu,cpu}/)."""
    flag = getattr(worker, "use_v2_model_runner", None)
    if isinstance(flag, bool):
        return "v2" if flag else "v1"
    module = type(runner).__module__ if runner is not None else ""
    if module.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")):
        return "v2"
    return "v1" if module.startswith("vllm.v1.worker.") else None


def dcp_world_size(config: Any) -> int | None:
    """The decode-context-parallel group's size as initialised; the configured size when there is no group."""
    state = sys.modules.get("vllm.distributed.parallel_state")
    try:
        return int(state.get_dcp_group().world_size)  # type: ignore[union-attr]
    except Exception:
        return _int(_attr(config, "parallel_config", "decode_context_parallel_size"))


def dcp_loopback_summary() -> dict:
    """The loopback DCP group's size and its collectives' Python calls (empty when the process has none)."""
    module = sys.modules.get("bench.profiling.dcp_loopback")
    try:
        return dict(module.summary()) if module is not None else {}
    except Exception:
        return {}


def dtype_name(dtype: Any) -> str | None:
    """'bfloat16' for torch.bfloat16 (or the string 'bfloat16'); None when unknown."""
    if dtype is None:
        return None
    return str(dtype).removeprefix("torch.")


def _attr(obj: Any, *names: str) -> Any:
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _enum_name(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "name", None) or value)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
