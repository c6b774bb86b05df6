"""How an engine configuration becomes a `vllm serve` process: its models resolved (tiny ones generated), the
exact argv and environment, and the same commands as text for `sweep --dry-run`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from bench import kimi_rank
from bench.effective import store_model_configs
from bench.models import VOCAB_SIZE, cache_folder, write_tiny_models
from bench.plan import EngineConfig, Plan
from bench.server import ServerSpec, free_port, server_argv, server_env
from bench.store import SweepStore

SERVED_NAME = "bench-target"
MODELS_CACHE = Path.home() / ".cache" / "bench" / "models"


def resolve_models(engine: EngineConfig, flavor: str) -> tuple[str, str, str | None, int]:
    """(target path/id, draft path/id, load format, vocab size) for an engine config."""
    if engine.target == "tiny":
        models = write_tiny_models(cache_folder(MODELS_CACHE, flavor, engine.weights), flavor, engine.weights)
        return str(models.target), str(models.draft), _load_format(engine), VOCAB_SIZE
    if kimi_rank.is_kimi_rank(engine.target):  # generated per-rank configs, dummy weights
        spec = kimi_rank.parse_spec(engine.target)
        rank = kimi_rank.write_rank_models(kimi_rank.cache_folder(MODELS_CACHE, spec), spec)
        return str(rank.target), str(rank.draft), "dummy", spec.vocab
    config = Path(engine.target) / "config.json"
    vocab = json.loads(config.read_text()).get("vocab_size", 1000) if config.exists() else 1000
    return engine.target, engine.draft, _load_format(engine), vocab


def server_spec(
    engine: EngineConfig,
    store: SweepStore,
    flavor: str,
    extra_env: Mapping[str, str] | None = None,
    draft_keys: str = "legacy",
) -> tuple[ServerSpec, int]:
    """The server for `engine` on a free port, its log in the results directory; and the target's vocab size."""
    target, draft, load_format, vocab = resolve_models(engine, flavor)
    # The configs it runs, kept with the results: the report reads the model shapes from there.
    store_model_configs(store.root, engine.id, target, draft if engine.num_speculative_tokens else None)
    port = free_port()
    argv = server_argv(
        target,
        SERVED_NAME,
        port,
        dict(engine.server),
        engine.speculative_config(draft, draft_keys),
        engine.dcp_size,
        load_format,
    )
    run_dir = store.root / "run" / engine.id
    # BENCH_VLLM_CACHE shares vLLM's compile cache across sweeps too (A/B rounds of one config start faster).
    cache = Path(os.environ.get("BENCH_VLLM_CACHE") or store.root / "run" / "vllm-cache")
    env = server_env(run_dir, dict(extra_env or {}), cache_dir=cache)
    return ServerSpec(argv, env, store.log_path(engine.id), port), vocab


def describe_plan(plan: Plan) -> str:
    """The --dry-run text: counts, each server's exact command and its points, the skipped points."""
    machine = plan.machine
    lines = [
        f"profile {plan.profile.name} ({plan.profile.source}) on {machine.platform}"
        f"{' ' + str(machine.gpus) + ' x ' + (machine.arch or '?') if machine.gpus else ''}",
        "counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()),
    ]
    for engine, points in plan.groups:
        target, draft = _display_models(engine, plan.flavor)
        argv = server_argv(
            target,
            SERVED_NAME,
            0,
            dict(engine.server),
            engine.speculative_config(draft),
            engine.dcp_size,
            _load_format(engine),
        )
        lines.append(f"\nserver {engine.id}  [{engine.label()}]")
        lines.append("  python " + " ".join(_quote(a) for a in argv[1:]).replace("--port 0", "--port <free>"))
        for p in points:
            lines.append(f"  point {p.id}  shape {p.shape.label}  prompts {p.num_prompts} (+{p.warmup_prompts} warmup)")
    if plan.skipped:
        lines.append("\nskipped:")
        for p in plan.skipped:
            lines.append(f"  point {p.id}  [{p.engine.label()}] {p.shape.label}: {p.skip_reason}")
    return "\n".join(lines)


def _load_format(engine: EngineConfig) -> str | None:
    return "dummy" if engine.weights == "dummy" else None


def _display_models(engine: EngineConfig, flavor: str) -> tuple[str, str]:
    """Where the models will be, without generating tiny ones (a dry run writes nothing)."""
    if engine.target == "tiny":
        folder = cache_folder(MODELS_CACHE, flavor, engine.weights)
        return str(folder / "target"), str(folder / "draft")
    if kimi_rank.is_kimi_rank(engine.target):
        folder = kimi_rank.cache_folder(MODELS_CACHE, kimi_rank.parse_spec(engine.target))
        return str(folder / "target"), str(folder / "draft")
    return engine.target, engine.draft


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in ' {}"') else arg
