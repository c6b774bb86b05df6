"""One trial of a point on a running server: its load, the /metrics counters around its window, and whether
anything contaminated the window (a compile, a preemption...), in which case it is measured again with fresh
prompts, at most `[run] remeasure` times (docs/measurement.md).

Random token-id points at a fixed concurrency run as a closed loop (bench.load.loadgen.run_closed_loop): a warm-up of
`warmup_waves` full waves at the point's own shape (trial 0 only), then C requests in flight until the window
rule (bench.measure.window.WindowRule) stops it. Points with an open-loop arrival keep `vllm bench serve`'s semantics (a
schedule of num_prompts requests, bench.load.loadgen.run_load). Text workloads send their conversations through the
chat API (bench.load.loadgen.run_conversations).
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from bench.config.plan import Plan, Point, dataset_for
from bench.engine.server import ServerFailed
from bench.load import http_client
from bench.load.loadgen import (
    ClosedLoop,
    LoadAborted,
    RequestRecord,
    TextSettings,
    make_prompt,
    run_closed_loop,
    run_conversations,
    run_load,
)
from bench.load.prompts import int_seed, prompt_name
from bench.measure import contamination
from bench.measure import metrics as M
from bench.measure import window as W
from bench.measure.failures import ENGINE_FATAL, classify_log
from bench.workloads.point import Sampling, Workload

if TYPE_CHECKING:
    from bench.profiling.session import Capture

log = logging.getLogger(__name__)


class Serving(Protocol):
    """What the points need of a server: a started `Server`, or an already running one (bench.commands.load_url)."""

    @property
    def base_url(self) -> str: ...

    def check_alive(self) -> None: ...

    def log_text(self) -> str: ...


@dataclass(frozen=True)
class TrialContext:
    """What one trial needs to know about its sweep and server."""

    plan: Plan
    server: Serving
    model: str
    vocab: Sequence[int]
    salt: str
    capture: Capture | None = None
    # per point: one request's lifetime at its shape (the warm-up's median, then the last block's loaded one), for the staggered start
    lifetimes: dict[str, float] = field(default_factory=dict)
    lifetime_from: dict[str, str] = field(default_factory=dict)  # per point: "warm-up" or "block N"
    deadline: float | None = None  # time.perf_counter's value at which the sweep's time budget ends (WindowRule)


@dataclass
class Trial:
    """One measured pass: its raw rows, the counters around it, how its load ran (`load`), what contaminated it (`contamination`),
    and the attempts measured before it and discarded (`discarded`: their events; their rows are in `rows`
    with phase "contaminated")."""

    rows: list[dict]
    before: dict
    after: dict
    load: dict = field(default_factory=dict)
    contamination: list[dict] = field(default_factory=list)
    discarded: list[dict] = field(default_factory=list)
    checked: tuple[str, ...] = ()  # where contamination was looked for: CHECKED_LOG and/or CHECKED_METRICS


class PointAborted(Exception):
    """A point ended before its requests did: the server died or hung (reason classified), or the bench failed.
    `rows` holds the raw per-request rows recorded until then; they are stored with the failed point."""

    def __init__(self, reason: str, detail: str, rows: list[dict] | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail, self.rows = reason, detail, list(rows or [])


def closed_loop_concurrency(point: Point) -> int | None:
    """C when the point's load is a closed loop at constant concurrency (random ids or text, not paced by an
    arrival rate), so that a steady window exists; None for an open-loop arrival."""
    arrival = point.arrival
    if arrival is None:
        return point.shape.concurrency if point.shape is not None else None
    return arrival.max_concurrency if not arrival.paced else None


def measured_trial(tc: TrialContext, point: Point, number: int) -> Trial:
    """Trial `number`, measured again with fresh prompts while its window is contaminated (at most
    run.remeasure times; the last attempt is kept, with its events). Raises PointAborted."""
    run = tc.plan.profile.run
    discarded: list[dict] = []
    old_rows: list[dict] = []
    for attempt in range(run.remeasure + 1):
        try:
            trial = _run_trial(tc, point, number, attempt)
        except PointAborted as exc:
            exc.rows = old_rows + exc.rows
            raise
        trial.contamination, trial.checked = _contamination(tc.server, trial, point)
        if not trial.contamination or attempt == run.remeasure:
            trial.rows = old_rows + trial.rows
            trial.discarded = discarded
            return trial
        discarded.append({"attempt": attempt, "events": trial.contamination, "load": trial.load})
        old_rows += [{**r, "phase": "contaminated"} if r["phase"] == "measure" else r for r in trial.rows]
        log.warning(
            "point %s trial %d: window contaminated (%s), measuring again",
            point.id,
            number,
            ", ".join(sorted({e["kind"] for e in trial.contamination})),
        )
    raise AssertionError("unreachable")


def _run_trial(tc: TrialContext, point: Point, number: int, attempt: int) -> Trial:
    """One measured pass over the point's prompts or conversations (the warm-up before trial 0's first attempt
    only). Raises PointAborted with the rows recorded so far."""
    server = tc.server
    marks = _Marks(server, tc.capture if number == 0 and attempt == 0 else None)
    records: list[RequestRecord] = []
    clock = {"perf": time.perf_counter(), "unix": time.time()}  # turns the records' clock into wall time
    try:
        if point.workload.is_text:
            load = _text_load(tc, point, number, attempt, marks, records)
        else:
            load = _random_load(tc, point, number, attempt, marks, records)
        if marks.capture:
            marks.capture.stop(server.base_url)
        rows = _rows(records, number, attempt)
        if any(r["status"] != "ok" for r in rows):
            _check_engine(server)  # errors because the engine died: fail the engine config, classified
        return marks.trial(rows, counters(server), {**load, "attempt": attempt, "clock": clock})
    except LoadAborted as exc:
        try:
            server.check_alive()  # a dead server explains a stall better than "hang"
        except ServerFailed as dead:
            raise PointAborted(dead.reason, dead.detail, _rows(records, number, attempt)) from dead
        raise PointAborted(exc.reason, exc.detail, _rows(records, number, attempt)) from exc
    except ServerFailed as exc:
        raise PointAborted(exc.reason, exc.detail, _rows(records, number, attempt)) from exc


@dataclass
class _Marks:
    """The counters at the start of the trial's measured window (and the capture started there)."""

    server: Serving
    capture: Capture | None
    before: dict | None = None

    def start(self) -> None:
        """At the measured window's start (once: a trial has one window)."""
        if self.before is None:
            self.before = counters(self.server)
            if self.capture:
                self.capture.start(self.server.base_url)

    def trial(self, rows: list[dict], after: dict, load: dict) -> Trial:
        """The trial, its counters from the start of its measured window to `after`."""
        return Trial(rows, self.before or {}, after, load)


def warmup_count(tc: TrialContext, point: Point, concurrency: int) -> int:
    """Warm-up requests: `warmup_waves` full waves at the point's concurrency, at least its warmup_prompts."""
    return max(point.warmup_prompts, tc.plan.profile.run.warmup_waves * concurrency)


def _random_load(tc: TrialContext, point: Point, number: int, attempt: int, marks: _Marks, records: list) -> dict:
    """Token-id prompts of exact length, each its own (bench.load.prompts). Returns how the load ran."""
    run, shape = tc.plan.profile.run, point.shape
    assert shape is not None
    first = number == 0 and attempt == 0

    def name(phase: str, i: int) -> str:
        return prompt_name(
            salt=tc.salt,
            point_id=point.id,
            trial=number,
            attempt=attempt,
            phase=phase,
            index=i,
            reuse=run.prompt_reuse,
            seed=run.seed,
            input_len=shape.input_len,
        )

    def prompt(phase: str, i: int) -> list[int]:
        return make_prompt(shape.input_len, tc.vocab, name(phase, i), style=run.prompt_ids)

    concurrency = closed_loop_concurrency(point)
    common: dict[str, Any] = dict(
        stall_s=run.stall_timeout_s,
        timeout_s=run.request_timeout_s,
        check_alive=tc.server.check_alive,
        records=records,
        workload=point.workload.id,
    )
    if concurrency is None:  # open loop: num_prompts by the arrival schedule, as vllm bench serve
        warmup = point.warmup_prompts if first else 0
        prompts = [prompt("warmup", i) for i in range(warmup)] + [
            prompt("measure", i) for i in range(point.num_prompts)
        ]
        run_load(
            tc.server.base_url,
            tc.model,
            prompts=prompts,
            warmup_count=warmup,
            max_tokens=shape.output_len,
            concurrency=shape.concurrency,
            on_measure_start=marks.start,
            arrival=point.arrival,
            seed=schedule_seed(tc.salt, point, number, attempt),
            **common,
        )
        return {"kind": "scheduled", "warmup": warmup}
    warmup = warmup_count(tc, point, concurrency) if first else 0
    rule = W.WindowRule(
        point.num_prompts, concurrency, run.window_s, run.target_precision, run.max_window_s, deadline=tc.deadline
    )
    used: dict[str, Any] = {}

    def stagger(warmup_rows: list[RequestRecord]) -> list[float]:
        """Each slot's delay before its first measured send (stagger_offsets): spread over one request's lifetime,
        the previous block's loaded one, or for the first block the warm-up's median latency; none when off or
        unknown."""
        done = [r.end_time - r.send_time for r in warmup_rows if r.status == "ok" and r.end_time is not None]
        if done and point.id not in tc.lifetimes:
            tc.lifetimes[point.id] = float(statistics.median(done))
            tc.lifetime_from[point.id] = "warm-up"
        lifetime = tc.lifetimes.get(point.id)
        if lifetime:  # what a window cut by the deadline leaves the requests in flight, with slack for the load
            rule.drain_s = max(1.5 * lifetime, 5.0)
        on = bool(run.stagger and lifetime and concurrency > 1)
        offsets = stagger_offsets(concurrency, lifetime or 0.0, stagger_seed(tc.salt, point, number, attempt))
        used["stagger_s"] = lifetime / concurrency if on and lifetime else 0.0
        used["stagger_offsets"] = offsets if on else []
        used["lifetime_s"], used["lifetime_from"] = lifetime, tc.lifetime_from.get(point.id)
        return offsets if on else []

    loop = ClosedLoop(concurrency, shape.output_len, warmup, prompt, rule.more, stagger)
    run_closed_loop(tc.server.base_url, tc.model, loop, on_measure_start=marks.start, **common)
    loaded = [r.end_time - r.send_time for r in records if r.phase == "measure" and r.status == "ok" and r.end_time]
    if loaded:  # the next block plans its stagger from this one's loaded lifetime, not the warm-up's unloaded one
        tc.lifetimes[point.id] = float(statistics.median(loaded))
        tc.lifetime_from[point.id] = f"block {number}"
    return {"kind": "closed-loop", "concurrency": concurrency, "warmup": warmup, **used, **rule.record()}


def stagger_offsets(concurrency: int, lifetime: float, seed: int) -> list[float]:
    """Stratified random phases: slot j sends its first request at (j + u_j) x lifetime / C, u_j uniform in
    [0, 1) from `seed`. Every block of a point draws its own, so the blocks sample the loop's phase (a closed loop of
    fixed-length requests keeps the phase it starts with: docs/measurement.md) while each slot still gets its own
    stretch of the lifetime, as an even stagger gives."""
    rng = random.Random(seed)
    return [(j + rng.random()) * lifetime / concurrency for j in range(concurrency)]


def stagger_seed(salt: str, point: Point, trial: int, attempt: int) -> int:
    """The seed of a block's stagger: the run's salt and the point's load (Point.load_id), so a speculating point and
    its k = 0 baseline start their blocks at the same phases."""
    return int_seed(f"{salt}/{point.load_id}/{trial}/{attempt}/stagger")


def reset_prefix_cache(base_url: str) -> bool:
    """Empty the server's prefix cache before a text trial (vLLM's `POST /reset_prefix_cache`, served with
    VLLM_SERVER_DEV_MODE=1, which the sweep sets for a server with text points): a dataset smaller than what one
    server is sent starts its order over, and the conversations sent again would hit what an earlier point left
    in the cache. False when the server has no such endpoint (a `load --url` server without dev mode) or refused
    (requests still running): the trial records it (`trials[].load.prefix_cache_reset`)."""
    try:
        body = http_client.post(f"{base_url}/reset_prefix_cache", None, timeout=30)
    except OSError:
        return False
    try:
        answer = json.loads(body or b"{}")
    except json.JSONDecodeError:
        return True  # a 2xx without JSON (older vLLM): done
    return bool(answer.get("success", True)) if isinstance(answer, dict) else True


def schedule_seed(salt: str, point: Point, trial: int, attempt: int) -> int:
    """The seed of an open loop's arrival schedule: the run's salt and the point's load (`Point.load_id`), not its
    engine, so a speculating point and its k = 0 baseline are sent requests at the same times (they were drawn
    apart: the ratio carried two schedules' noise)."""
    return int_seed(f"{salt}/{point.load_id}/{trial}/{attempt}/schedule")


def text_order_seed(salt: str, workload: Workload) -> int:
    """The seed of one run's order of a dataset: the run's salt and the dataset's source table, not the folder its
    relative paths start from (`dataset_key` has it), so the same salt replays the same conversations from any
    checkout or working directory."""
    return int_seed(f"{salt}/{json.dumps(workload.dataset, sort_keys=True)}")


def _text_load(tc: TrialContext, point: Point, number: int, attempt: int, marks: _Marks, records: list) -> dict:
    """A text workload's conversations through the chat API, picked anew per trial and attempt (categories
    taking turns), in one measured window."""
    run, w = tc.plan.profile.run, point.workload
    warmup = point.warmup_prompts if number == 0 and attempt == 0 else 0
    reuse = run.prompt_reuse
    dataset = dataset_for(tc.plan, w)
    samples: dict[str, Any] = {}
    if reuse:  # the seed of before the salt (run seed + 1000 x trial), so earlier runs' picks are reproduced
        seed = run.seed + 1000 * number
        convs = dataset.pick(warmup + point.num_prompts, seed=seed)
    else:  # one order per run and dataset, a stretch of it per point, trial and attempt: nothing sent twice
        seed = schedule_seed(tc.salt, point, number, attempt)
        start = tc.plan.sample_start(point, number, attempt, len(dataset.categories))
        order = text_order_seed(tc.salt, w)
        convs, again = dataset.take(warmup + point.num_prompts, seed=order, start=start)
        samples = {"start_round": start, "repeated": again, "conversations": len(dataset.conversations)}
    # One measured window of every category's conversations, as the k = 0 baseline gets: a category per window
    # (to read its acceptance from /metrics on a server without per-request numbers) ran at most that category's
    # conversations at once and added every window's ramp and drain, so the point measured another load than its
    # label and its baseline (found in review: 0.62x for identical servers). Per-category acceptance comes from the
    # server's per-request numbers, or from a workload per category (`categories = [...]`).
    reset = reset_prefix_cache(tc.server.base_url)  # under prompt_reuse too: the reuse is of picks, not of cache
    run_conversations(
        tc.server.base_url,
        tc.model,
        warmup=convs[:warmup],
        measured=convs[warmup:],
        arrival=point.arrival,
        seed=seed,
        settings=TextSettings(w.sampling or Sampling(), w.chat_template_kwargs, w.id),
        stall_s=run.stall_timeout_s,
        timeout_s=run.request_timeout_s,
        check_alive=tc.server.check_alive,
        on_measure_start=marks.start,
        records=records,
    )
    load = {"kind": "conversations", "warmup": warmup, "concurrency": closed_loop_concurrency(point)}
    load["prefix_cache_reset"] = reset
    return load | ({"samples": samples} if samples else {})


CHECKED_LOG, CHECKED_METRICS = "server log", "preemption counter"


def _contamination(server: Serving, trial: Trial, point: Point) -> tuple[list[dict], tuple[str, ...]]:
    """What ran inside the trial's headline window besides the load: compiles, graph captures, requests that are
    not the load's... from the server log (by timestamp), and preemptions from /metrics; and where it looked (a
    server the suite does not own has no log unless the user names it)."""
    events: list[dict] = []
    checked: tuple[str, ...] = ()
    if trial.after.get("cache"):
        checked += (CHECKED_METRICS,)
    preempted = M.cache_delta(trial.before.get("cache") or {}, trial.after.get("cache") or {})["preemptions"]
    if preempted:
        events.append({"kind": "preemption", "time": None, "line": f"vllm:num_preemptions_total +{preempted:g}"})
    spans = headline_spans(trial.rows, closed_loop_concurrency(point))
    text = server.log_text()
    if text:
        checked = (CHECKED_LOG, *checked)
    if not spans or not text:
        return events, checked
    offset = trial.load["clock"]["unix"] - trial.load["clock"]["perf"]
    found = [e for span in spans for e in contamination.events_in(text, span.start + offset, span.end + offset)]
    in_flight = closed_loop_concurrency(point)  # the load's own requests waiting for a prefill are not contamination
    found = [e for e in found if contamination.counts_as_contamination(e, in_flight)]
    if preempted is not None:  # the window's own counter is exact; a log line's count covers the 10 s before it
        found = [e for e in found if e.kind != "preemption"]
    return events + contamination.summary(found), checked


def headline_spans(rows: list[dict], concurrency: int | None) -> list[W.Span]:
    """The spans the trial's headline figures come from, one per closed-loop run (bench.measure.metrics.closed_runs: a
    category measured apart is its own run): the steady span of each, else the run's whole window (first send to
    last end)."""
    out = []
    for run in M.closed_runs([r for r in rows if r["phase"] == "measure"]):
        if concurrency is not None and (span := W.steady_span(run, concurrency)) is not None:
            out.append(span)
            continue
        ends = [r["end_time"] for r in run if r.get("end_time") is not None]
        if ends:
            out.append(W.Span(min(r["send_time"] for r in run), max(ends)))
    return out


def counters(server: Serving) -> dict:
    """Spec-decode, cache and served (bench.measure.metrics.SERVED_COUNTERS) counters now; a dead server raises
    ServerFailed, an unanswered scrape gives unknowns."""
    try:
        samples = M.parse_prometheus(http_client.scrape(server.base_url))
    except OSError as exc:
        server.check_alive()
        log.warning("could not read /metrics: %s", exc)
        return {}
    return {
        **M.spec_counters(samples),
        "cache": M.counter_totals(samples, M.CACHE_COUNTERS),
        "served": M.counter_totals(samples, M.SERVED_COUNTERS),
    }


def _rows(records: list[RequestRecord], trial: int, attempt: int) -> list[dict]:
    return [{**r.to_row(), "trial": trial, "attempt": attempt} for r in records]


def _check_engine(server: Serving, settle_s: float = 3.0) -> None:
    """After request errors: raise ServerFailed if the server exits or its log shows a dead engine."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        server.check_alive()
        time.sleep(0.25)
    found = classify_log(server.log_text())
    if found and found[0] in ENGINE_FATAL:
        raise ServerFailed(found[0], f"requests failed; log: {found[1]}")
