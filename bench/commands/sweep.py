"""Run a plan into a results directory: a manifest, one record per point (skipped points included), resume.

Each engine configuration starts one server that serves all of its batch shapes (bench.run.executor). Failed and
skipped points are data with a classified reason; the sweep goes on. Nothing of the sweep survives it: servers
are stopped in `finally`, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from bench.config.plan import Plan, plan_sweep
from bench.core.clock import now
from bench.core.errors import BenchError
from bench.distributed.placement import NSYS_ON_NODE, is_cluster_outcome
from bench.engine.bandwidth import manifest_entry
from bench.engine.launch import CACHE_ENV, describe_plan, prompt_ids, refused_commands
from bench.engine.server import stop_leftover_servers
from bench.load.prompts import new_salt
from bench.results.environment import collect_environment
from bench.results.records import PointRecord, new_point
from bench.results.store import SweepStore
from bench.run.executor import WARM_RECORD, SweepContext, run_engine, warm_starts
from bench.run.progress import Progress, base_record

if TYPE_CHECKING:
    from bench.profiling.session import Capture

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    resume: bool = False  # continue the sweep already in the results directory
    rerun_failed: bool = False  # with resume: run its failed points again
    quiet: bool = False  # no progress lines
    draft_keys: str = "legacy"  # "legacy" draft_* keys (patched vLLM) or vLLM's own "upstream" ones
    extra_env: Mapping[str, str] = field(default_factory=dict)  # for every server
    capture: Capture | None = None  # profile every point run (bench.profiling.session)
    ray: str | None = None  # run the engine configs on the Ray cluster at this address (bench.distributed)
    ray_pins: Mapping[str, str] = field(default_factory=dict)  # engine id -> the only node id it may run on
    time_budget_s: float | None = None  # stop cleanly by then: no start that cannot fit, windows cut at the end
    warm_start: bool = False  # each engine with points to run started once unmeasured first (executor.warm_starts)
    check_outputs: int = 0  # greedy outputs on this many fixed prompts after each start (executor.record_outputs)


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """`bench sweep` as typed values."""

    profile: str | None  # a name in profiles/ or a .toml path (None: tiny)
    out: Path | None = None  # default: reports/<profile>-<time>
    platform: str | None = None  # plan for this platform (dry runs only, unless it is this machine's)
    points: list[str] | None = None  # only the points whose id starts with one of these
    repeat: int | None = None  # trials per point instead of the profile's
    resume: bool = False
    rerun_failed: bool = False
    quiet: bool = False
    profile_points: bool = False  # attach a capture to every point run
    nsys: str | None = None  # the nsys binary (default: found on PATH / known places)
    draft_keys: str = "legacy"
    ray: str | None = None  # a Ray cluster's address ("auto": RAY_ADDRESS / this node's); NxG describes one (dry run)
    ray_same_nodes: Path | None = None  # with ray: each engine config on the node that ran it in this results dir
    time_budget_s: float | None = None  # seconds this run may take (SweepOptions.time_budget_s)
    prompt_salt: str | None = (
        None  # names every prompt instead of a new salt (bench.load.prompts; `ab` shares a round's)
    )
    starts: int | None = None  # server starts per engine config instead of the profile's [run] starts
    warm_start: bool = False  # each engine's server started and stopped once first, unmeasured (executor.warm_starts)
    check_outputs: int = 0  # greedy outputs on this many fixed prompts after each server start (bench.load.outputs)


@dataclass(frozen=True)
class SweepOutcome:
    root: Path
    report: Path | None  # summary.md; None when building the report failed (the results are stored anyway)
    counts: dict[str, int]  # points by status: ok, failed, skipped
    capture_error: str | None = None  # with profile_points: the first failed or empty capture
    left: int = 0  # planned points without a record: the time budget ran out before them (--resume runs them)


def dry_run(request: SweepRequest) -> str:
    """What `request` would run, as text (the server commands with the draft keys the run would pass); starts
    and writes nothing, and needs no tokenizer."""
    plan = _plan(request, dry_run=True)
    if request.ray is not None:
        from bench.distributed.planning import describe_on_cluster

        return describe_plan(plan, request.draft_keys) + describe_on_cluster(plan, request.ray)
    return describe_plan(plan, request.draft_keys)


def sweep(request: SweepRequest) -> SweepOutcome:
    """Plan, run and report a sweep on this machine (or, with ray, on that cluster)."""
    pins = _pins(request)
    if request.time_budget_s is not None and request.ray is not None:
        raise BenchError("--time-budget is for a sweep on this machine, not with --ray")
    plan = _plan(request, dry_run=False)
    if request.ray is None and (refused := refused_commands(plan, request.draft_keys)):
        raise BenchError(
            "vLLM's own argument parser refuses the command of "
            + ("; ".join(refused))
            + ". Nothing was started; `bench sweep PROFILE --dry-run` shows every server's command"
        )
    out = request.out or Path("reports") / f"{plan.profile.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    from bench.profiling.session import Capture, capture_problem, find_nsys

    capture = None
    if request.profile_points:  # on a cluster the node that runs the server finds its nsys (or checks --nsys)
        nsys = (request.nsys or NSYS_ON_NODE) if request.ray is not None else find_nsys(request.nsys)
        capture = Capture(Path(out) / "profile", nsys)
    options = SweepOptions(
        resume=request.resume,
        rerun_failed=request.rerun_failed,
        quiet=request.quiet,
        draft_keys=request.draft_keys,
        capture=capture,
        ray=request.ray,
        ray_pins=pins,
        time_budget_s=request.time_budget_s,
        warm_start=request.warm_start,
        check_outputs=request.check_outputs,
    )
    if request.warm_start and (request.ray is not None or request.profile_points):
        raise BenchError("--warm-start is for a sweep on this machine without --ray or --profile-points")
    if request.check_outputs and request.ray is not None:
        raise BenchError("--check-outputs is for a sweep on this machine, not with --ray")
    starts = request.starts or plan.profile.run.starts
    if starts > 1:
        return _sweep_starts(plan, Path(out), options, starts)
    store = run_sweep(plan, out, options)
    done = store.records()
    records = done.values()
    statuses = [p.status for p in records]
    counts = {status: statuses.count(status) for status in ("ok", "failed", "skipped")}
    measured = {p.engine_id for p in records if p.status == "ok"}
    problem = capture_problem(capture.outputs, measured) if capture else None
    left = sum(1 for p in plan.runnable if p.id not in done)
    return SweepOutcome(store.root, build_report_safely(store.root), counts, capture_error=problem, left=left)


def _sweep_starts(plan: Plan, out: Path, options: SweepOptions, starts: int) -> SweepOutcome:
    """The plan on `starts` server starts of every engine config, into out/start-1 ... start-N: start k runs the
    engine configs in the plan's order, reversed on every second start (each config then meets the machine early
    and late), each start with its own prompt salt unless the profile pins one; a point's estimate over the starts
    is in out/starts.md (bench.report.starts). A resumed run resumes the starts it has and runs the rest."""
    if options.capture is not None or options.ray is not None:
        raise BenchError("--starts runs on this machine without --profile-points or --ray: run those per start")
    if options.time_budget_s is not None:
        raise BenchError("--starts with --time-budget: give each start its own run (--starts 1 --out .../start-k)")
    out.mkdir(parents=True, exist_ok=True)
    if not os.environ.get(CACHE_ENV) and CACHE_ENV not in options.extra_env:  # one compile cache over the starts,
        options = replace(options, extra_env={**options.extra_env, CACHE_ENV: str(out / "vllm-cache")})  # as served
    counts = {"ok": 0, "failed": 0, "skipped": 0}
    left = 0
    for k in range(1, starts + 1):
        order = plan.groups if k % 2 else list(reversed(plan.groups))
        root = out / f"start-{k}"
        done_before = (root / "manifest.json").exists()
        if done_before and not options.resume:
            raise BenchError(f"{root} already holds a start: pass --resume to continue, or another --out")
        log.info("start %d of %d -> %s", k, starts, root)
        store = run_sweep(replace(plan, groups=order), root, replace(options, resume=done_before))
        if (root / WARM_RECORD).exists():  # the first start that had work warmed the servers: the cache is shared
            options = replace(options, warm_start=False)
        records = store.records()
        for p in records.values():
            counts[p.status] = counts.get(p.status, 0) + 1
        left += sum(1 for p in plan.runnable if p.id not in records)
        build_report_safely(root)
    return SweepOutcome(out, build_starts_safely(out), counts, left=left)


def build_starts_safely(root: Path) -> Path | None:
    from bench.report.starts import build_starts_report

    try:  # the starts' results are stored whatever happens here; `bench report DIR` rebuilds it
        return build_starts_report(root)["starts_md"]
    except Exception as exc:
        log.exception("building the starts report failed: %s", exc)
        return None


def _pins(request: SweepRequest) -> dict[str, str]:
    if request.ray_same_nodes is None:
        return {}
    if request.ray is None:
        raise BenchError("--ray-same-nodes needs --ray")
    from bench.distributed.ledger import same_nodes_as

    return same_nodes_as(request.ray_same_nodes)


def _plan(request: SweepRequest, dry_run: bool) -> Plan:
    if request.ray is not None:  # planned for the cluster, not for this machine
        from bench.distributed.planning import ray_plan

        return ray_plan(
            request.ray,
            request.profile,
            repeat=request.repeat,
            points=request.points,
            dry_run=dry_run,
            prompt_salt=request.prompt_salt,
        )
    return plan_sweep(
        request.profile,
        platform=request.platform,
        dry_run=dry_run,
        repeat=request.repeat,
        points=request.points,
        prompt_salt=request.prompt_salt,
    )


def build_report_safely(root: Path) -> Path | None:
    from bench.report.build import build_report

    try:  # the results are stored whatever happens here; `bench report DIR` can rebuild the report
        return build_report(root)["summary"]
    except Exception as exc:
        log.exception("building the report failed: %s", exc)
        return None


def run_sweep(plan: Plan, out_dir: Path, options: SweepOptions | None = None) -> SweepStore:
    """Run every point of `plan` that the results directory lacks (or, with rerun_failed, failed)."""
    options = options or SweepOptions()
    store = SweepStore(out_dir)
    for engine, _ in plan.groups:  # a target whose prompt ids cannot be known fails before anything is written
        prompt_ids(engine.target)
    with _driver_lock(store.root):
        existing = _open_existing(store, plan, options.resume)
        if options.resume:  # before anything runs: on a GPU they hold the memory the resumed points need
            stop_leftover_servers(store.root / "logs")  # it logs what it stops
        _run_points(plan, store, existing, options)
    return store


def _run_points(plan: Plan, store: SweepStore, existing: dict[str, PointRecord], options: SweepOptions) -> None:
    deadline = None if options.time_budget_s is None else time.perf_counter() + options.time_budget_s
    groups = [(e, [p for p in pts if _needs_run(existing.get(p.id), options.rerun_failed)]) for e, pts in plan.groups]
    todo = [(e, pts) for e, pts in groups if pts]
    new_skips = [p for p in plan.skipped if p.id not in existing]
    resumed = bool(existing) or options.resume
    if resumed and not todo and not new_skips:  # nothing to measure: the manifest stays the one that measured
        salt = store.manifest().get("prompt_salt") or ""
    else:
        salt = _write_manifest(store, plan, options, resumed=resumed)
    for point in new_skips:
        store.save_point(new_point({**base_record(point), "status": "skipped", "reason": point.skip_reason}))
    progress = Progress(sum(len(pts) for _, pts in todo), options.quiet)
    progress.say(
        f"sweep {plan.profile.name}: {progress.total} points to run on {len(todo)} servers, "
        f"{len(plan.skipped)} skipped -> {store.root}"
    )
    ctx = SweepContext(
        store=store,
        progress=progress,
        plan=plan,
        draft_keys=options.draft_keys,
        extra_env=options.extra_env,
        capture=options.capture,
        salt=salt,
        deadline=deadline,
        ready_s=[r.server.ready_s for r in existing.values() if r.server.ready_s],
        check_outputs=options.check_outputs,
    )
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if options.warm_start and todo and options.ray is None and options.capture is None:
            warm_starts(ctx, todo)  # after the checks, under the driver lock, inside the time budget
        if options.ray is not None:
            from bench.distributed.driver import run_on_ray

            run_on_ray(ctx, todo, options.ray, options.ray_pins)
        else:
            for engine, points in todo:
                run_engine(ctx, engine, points)
    finally:
        progress.close()
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _driver_lock(root: Path) -> Iterator[None]:
    """One driver per results directory: a second one (a --resume while the first still runs) would stop the
    first one's servers as leftovers. The kernel drops the lock when the driver dies, however it dies."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".driver.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BenchError(f"another bench process is running a sweep in {root}") from None
        yield


def _write_manifest(store: SweepStore, plan: Plan, options: SweepOptions, resumed: bool) -> str:
    """Write the manifest; returns the prompt salt (a resumed run keeps the first run's: bench.load.prompts).

    `environment` is what the first session ran on; every session that ran (the first included) is in `sessions`,
    in order, so a resume on another lease or commit does not rewrite what earlier points ran on (a point's
    `started` places it in its session). A local resume on other GPUs or processor, another vLLM, other patch
    states or other draft keys refuses (`resume_differences`)."""
    on_cluster = options.ray is not None
    environment = collect_environment(plan.machine)
    if (bandwidth := manifest_entry(plan.machine, on_cluster=on_cluster)) is not None:  # GPU only
        environment["bandwidth"] = bandwidth  # the measured copy ceiling (bench.engine.bandwidth), or why there is none
    manifest = plan_manifest(plan, environment)
    manifest["draft_keys"] = options.draft_keys
    manifest["sessions"] = [environment]
    if resumed:  # keep the first run's creation time, environment and prompt salt; list the resumes
        old = store.manifest()
        first = old.get("environment") or environment
        was = {**first, "draft_keys": old.get("draft_keys", options.draft_keys)}
        differences = resume_differences(was, {**environment, "draft_keys": options.draft_keys}, on_cluster)
        if differences:
            raise BenchError(
                f"--resume: {store.root} was measured with {'; '.join(differences)}: its points would not compare "
                "with this session's; resume it where it ran, or start another --out"
            )
        manifest["created"] = old["created"]
        manifest["environment"] = first
        manifest["sessions"] = (old.get("sessions") or [first]) + [environment]
        manifest["resumed"] = old.get("resumed", []) + [now()]
        asked = plan.profile.run.prompt_salt
        if asked and old.get("prompt_salt") and asked != old["prompt_salt"]:
            raise BenchError(
                f"--resume: {store.root} sent its prompts with salt {old['prompt_salt']}, not {asked}: resume it "
                "with its own salt (or none), or start another --out"
            )
        manifest["prompt_salt"] = old.get("prompt_salt") or manifest["prompt_salt"]
        if old.get("migrations"):  # bench migrate's steps (bench/results/migrate.py)
            manifest["migrations"] = old["migrations"]
    store.write_manifest(manifest)
    return manifest["prompt_salt"]


def resume_differences(first: dict, now_env: dict, on_cluster: bool = False) -> list[str]:
    """What makes this session's measurements incomparable with the first session's, in words ([] when none): the
    draft keys; on this machine, its GPU model (or, on CPU, the processor and its cores) and the installed vLLM
    and patch states. On a Ray cluster those are the driver's, not the nodes' (whose GPUs each point's ledger
    entry names), and the cluster may grow or shrink between sessions (a resume re-runs lost and unplaced points),
    so only the draft keys are compared. The suite's commit, the driver and the host may change (each session's
    are kept in the manifest)."""

    def facts(env: dict) -> dict[str, object]:
        machine, vllm = env.get("machine") or {}, env.get("vllm") or {}
        out: dict[str, object] = {"draft keys": env.get("draft_keys")}
        if not on_cluster:
            out["hardware"] = (
                f"GPU {machine.get('gpu_name')}"
                if machine.get("platform") == "gpu"
                else f"CPU {machine.get('cpu')} ({machine.get('cpu_count')} cores)"
            )
            out["vLLM"] = f"{vllm.get('vllm_version')} ({vllm.get('distribution')})"
            out["patches"] = ", ".join(f"{f.get('fix')}: {f.get('state')}" for f in vllm.get("fixes") or []) or "-"
        return out

    was, is_ = facts(first), facts(now_env)
    return [f"{k} {was[k]}, this session {is_[k]}" for k in was if was[k] != is_[k]]


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
        "datasets": [d.provenance.model_dump(mode="json") for d in plan.datasets.values()],  # text workloads'
        "prompt_salt": plan.profile.run.prompt_salt or new_salt(),  # names every prompt (bench.load.prompts)
    }


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _open_existing(store: SweepStore, plan: Plan, resume: bool) -> dict[str, PointRecord]:
    if (store.root / "manifest.json").exists():
        if not resume:
            raise BenchError(f"{store.root} already holds a sweep: pass --resume to continue it, or another --out")
        old = store.manifest()
        if old["profile"]["name"] != plan.profile.name:
            raise BenchError(f"{store.root} holds sweep {old['profile']['name']!r}, not {plan.profile.name!r}")
        return store.records()
    if resume:
        raise BenchError(f"--resume: {store.root} holds no sweep to resume")
    return {}


def _needs_run(record: PointRecord | None, rerun_failed: bool) -> bool:
    if record is None or is_cluster_outcome(record):  # the cluster, not the config, stopped it: run it again
        return True
    if record.status == "skipped":
        return False
    return record.status != "ok" and rerun_failed
