"""`bench load --url URL PROFILE`: run a profile's workloads against a server that is already running (the user's
own Docker image, a cluster deployment), into the same results directory a sweep writes: the same point ids,
records, raw rows, report and compare.

The suite cannot change such a server's engine configuration, so the profile (or the points chosen with
--points) must ask for exactly one: an engine axis with several values is refused, naming it. What the server
says about itself is recorded: /v1/models (served name, root, max_model_len), /version, the /metrics families
and spec-decode counters (is it speculating, with how many positions), and whether its responses carry
per-request acceptance (vLLM --per-request-spec-decode-metrics); a difference from the profile is a mismatch
flag on every point. Everything is checked before anything is written: an unreachable URL is one BenchError.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.commands.sweep import SweepOutcome, plan_manifest
from bench.config.plan import EngineConfig, Plan, load_datasets, make_plan
from bench.config.profile import load_profile_variants
from bench.core.errors import BenchError
from bench.core.hardware import detect_machine, planned_machine
from bench.engine.server import ServerFailed
from bench.load import http_client as http
from bench.measure import metrics as M
from bench.results.environment import collect_environment
from bench.results.store import SweepStore
from bench.run.executor import RunningEngine, SweepContext, run_points
from bench.run.progress import Progress

ENGINE_AXES = ("draft_attention_backend", "draft_kv_cache_dtype", "dcp_size", "num_speculative_tokens")
PROBE_TIMEOUT_S = 10


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """`bench load` as typed values."""

    url: str  # the server's base URL, e.g. http://host:8000
    profile: str | None
    out: Path | None = None  # default: reports/<profile>-url-<time>
    model: str | None = None  # the served model to ask for (default: the server's only one)
    points: list[str] | None = None  # only the points whose id starts with one of these
    repeat: int | None = None
    quiet: bool = False
    server_log: Path | None = None  # the server's log file, read for contamination (compiles...) inside windows


@dataclass
class RemoteServer:
    """A running server the suite does not own: alive = /health answers (asked at most every 10 s, since the
    load's watchdog asks twice a second); its log only where the user names the file (`--server-log`), nothing to
    stop."""

    base_url: str
    log_path: Path | None = None
    last_ok: float = field(default_factory=time.monotonic)

    def check_alive(self) -> None:
        if time.monotonic() - self.last_ok < 10:
            return
        try:
            _get(self.base_url, "/health", timeout=2)
        except OSError as exc:
            raise ServerFailed("unreachable", f"{self.base_url}/health does not answer: {exc}") from None
        self.last_ok = time.monotonic()

    def log_text(self) -> str:
        """The named log file's text ("" without one: windows are then checked from /metrics only, and the
        records say so in `contamination_checked`)."""
        if self.log_path is None:
            return ""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError as exc:
            raise BenchError(f"--server-log {self.log_path}: cannot read it ({exc})") from None


def _get(base_url: str, path: str, timeout: float = PROBE_TIMEOUT_S) -> bytes:
    return http.get(base_url + path, timeout)


def probe_server(url: str, model: str | None) -> dict:
    """What the server says about itself (BenchError when it does not answer or serves no such model)."""
    base = url.rstrip("/")
    try:
        models = json.loads(_get(base, "/v1/models")).get("data") or []
    except (OSError, ValueError) as exc:
        raise BenchError(
            f"--url {url}: no OpenAI server answers /v1/models ({exc}); is it running and reachable?"
        ) from None
    names = [m.get("id") for m in models]
    if model is None and len(names) != 1:
        raise BenchError(
            f"--url {url} serves {len(names)} models ({', '.join(map(str, names))}): name one with --model"
        )
    served = model or names[0]
    if served not in names:
        raise BenchError(f"--url {url} has no model {served!r}; it serves {', '.join(map(str, names))}")
    info = next(m for m in models if m.get("id") == served)
    samples = _metrics(base)
    counters = M.spec_counters(samples)
    return {
        "url": base,
        "served_model": served,
        "root": info.get("root"),
        "max_model_len": info.get("max_model_len"),
        "models": models,
        "version": _json_or_none(base, "/version"),
        "metrics_families": sorted({name for name, _, _ in samples}),
        "speculative": counters["drafts"] is not None,
        "spec_positions": len(counters["per_position"] or []) or None,
    }


def _metrics(base: str) -> list:
    try:
        return M.parse_prometheus(_get(base, "/metrics").decode())
    except OSError:
        return []


def _json_or_none(base: str, path: str) -> dict | None:
    try:
        return json.loads(_get(base, path))
    except (OSError, ValueError):
        return None


def sends_request_spec(base: str, model: str) -> bool:
    """Whether the server's responses carry each request's acceptance: one short chat request, looked at."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    try:
        answer = json.loads(http.post(base + "/v1/chat/completions", body, timeout=60))
    except (OSError, ValueError):
        return False
    return bool((answer.get("metrics") or {}).get("speculative_decoding"))


def plan_for_url(request: LoadRequest) -> Plan:
    """The profile's points for the server: planned for the profile's [hardware] (the server's machine) where it
    says, else this one; only one engine configuration; datasets loaded. BenchError otherwise."""
    detected = detect_machine()
    variants = load_profile_variants(request.profile)
    hw = variants[detected.platform].hardware
    machine = planned_machine(detected, hw, None, dry_run=True)
    profile = variants[machine.platform]
    if request.repeat is not None:
        if request.repeat < 1:
            raise BenchError("--repeat must be >= 1")
        profile = profile.model_copy(update={"run": profile.run.model_copy(update={"repeat": request.repeat})})
    plan = make_plan(profile, machine)
    plan = plan.select(request.points) if request.points else plan
    if not plan.runnable:
        raise BenchError(f"{profile.name}: no runnable point ({'; '.join({str(p.skip_reason) for p in plan.skipped})})")
    engines = [e for e, _ in plan.groups]
    if len(engines) > 1:
        values = {a: {str(getattr(e, a)) for e in engines} for a in ENGINE_AXES}
        for name in {k for e in engines for k, _ in e.axes}:  # server axes (bench/config/axes.py)
            values[name] = {str(dict(e.axes).get(name)) for e in engines}
        shown = ", ".join(f"{a} ({', '.join(sorted(v))})" for a, v in values.items() if len(v) > 1)
        raise BenchError(
            f"{profile.name}: load --url cannot change the server's engine configuration, and the profile varies "
            f"{shown}: keep one value of each (or choose the points of one engine with --points)"
        )
    return load_datasets(Plan(plan.profile, plan.machine, plan.groups, [], plan.datasets, plan.text_demand))


def remote_effective(facts: dict, engine: dict) -> tuple[dict, list[str]]:
    """What the server let us learn, as the points' effective configuration, and where it differs from the
    profile's engine configuration (the mismatch flags)."""
    version = facts.get("version") or {}
    effective = {
        "source": "running server (load --url)",
        "url": facts["url"],
        "served_model": facts["served_model"],
        "model_root": facts.get("root"),
        "max_model_len": facts.get("max_model_len"),
        "vllm_version": version.get("version"),
        "speculative": facts["speculative"],
        "spec_positions": facts["spec_positions"],
        "request_spec": facts.get("request_spec", False),
    }
    flags = []
    k = engine["num_speculative_tokens"]
    if k and not facts["speculative"]:
        flags.append(f"num_speculative_tokens: asked {k}, the server's /metrics has no spec_decode counters")
    if not k and facts["speculative"]:
        flags.append("num_speculative_tokens: asked 0 (no draft), the server speculates")
    if k and facts["spec_positions"] and facts["spec_positions"] != k:
        flags.append(f"num_speculative_tokens: asked {k}, the server counts {facts['spec_positions']} positions")
    asked_len = {**(engine.get("server") or {}), **(engine.get("axes") or {})}.get("max_model_len")
    if asked_len and facts.get("max_model_len") and int(asked_len) != int(facts["max_model_len"]):
        flags.append(f"max_model_len: asked {asked_len}, the server has {facts['max_model_len']}")
    return effective, flags


def load_url(request: LoadRequest) -> SweepOutcome:
    """Probe the server, plan, then run every point against it into a new results directory and report."""
    facts = probe_server(request.url, request.model)
    if request.server_log is not None and not request.server_log.is_file():
        raise BenchError(f"--server-log {request.server_log}: no such file")
    plan = plan_for_url(request)
    engine, points = plan.groups[0]
    text = any(p.workload.is_text for p in points)
    facts["request_spec"] = bool(engine.num_speculative_tokens and text) and sends_request_spec(
        facts["url"], facts["served_model"]
    )
    vocab = _prompt_vocab(plan, engine, any(not p.workload.is_text for p in points))
    out = request.out or Path("reports") / f"{plan.profile.name}-url-{time.strftime('%Y%m%d-%H%M%S')}"
    store = SweepStore(out)
    if (store.root / "manifest.json").exists():
        raise BenchError(f"{store.root} already holds results: choose another --out")
    manifest = plan_manifest(plan, collect_environment(plan.machine))
    store.write_manifest({**manifest, "server_url": facts})
    effective, mismatch = remote_effective(facts, engine.to_dict())
    running = RunningEngine(
        RemoteServer(facts["url"], request.server_log),
        vocab,
        effective,
        mismatch,
        {"url": facts["url"]},
        facts["served_model"],
        facts["request_spec"],
    )
    progress = Progress(len(points), request.quiet)
    progress.say(f"load {plan.profile.name}: {len(points)} points against {facts['url']} -> {store.root}")
    salt = manifest["prompt_salt"]
    try:
        run_points(SweepContext(store=store, progress=progress, plan=plan, salt=salt), running, points)
    finally:
        progress.close()
    statuses = [p.status for p in store.records().values()]
    counts = {s: statuses.count(s) for s in ("ok", "failed", "skipped")}
    return SweepOutcome(store.root, _report(store.root), counts)


def _prompt_vocab(plan: Plan, engine: EngineConfig, needed: bool) -> Any:
    """What random-id prompts for this target draw from, as a sweep's (bench.engine.launch); nothing when the points
    send only text (a remote model's tokenizer need not be here then)."""
    from bench.engine.launch import resolve_models

    return resolve_models(engine, plan.flavor)[3] if needed else range(0)


def _report(root: Path) -> Path | None:
    from bench.report.build import build_report

    try:  # the results are stored whatever happens here; `bench report DIR` can rebuild the report
        return build_report(root)["summary"]
    except Exception:
        import logging

        logging.getLogger(__name__).exception("building the report failed")
        return None
