"""Run a plan: one server per engine configuration, every batch shape against it, one record per point.

Failed and skipped points are data with a classified reason; the sweep goes on. Nothing of the sweep survives it:
servers are stopped in `finally`, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

from bench import metrics as M
from bench.effective import mismatches, read_effective
from bench.environment import collect_environment
from bench.errors import BenchError
from bench.loadgen import LoadAborted, make_prompts, run_load
from bench.models import VOCAB_SIZE, cache_folder, write_tiny_models
from bench.plan import EngineConfig, Plan, Point
from bench.server import (
    ENGINE_FATAL,
    Server,
    ServerFailed,
    ServerSpec,
    classify_log,
    free_port,
    server_argv,
    server_env,
)
from bench.store import SweepStore, atomic_write_json

log = logging.getLogger(__name__)
SERVED_NAME = "bench-target"
MODELS_CACHE = Path.home() / ".cache" / "bench" / "models"


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Progress:
    """Points done / total, the current point, and an ETA on stderr (silent when quiet)."""

    def __init__(self, total: int, quiet: bool):
        self.total, self.quiet, self.done, self.t0 = total, quiet, 0, time.monotonic()

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)

    def point(self, point: Point, what: str) -> None:
        eta = ""
        if self.done:
            left = (time.monotonic() - self.t0) / self.done * (self.total - self.done)
            eta = f", ETA {left / 60:.1f} min"
        self.say(f"[{self.done}/{self.total}{eta}] {point.id} {point.engine.label()} {point.shape.label}: {what}")

    def finished(self, point: Point, status: str, summary: str = "") -> None:
        self.done += 1
        self.say(f"[{self.done}/{self.total}] {point.id} {status} {summary}".rstrip())


def resolve_models(engine: EngineConfig, flavor: str) -> tuple[str, str, str | None, int]:
    """(target path/id, draft path/id, load format, vocab size) for an engine config."""
    if engine.target == "tiny":
        models = write_tiny_models(cache_folder(MODELS_CACHE, flavor, engine.weights), flavor, engine.weights)
        return str(models.target), str(models.draft), "dummy" if engine.weights == "dummy" else None, VOCAB_SIZE
    config = Path(engine.target) / "config.json"
    vocab = json.loads(config.read_text()).get("vocab_size", 1000) if config.exists() else 1000
    return engine.target, engine.draft, "dummy" if engine.weights == "dummy" else None, vocab


def server_spec(
    engine: EngineConfig, store: SweepStore, flavor: str, extra_env: dict | None = None, draft_keys: str = "legacy"
) -> tuple[ServerSpec, int]:
    target, draft, load_format, vocab = resolve_models(engine, flavor)
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
    env = server_env(run_dir, extra_env, cache_dir=cache)
    return ServerSpec(argv, env, store.log_path(engine.id), port), vocab


def plan_manifest(plan: Plan, environment: dict) -> dict:
    return {
        "created": now(),
        "profile": plan.profile.model_dump(mode="json"),
        "profile_text": Path(plan.profile.source).read_text() if Path(plan.profile.source).exists() else None,
        "machine_planned_for": plan.machine.to_dict(),
        "counts": plan.counts(),
        "environment": environment,
        "plan": [
            {"point_id": p.id, "engine_id": p.engine.id, "config": p.to_dict(), "skip_reason": p.skip_reason}
            for p in plan.runnable + plan.skipped
        ],
    }


def base_record(point: Point) -> dict:
    return {
        "point_id": point.id,
        "engine_id": point.engine.id,
        "config": point.to_dict(),
        "label": {"engine": point.engine.label(), "shape": point.shape.label},
    }


def run_sweep(
    plan: Plan,
    out_dir: Path,
    *,
    resume: bool = False,
    rerun_failed: bool = False,
    quiet: bool = False,
    flavor: str = "cpu",
    extra_env: dict | None = None,
    draft_keys: str = "legacy",
    capture=None,
) -> SweepStore:
    """capture: a bench.profiling.session.Capture to profile every point run (None: no profiling)."""
    store = SweepStore(out_dir)
    existing = _open_existing(store, plan, resume)
    manifest = plan_manifest(plan, collect_environment(plan.machine))
    manifest["draft_keys"] = draft_keys
    if existing or resume:  # keep the first run's creation time; list the resumes
        old = store.manifest()
        manifest["created"] = old["created"]
        manifest["resumed"] = old.get("resumed", []) + [now()]
    store.write_manifest(manifest)
    for point in plan.skipped:
        if point.id not in existing:
            store.save_point({**base_record(point), "status": "skipped", "reason": point.skip_reason})
    todo_groups = [(e, [p for p in pts if _needs_run(existing.get(p.id), rerun_failed)]) for e, pts in plan.groups]
    todo_groups = [(e, pts) for e, pts in todo_groups if pts]
    progress = Progress(sum(len(pts) for _, pts in todo_groups), quiet)
    progress.say(
        f"sweep {plan.profile.name}: {progress.total} points to run on {len(todo_groups)} servers, "
        f"{len(plan.skipped)} skipped -> {store.root}"
    )
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for engine, points in todo_groups:
            _run_engine(engine, points, store, progress, plan, flavor, extra_env, draft_keys, capture)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return store


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _open_existing(store: SweepStore, plan: Plan, resume: bool) -> dict:
    if (store.root / "manifest.json").exists():
        if not resume:
            raise BenchError(f"{store.root} already holds a sweep: pass --resume to continue it, or another --out")
        old = store.manifest()
        if old["profile"]["name"] != plan.profile.name:
            raise BenchError(f"{store.root} holds sweep {old['profile']['name']!r}, not {plan.profile.name!r}")
        return store.points()
    if resume:
        raise BenchError(f"--resume: {store.root} holds no sweep to resume")
    return {}


def _needs_run(record: dict | None, rerun_failed: bool) -> bool:
    if record is None or record["status"] == "skipped":
        return record is None
    return record["status"] != "ok" and rerun_failed


def _run_engine(engine, points, store, progress, plan, flavor, extra_env, draft_keys, capture) -> None:
    spec, vocab = server_spec(
        engine, store, flavor, {**(extra_env or {}), **(capture.env(engine.id) if capture else {})}, draft_keys
    )
    if capture:
        spec.argv = capture.wrap(spec.argv, engine.id)
    server = Server(spec)
    progress.point(points[0], f"starting server ({' '.join(spec.argv[3:])})" if not progress.quiet else "")
    started = now()
    try:
        try:
            ready_s = server.start(plan.profile.run.startup_timeout_s)
        except ServerFailed as exc:
            for p in points:
                _fail(store, progress, p, exc.reason, exc.detail, phase="startup", server_log=spec.log_path)
            return
        try:
            samples = M.parse_prometheus(M.scrape(server.base_url))
        except OSError:
            server.check_alive()
            samples = []
        effective = read_effective(server.log_text(), samples)
        flags = mismatches(engine.to_dict(), effective)
        server_info = {
            "argv": spec.argv,
            "started": started,
            "ready_s": ready_s,
            "pids": server.pids(),
            "log": str(spec.log_path.relative_to(store.root)),
        }
        for i, point in enumerate(points):
            try:
                _run_point(point, server, store, progress, plan, vocab, effective, flags, server_info, capture)
            except Exception as exc:
                if not isinstance(exc, (ServerFailed, LoadAborted)):
                    log.exception("point %s failed inside bench", point.id)
                    _fail(
                        store,
                        progress,
                        point,
                        "bench-error",
                        f"{type(exc).__name__}: {exc}",
                        phase="load",
                        server_log=spec.log_path,
                    )
                    exc = ServerFailed("bench-error", f"{type(exc).__name__}: {exc}")
                rest = points[i + 1 :]
                for p in rest:
                    _fail(
                        store,
                        progress,
                        p,
                        exc.reason,
                        f"server failed on point {point.id}: {exc.detail}",
                        phase="load",
                        server_log=spec.log_path,
                    )
                return
    finally:
        server.stop(grace_s=600 if capture and capture.nsys else 20)  # nsys finalizes its report on SIGTERM
        if capture:
            capture.finalize(engine.id, server.log_text())
            atomic_write_json(store.root / "profile" / "captures.json", capture.outputs)


def _run_point(point, server, store, progress, plan, vocab, effective, flags, server_info, capture=None) -> None:
    progress.point(point, "running")
    started, rows, trials, first = now(), [], [], None
    for trial in range(plan.profile.run.repeat):
        try:
            trial_rows, before, after = _run_trial(point, server, plan, vocab, trial, capture if trial == 0 else None)
        except (LoadAborted, ServerFailed) as exc:
            store.save_raw(point.id, rows + getattr(exc, "rows", []))
            _fail(
                store,
                progress,
                point,
                exc.reason,
                exc.detail,
                phase="load",
                server_log=server.spec.log_path,
                raw=store.raw_path(point.id),
            )
            raise
        first = before if trial == 0 else first
        rows += trial_rows
        trials.append({"trial": trial, "metrics": M.summarize(trial_rows), "spec_decode": M.spec_delta(before, after)})
    store.save_raw(point.id, rows)
    summary = M.summarize(rows)
    spec = M.spec_delta(first or {}, after)
    status = "ok" if summary["completed"] == summary["requests"] else "failed"
    store.save_point(
        {
            **base_record(point),
            "status": status,
            "reason": None if status == "ok" else "request-errors",
            "detail": None if status == "ok" else "; ".join(summary["error_samples"]),
            "started": started,
            "finished": now(),
            "metrics": summary,
            "spec_decode": spec,
            "trials": trials,
            "effective": effective,
            "mismatch": flags,
            "server": server_info,
            "raw": str(store.raw_path(point.id).relative_to(store.root)),
        }
    )
    progress.finished(
        point,
        status,
        f"{summary['output_throughput'] or 0:.1f} tok/s, acceptance "
        f"{_fmt(spec['acceptance_rate'])}, mean length {_fmt(spec['mean_acceptance_length'])}"
        + (f", {len(trials)} trials" if len(trials) > 1 else ""),
    )


def _run_trial(point, server, plan, vocab, trial: int, capture=None):
    """One measured pass over the point's prompts (warmup before the first only); fresh prompts per trial so
    that prefix caching cannot make later trials faster. Returns (rows, counters before, counters after)."""
    run = plan.profile.run
    warmup = point.warmup_prompts if trial == 0 else 0
    prompts = make_prompts(
        warmup + point.num_prompts, point.shape.input_len, vocab, seed=run.seed + point.shape.input_len + 1000 * trial
    )
    counters, records = {}, []

    def mark_measure_start():
        counters["before"] = _spec_counters(server)
        if capture:
            capture.start(server.base_url)

    try:
        run_load(
            server.base_url,
            SERVED_NAME,
            prompts=prompts,
            warmup_count=warmup,
            max_tokens=point.shape.output_len,
            concurrency=point.shape.concurrency,
            stall_s=run.stall_timeout_s,
            timeout_s=run.request_timeout_s,
            check_alive=server.check_alive,
            on_measure_start=mark_measure_start,
            records=records,
        )
        if capture:
            capture.stop(server.base_url)
        rows = [{**r.to_row(), "trial": trial} for r in records]
        if any(r["status"] != "ok" for r in rows):
            _check_engine(server)  # errors because the engine died: fail the engine config, classified
        return rows, counters.get("before", {}), _spec_counters(server)
    except (LoadAborted, ServerFailed) as exc:
        if isinstance(exc, LoadAborted):
            try:
                server.check_alive()  # a dead server explains a stall better than "hang"
            except ServerFailed as dead:
                exc = dead
        exc.rows = [{**r.to_row(), "trial": trial} for r in records]
        raise exc


def _check_engine(server: Server, settle_s: float = 3.0) -> None:
    """After request errors: raise ServerFailed if the server exits or its log shows a dead engine."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        server.check_alive()
        time.sleep(0.25)
    found = classify_log(server.log_text())
    if found and found[0] in ENGINE_FATAL:
        raise ServerFailed(found[0], f"requests failed; log: {found[1]}")


def _spec_counters(server: Server) -> dict:
    """Spec-decode counters now; a dead server raises ServerFailed, an unanswered scrape gives unknowns."""
    try:
        return M.spec_counters(M.parse_prometheus(M.scrape(server.base_url)))
    except OSError as exc:
        server.check_alive()
        log.warning("could not read /metrics: %s", exc)
        return {}


def _fmt(x):
    return "n/a" if x is None else f"{x:.3f}"


def _fail(store, progress, point, reason, detail, phase, server_log, raw=None) -> None:
    record = {
        **base_record(point),
        "status": "failed",
        "reason": reason,
        "detail": detail,
        "phase": phase,
        "finished": now(),
        "server": {"log": str(Path(server_log).relative_to(store.root))},
    }
    if raw is not None and Path(raw).exists():
        record["raw"] = str(Path(raw).relative_to(store.root))
    store.save_point(record)
    progress.finished(point, "FAILED", f"{reason}: {detail[:200]}")


def describe_plan(plan: Plan, flavor: str) -> str:
    """The --dry-run text: counts, each server's exact command and its points, the skipped points."""
    lines = [
        f"profile {plan.profile.name} ({plan.profile.source}) on {plan.machine.platform}"
        f"{' ' + str(plan.machine.gpus) + ' x ' + (plan.machine.arch or '?') if plan.machine.gpus else ''}",
        "counts: " + ", ".join(f"{k} {v}" for k, v in plan.counts().items()),
    ]
    for engine, points in plan.groups:
        target, draft, load_format = _display_models(engine, flavor)
        argv = server_argv(
            target, SERVED_NAME, 0, dict(engine.server), engine.speculative_config(draft), engine.dcp_size, load_format
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


def _display_models(engine: EngineConfig, flavor: str):
    if engine.target == "tiny":
        folder = cache_folder(MODELS_CACHE, flavor, engine.weights)
        return str(folder / "target"), str(folder / "draft"), "dummy" if engine.weights == "dummy" else None
    return engine.target, engine.draft, "dummy" if engine.weights == "dummy" else None


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in ' {}"') else arg
