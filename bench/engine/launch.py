"""How an engine configuration becomes a `vllm serve` process: its models resolved (tiny ones generated), the
exact argv and environment, and the same commands as text for `sweep --dry-run`."""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.config import axes
from bench.config.plan import EngineConfig, Plan, Point
from bench.engine import vllm_argv
from bench.engine.server import ServerSpec, free_port, server_argv, server_env
from bench.measure.effective import store_model_configs
from bench.models import kimi_rank
from bench.models.models import SPECIAL_TOKENS, VOCAB_SIZE, cache_folder, write_tiny_models
from bench.models.prompt_vocab import prompt_vocab
from bench.profiling import dcp_loopback
from bench.results.store import SweepStore
from bench.workloads.sources import user_path

SERVED_NAME = "bench-target"
MODELS_CACHE = Path.home() / ".cache" / "bench" / "models"

# vLLM puts each request's acceptance in its response with this server flag (0.32 has it, 0.26.0 has not).
REQUEST_SPEC_FLAG = "per_request_spec_decode_metrics"
REQUEST_SPEC_NOTE = (
    "--per-request-spec-decode-metrics summary where the serving vLLM has it (acceptance per category from each "
    "response; vLLM 0.26.0 has not: then each category runs in its own /metrics window)"
)


def request_spec_args(num_speculative_tokens: int, server_args: dict, text_workloads: bool) -> list[str]:
    """The server flag that makes vLLM report each request's acceptance, for an engine that speculates and
    serves text workloads (acceptance per category) with a vLLM that has it; [] otherwise, or when the profile's
    [server] sets it already."""
    if not (num_speculative_tokens and text_workloads) or REQUEST_SPEC_FLAG in server_args:
        return []
    return ["--" + REQUEST_SPEC_FLAG.replace("_", "-"), "summary"] if vllm_has_request_spec_metrics() else []


def vllm_has_request_spec_metrics() -> bool:
    """Whether the installed vLLM (the one `vllm serve` runs here) has --per-request-spec-decode-metrics, read
    from its sources without importing it."""
    from bench.core.errors import BenchError
    from bench.patching import locate_vllm

    try:
        config = locate_vllm().root / "config" / "observability.py"
        return REQUEST_SPEC_FLAG in config.read_text(errors="replace")
    except (BenchError, OSError):
        return False


def resolve_models(engine: EngineConfig, flavor: str) -> tuple[str, str, str | None, Sequence[int]]:
    """(target path/id, draft path/id, load format, the token ids a prompt may use) for an engine config."""
    if engine.target == "tiny":
        models = write_tiny_models(cache_folder(MODELS_CACHE, flavor, engine.weights), flavor, engine.weights)
        return str(models.target), str(models.draft), _load_format(engine), prompt_ids(engine.target)
    if kimi_rank.is_kimi_rank(engine.target):  # generated per-rank configs, dummy weights
        spec = kimi_rank.parse_spec(engine.target)
        rank = kimi_rank.write_rank_models(kimi_rank.cache_folder(MODELS_CACHE, spec), spec)
        return str(rank.target), str(rank.draft), "dummy", prompt_ids(engine.target)
    return engine.target, engine.draft, _load_format(engine), prompt_ids(engine.target)


@functools.cache
def prompt_ids(target: str) -> Sequence[int]:
    """The token ids a random-id prompt for `target` may use: in its tokenizer, no special id. The generated
    models' tokenizer is the suite's own (its specials first, then ordinary tokens up to the vocab size), known
    without loading it; any other target's is read offline with vLLM's loader (bench.models.prompt_vocab), and one
    that cannot be found is a BenchError, never a guessed vocab."""
    if target == "tiny":
        return range(len(SPECIAL_TOKENS), VOCAB_SIZE)
    if kimi_rank.is_kimi_rank(target):
        return range(len(SPECIAL_TOKENS), kimi_rank.parse_spec(target).vocab)
    return prompt_vocab(target).allowed()


CACHE_ENV = "BENCH_VLLM_CACHE"  # where vLLM's compile cache lives (VLLM_CACHE_ROOT of every server)
TEXT_SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
"""What a server with text points gets (bench.run.executor.run_engine): vLLM's dev endpoints, for POST
/reset_prefix_cache before each text trial (bench.run.trial.reset_prefix_cache)."""


def server_spec(
    engine: EngineConfig,
    store: SweepStore,
    flavor: str,
    extra_env: Mapping[str, str] | None = None,
    draft_keys: str = "legacy",
) -> tuple[ServerSpec, Sequence[int]]:
    """The server for `engine` on a free port, its log in the results directory; and the token ids its prompts
    may use."""
    target, draft, load_format, ids = resolve_models(engine, flavor)
    # The configs it runs, kept with the results: the report reads the model shapes from there.
    store_model_configs(store.root, engine.id, target, draft if engine.num_speculative_tokens else None)
    port = free_port()
    argv = engine_argv(engine, target, draft, load_format, port, draft_keys)
    run_dir = store.root / "run" / engine.id
    # BENCH_VLLM_CACHE shares vLLM's compile cache across sweeps too (A/B rounds of one config start faster); a
    # sweep's own extra_env may set it (`--starts`: one cache over the starts).
    extra: dict[str, str] = dict(extra_env or {})
    cache = Path(extra.pop(CACHE_ENV, "") or os.environ.get(CACHE_ENV) or store.root / "run" / "vllm-cache")
    if engine.dcp_loopback:  # the plugin installs the loopback DCP group in every vLLM process of this server
        extra[dcp_loopback.ENV] = str(engine.dcp_size)
    env = server_env(run_dir, extra, cache_dir=cache)
    return ServerSpec(argv, env, store.log_path(engine.id), port), ids


def engine_argv(
    engine: EngineConfig, target: str, draft: str, load_format: str | None, port: int, draft_keys: str
) -> list[str]:
    """The `vllm serve` argv of `engine`: what a sweep runs and what its --dry-run shows."""
    spec = engine.speculative_config(draft, draft_keys)
    return server_argv(target, SERVED_NAME, port, engine.serve_args, spec, engine.dcp_size, load_format)


def measurement_line(run) -> str:
    """How every point is measured, in one line of the dry run (docs/measurement.md)."""
    window = "closed loop of >= max(num_prompts, 5 x concurrency) requests" + (
        f" and >= {run.window_s:g} s" if run.window_s else ""
    )
    if run.target_precision:
        window += f", until +-{run.target_precision:.1%} (95%) on steady tok/s or {run.max_window_s:g} s"
    blocks = (
        f"{run.repeat} blocks of it, each restarted at its own random phase"
        if run.repeat > 1
        else "one block (no phase sampled)"
    )
    text = f"warm-up {run.warmup_waves} wave(s) at the point's shape; {window}; {blocks}; headline over whole cycles"
    if run.starts > 1:
        text += f"; on {run.starts} server starts (OUT/start-k, starts.md)"
    text += f"; contaminated windows re-measured up to {run.remeasure}x"
    text += "; prompts shared by points of one input length (prompt_reuse)" if run.prompt_reuse else "; fresh prompts"
    if run.prompt_ids != "uniform":
        text += f" of {run.prompt_ids} token ids"
    return text


def planned_argv(plan: Plan, engine: EngineConfig, points: list[Point], draft_keys: str = "legacy") -> list[str]:
    """One planned server's command line as the run would pass it (models named, not generated; port 0): the draft's
    backend / KV dtype under `draft_keys`, and the per-request acceptance flag unless the plan is for another machine
    (the vLLM there may lack it: 0.26.0 does)."""
    target, draft = _display_models(engine, plan.flavor)
    argv = engine_argv(engine, target, draft, _load_format(engine), 0, draft_keys)
    if plan.machine.cpu != "(planned)":
        argv += request_spec_args(engine.num_speculative_tokens, engine.serve_args, _has_text(points))
    return argv


def describe_plan(plan: Plan, draft_keys: str = "legacy", check_flags: bool = True) -> str:
    """The --dry-run text: counts, each server's exact command (the draft's backend / KV dtype under the keys
    `draft_keys` names, as the run passes them), whether the installed vLLM's parser takes it (bench.engine.vllm_argv;
    `check_flags`), its points, the skipped points."""
    machine = plan.machine
    lines = [
        f"profile {plan.profile.name} ({plan.profile.source}) on {machine.platform}"
        f"{' ' + str(machine.gpus) + ' x ' + (machine.arch or '?') if machine.gpus else ''}",
        "counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()),
    ]
    run = plan.profile.run
    lines.append("run: " + measurement_line(run))
    for engine, points in plan.groups:
        argv = planned_argv(plan, engine, points, draft_keys)
        planned_elsewhere = machine.cpu == "(planned)"
        lines.append(f"\nserver {engine.id}  [{engine.label()}]")
        if engine.dcp_loopback:
            lines.append(
                f"  {dcp_loopback.ENV}={engine.dcp_size}: vLLM's DCP code as rank 0 of {engine.dcp_size} identical ranks "
                "on a loopback group (collectives local; their NVLink cost modelled apart)"
            )
        if _has_text(points):
            env = " ".join(f"{k}={v}" for k, v in TEXT_SERVER_ENV.items())
            lines.append(f"  {env}: POST /reset_prefix_cache before each text trial")
        lines.append("  python " + " ".join(_quote(a) for a in argv[1:]).replace("--port 0", "--port <free>"))
        if check_flags:
            checked, problem = vllm_argv.check(argv)
            if problem:
                lines.append(f"  ! {problem}" if checked else f"  (flags not checked: {problem})")
        if planned_elsewhere and engine.num_speculative_tokens and _has_text(points):
            lines.append(f"  + {REQUEST_SPEC_NOTE}")
        for p in points:
            lines.append(f"  point {p.id}  {_load_line(p, run.warmup_waves)}")
    if plan.skipped:
        lines.append("\nskipped:")
        for p in plan.skipped:
            lines.append(f"  point {p.id}  [{p.engine.label()}] {p.label}: {p.skip_reason}")
    return "\n".join(lines)


def refused_commands(plan: Plan, draft_keys: str = "legacy") -> list[str]:
    """Each planned server whose command line the installed vLLM's own parser refuses (bench.engine.vllm_argv): a
    value of the wrong type under `[axes.server]` (`max_num_seqs = "x"`), a flag this vLLM lacks. Checked before a
    sweep starts any server, so that a typo costs seconds, not a server start per engine. Empty when every command
    parses, or when no parser can be had here (a vLLM on another machine: the dry run says so). Only a plan with an
    undeclared `[axes.server]` flag is checked: the declared axes are typed and checked at load, and importing the
    parser costs every sweep 5-12 s on a 2-core machine."""
    if all(name in axes.AXES for name in plan.profile.axes.server):
        return []
    problems = []
    for engine, points in plan.groups:
        checked, problem = vllm_argv.check(planned_argv(plan, engine, points, draft_keys))
        if not checked:
            return []
        if problem:
            problems.append(f"server {engine.id} [{engine.label()}]: {problem}")
    return problems


def _load_line(point: Point, warmup_waves: int) -> str:
    """A point's load in the dry run: its shape and prompts, or its text workload (dataset, sampling, arrival)."""
    c = point.shape.concurrency if point.shape is not None else 0
    n = f"{point.num_prompts} (+{max(point.warmup_prompts, warmup_waves * c)} warmup)"
    if not point.workload.is_text:
        return f"shape {point.label}  prompts {n}"
    dataset = ", ".join(f"{k}={v}" for k, v in (point.workload.dataset or {}).items())
    kwargs = point.workload.chat_template_kwargs
    kwargs_text = f"  chat_template_kwargs {kwargs}" if kwargs else ""
    path = (point.workload.dataset or {}).get("path")
    missing = ""
    if path and not user_path(path, Path(point.workload.base_dir)).exists():
        missing = "  MISSING: the sweep refuses to start until `path` names your copy (or --points leaves it out)"
    return f"workload {point.label}  [{dataset}]  conversations {n}{kwargs_text}{missing}"


def _has_text(points: list[Point]) -> bool:
    return any(p.workload.is_text for p in points)


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
    return shlex.quote(arg)
