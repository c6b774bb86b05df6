"""The local executor: one engine configuration of a sweep on one server, its points one after another, one
record per point.

A server that does not start fails every point of its engine config. A point whose server dies or hangs fails
with the classified reason, and so do the points after it (they would have needed the same server). Failures are
records, not exceptions that end the sweep; Ctrl-C and SIGTERM do end it, and the server is stopped in
`finally` either way.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bench import affinity
from bench import metrics as M
from bench.effective import clear_records, load_records, mismatches, read_effective, record_env
from bench.fmt import fmt
from bench.launch import SERVED_NAME, server_spec
from bench.loadgen import LoadAborted, RequestRecord, TextSettings, run_conversations, run_load
from bench.plan import EngineConfig, Plan, Point, dataset_for
from bench.progress import Progress, base_record, now
from bench.server import ENGINE_FATAL, Server, ServerFailed, classify_log
from bench.store import SweepStore, atomic_write_json
from bench.waves import RandomLoad, random_trial
from bench.workloads.point import Sampling

if TYPE_CHECKING:
    from bench.profiling.session import Capture

log = logging.getLogger(__name__)


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

    def server_env(self, engine_id: str) -> dict[str, str]:
        capture = self.capture.env(engine_id) if self.capture else {}
        return {**self.extra_env, **record_env(self.store.root, engine_id), **capture}


class Serving(Protocol):
    """What the points need of a server: a started `Server`, or an already running one (bench.load_url)."""

    @property
    def base_url(self) -> str: ...

    def check_alive(self) -> None: ...

    def log_text(self) -> str: ...


@dataclass(frozen=True)
class RunningEngine:
    """A started server and what every point it serves records about it."""

    server: Serving
    vocab: Sequence[int]  # the token ids its prompts may use (bench.launch.prompt_ids)
    effective: dict  # the configuration the server really runs with (bench.effective)
    mismatch: list[str]  # where that differs from what the engine config asked for
    info: dict  # argv, start time, seconds to ready, pids, log: the record's "server"
    model: str = SERVED_NAME  # the served model name requests ask for
    request_spec: bool = False  # the server reports each request's acceptance (acceptance per category from it)


@dataclass(frozen=True)
class Trial:
    """One measured pass over a point's prompts: its raw rows, the spec-decode counters around it, the counts of
    each category measured in its own window (categories one after another), and its waves (bench.waves)."""

    rows: list[dict]
    before: dict
    after: dict
    windows: dict[str, dict] = field(default_factory=dict)
    waves: dict = field(default_factory=dict)


class PointAborted(Exception):
    """A point ended before its requests did: the server died or hung (reason classified), or the bench failed.
    `rows` holds the raw per-request rows recorded until then; they are stored with the failed point."""

    def __init__(self, reason: str, detail: str, rows: list[dict] | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.rows = reason, detail, list(rows or [])


def run_engine(ctx: SweepContext, engine: EngineConfig, points: list[Point]) -> None:
    """Start the server for `engine`, run `points` on it, stop it; every point ends up with a record."""
    spec, vocab = server_spec(engine, ctx.store, ctx.plan.flavor, ctx.server_env(engine.id), ctx.draft_keys)
    spec.argv += ctx.server_args
    setting = ctx.plan.profile.run.cpu_affinity  # cores this machine lacks: a user error before anything starts
    cores = affinity.pin_server(setting, spec.env, ctx.plan.machine.platform == "cpu", engine.server)
    text = any(p.workload.is_text for p in points)
    spec.argv += (flag := M.request_spec_args(engine.num_speculative_tokens, dict(engine.server), text))
    if ctx.capture:
        spec.argv = ctx.capture.wrap(spec.argv, engine.id)
    server = Server(spec)
    ctx.progress.starting(points[0], " ".join(spec.argv[3:]))
    try:
        try:
            running = _start(ctx, engine, server, vocab)
            running = dataclasses.replace(running, request_spec=bool(flag) or _asks_request_spec(engine))
        except ServerFailed as exc:
            seen = _seen(ctx, engine, server)
            for p in points:
                _fail(ctx, p, exc.reason, exc.detail, phase="startup", seen=seen)
            return
        with affinity.pinned_client(cores):
            running.info["cpu_affinity"] = affinity.applied(setting, cores, spec.env, running.info["pids"])
            run_points(ctx, running, points)
    finally:
        # nsys finalizes its report on SIGTERM: give it time.
        server.stop(grace_s=600 if ctx.capture and ctx.capture.nsys else 20)
        if ctx.capture:
            ctx.capture.finalize(engine.id, server.log_text())
            atomic_write_json(ctx.store.root / "profile" / "captures.json", ctx.capture.outputs)


def run_points(ctx: SweepContext, running: RunningEngine, points: list[Point]) -> None:
    """Run `points` one after another on `running`; when one ends the server (dead, hung), the later ones fail
    with its reason (they would have needed the same server)."""
    for i, point in enumerate(points):
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
    try:
        samples = M.parse_prometheus(M.scrape(server.base_url))
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
    rows: list[dict] = []
    trials: list[dict] = []
    first: dict | None = None
    after: dict = {}
    windows: dict[str, dict] = {}  # per category, over the trials
    warmup = None  # the first trial's warm-up waves (bench.waves)
    for number in range(ctx.plan.profile.run.repeat):
        try:
            trial = _run_trial(ctx, running, point, number)
        except PointAborted as exc:
            ctx.store.save_raw(point.id, rows + exc.rows)
            _fail(ctx, point, exc.reason, exc.detail, phase="load", raw=ctx.store.raw_path(point.id))
            raise
        first, warmup = (trial.before, trial.waves.get("warmup")) if number == 0 else (first, warmup)
        after = trial.after
        rows += trial.rows
        windows = {w: M.add_counts(windows.get(w), counts) for w, counts in trial.windows.items()}
        trials.append(
            {
                "trial": number,
                "metrics": M.summarize(trial.rows),
                "spec_decode": M.spec_delta(trial.before, after),
                "window": trial.waves.get("window"),  # the measured waves and the window's length
            }
        )
    ctx.store.save_raw(point.id, rows)
    summary = M.summarize(rows)
    spec = M.spec_delta(first or {}, after)
    status = "ok" if summary["completed"] == summary["requests"] else "failed"
    ctx.store.save_point(
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
            "warmup": warmup,
            "workload": _workload_record(ctx.plan, point, running),
            "categories": M.category_metrics(rows, windows, M.counter_delta(first or {}, after)),
            "effective": running.effective,
            "mismatch": running.mismatch,
            "server": running.info,
            "raw": str(ctx.store.raw_path(point.id).relative_to(ctx.store.root)),
        }
    )
    ctx.progress.finished(
        point,
        status,
        f"{summary['output_throughput'] or 0:.1f} tok/s, acceptance "
        f"{fmt(spec['acceptance_rate'], '.3f', missing='n/a')}, "
        f"mean length {fmt(spec['mean_acceptance_length'], '.3f', missing='n/a')}"
        + (f", {len(trials)} trials" if len(trials) > 1 else ""),
    )


def _run_trial(ctx: SweepContext, running: RunningEngine, point: Point, number: int) -> Trial:
    """One measured pass over the point's prompts or conversations (warmup before the first only). Raises
    PointAborted with the rows recorded so far."""
    server = running.server
    marks = _Marks(server, ctx.capture if number == 0 else None)
    records: list[RequestRecord] = []
    waves: dict = {}
    try:
        if point.workload.is_text:
            _text_load(ctx, running, point, number, marks, records)
        else:
            waves = _random_load(ctx, running, point, number, marks, records)
        if marks.capture:
            marks.capture.stop(server.base_url)
        rows = _rows(records, number)
        if any(r["status"] != "ok" for r in rows):
            _check_engine(server)  # errors because the engine died: fail the engine config, classified
        return marks.trial(rows, _spec_counters(server), waves)
    except LoadAborted as exc:
        try:
            server.check_alive()  # a dead server explains a stall better than "hang"
        except ServerFailed as dead:
            raise PointAborted(dead.reason, dead.detail, _rows(records, number)) from dead
        raise PointAborted(exc.reason, exc.detail, _rows(records, number)) from exc
    except ServerFailed as exc:
        raise PointAborted(exc.reason, exc.detail, _rows(records, number)) from exc


@dataclass
class _Marks:
    """The spec-decode counters at the start of each measured window (and the capture started at the first)."""

    server: Serving
    capture: Capture | None
    snapshots: list[tuple[str | None, dict]] = field(default_factory=list)

    def start(self, window: str | None = None) -> None:
        self.snapshots.append((window, _spec_counters(self.server)))
        if self.capture and len(self.snapshots) == 1:
            self.capture.start(self.server.base_url)

    def trial(self, rows: list[dict], after: dict, waves: dict) -> Trial:
        """The trial, with each named window's counts (a window ends where the next one starts)."""
        ends = [counters for _, counters in self.snapshots[1:]] + [after]
        windows = {w: M.counter_delta(b, a) for (w, b), a in zip(self.snapshots, ends) if w is not None}
        return Trial(rows, self.snapshots[0][1] if self.snapshots else {}, after, windows, waves)


def _random_load(ctx, running: RunningEngine, point: Point, number: int, marks: _Marks, records: list) -> dict:
    """Token-id prompts of exact length, in waves (bench.waves); fresh prompts per trial so that prefix caching
    cannot make later trials faster. Returns the trial's waves (warm-up, measured window)."""
    run, shape = ctx.plan.profile.run, point.shape
    assert shape is not None
    seed = run.seed + shape.input_len + 1000 * number
    load = RandomLoad(run_load, running.server, running.model, running.vocab, point, run, seed, records)
    return random_trial(load, point.warmup_prompts if number == 0 else 0, marks.start)


def _text_load(ctx, running: RunningEngine, point: Point, number: int, marks: _Marks, records: list) -> None:
    """A text workload's conversations through the chat API, picked anew per trial (categories taking turns).
    Without per-request acceptance from the server, each category is measured in its own /metrics window, one
    after another."""
    run, w = ctx.plan.profile.run, point.workload
    warmup = point.warmup_prompts if number == 0 else 0
    convs = dataset_for(ctx.plan, w).pick(warmup + point.num_prompts, seed=run.seed + 1000 * number)
    measure = convs[warmup:]
    categories = sorted({c.category for c in measure})
    apart = not running.request_spec and point.engine.num_speculative_tokens > 0 and len(categories) > 1
    windows: list[tuple[str | None, list]] = [(None, measure)]
    if apart:
        windows = [(c, [m for m in measure if m.category == c]) for c in categories]
    run_conversations(
        running.server.base_url,
        running.model,
        warmup=convs[:warmup],
        windows=windows,
        arrival=point.arrival,
        seed=run.seed + 1000 * number,
        settings=TextSettings(w.sampling or Sampling(), w.chat_template_kwargs, w.id),
        stall_s=run.stall_timeout_s,
        timeout_s=run.request_timeout_s,
        check_alive=running.server.check_alive,
        on_window_start=marks.start,
        records=records,
    )


def _workload_record(plan: Plan, point: Point, running: RunningEngine) -> dict:
    """What the point's workload asked for and where its text came from (the dataset's provenance)."""
    out = {**point.workload.describe(), "label": point.label, "request_spec": running.request_spec}
    if point.workload.is_text:
        out["provenance"] = dataset_for(plan, point.workload).provenance.model_dump(mode="json")
    return out


def _asks_request_spec(engine: EngineConfig) -> bool:
    """The profile's [server] turned vLLM's per-request acceptance on itself."""
    asked = dict(engine.server).get(M.REQUEST_SPEC_FLAG, "none")
    return bool(engine.num_speculative_tokens) and str(asked) != "none"


def _rows(records: list[RequestRecord], trial: int) -> list[dict]:
    return [{**r.to_row(), "trial": trial} for r in records]


def _check_engine(server: Serving, settle_s: float = 3.0) -> None:
    """After request errors: raise ServerFailed if the server exits or its log shows a dead engine."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        server.check_alive()
        time.sleep(0.25)
    found = classify_log(server.log_text())
    if found and found[0] in ENGINE_FATAL:
        raise ServerFailed(found[0], f"requests failed; log: {found[1]}")


def _spec_counters(server: Serving) -> dict:
    """Spec-decode counters now; a dead server raises ServerFailed, an unanswered scrape gives unknowns."""
    try:
        return M.spec_counters(M.parse_prometheus(M.scrape(server.base_url)))
    except OSError as exc:
        server.check_alive()
        log.warning("could not read /metrics: %s", exc)
        return {}


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
    store.save_point(record)
    ctx.progress.finished(point, "FAILED", f"{reason}: {detail[:200]}")
