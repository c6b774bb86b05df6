"""`bench profile`: one sweep point under Nsight Systems (or the in-process timing mode when nsys is absent),
run as a one-point sweep with a capture attached, then its report; and `profile analyze` of an nsys export.
With `ray`, that one-point sweep runs on a cluster node like any `sweep --ray` (its profile files come back into
the results directory here), and nsys is the node's."""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from bench.config.plan import Plan, Point
from bench.core.errors import BenchError


@dataclass(frozen=True, kw_only=True)
class ProfileRequest:
    """`bench profile PROFILE` as typed values."""

    profile: str  # a name in profiles/ or a .toml path
    point: str | None = None  # a point id or prefix (default: the first runnable point)
    nsys: str | None = None  # the nsys binary (default: found on PATH / known places)
    no_nsys: bool = False  # the in-process timing mode even where nsys exists
    out: Path | None = None  # default: reports/profile-<profile>-<point>-<time>
    num_prompts: int | None = None  # measured requests (default: the point's); fewer = a smaller trace
    quiet: bool = False
    ray: str | None = None  # run the point on the Ray cluster at this address (bench.distributed)


@dataclass(frozen=True)
class ProfileJob:
    """A chosen point, ready to run: a plan of that point alone, where it goes, and the nsys to wrap it in."""

    plan: Plan
    point: Point
    out: Path
    nsys: str | None  # None: the in-process timing mode; placement.NSYS_ON_NODE: the cluster node's, if any
    quiet: bool
    ray: str | None = None


@dataclass(frozen=True)
class ProfileOutcome:
    root: Path  # the one-point sweep's results directory
    report_html: Path | None  # None: the report failed to build (logged); `bench report DIR` can retry
    captures: list[dict]  # what each capture produced, up to the first one that failed
    capture_error: str | None  # the first failed or empty capture (None: every capture worked)
    point_error: str | None = None  # why the point failed (None: it finished ok)


def prepare_profile(request: ProfileRequest) -> ProfileJob:
    """Choose the point and the capture mode for `request` on this machine (or its cluster); runs nothing."""
    plan = _plan(request)
    point = choose_point(plan, request.point, request.num_prompts)
    nsys = None if request.no_nsys else _nsys(request)
    stamp = f"{dt.datetime.now():%Y%m%d-%H%M%S}"
    out = request.out or Path("reports") / f"profile-{plan.profile.name}-{point.id}-{stamp}"
    single = Plan(plan.profile, plan.machine, [(point.engine, [point])], [])
    return ProfileJob(single, point, Path(out), nsys, request.quiet, request.ray)


def _plan(request: ProfileRequest) -> Plan:
    if request.ray is not None:  # planned for the cluster's platform and accelerators, as sweep --ray does
        from bench.distributed.planning import ray_plan

        return ray_plan(request.ray, request.profile, repeat=None, points=None)
    from bench.config.plan import make_plan
    from bench.config.profile import load_profile
    from bench.core.hardware import detect_machine

    machine = detect_machine()
    return make_plan(load_profile(request.profile, machine.platform), machine)


def _nsys(request: ProfileRequest) -> str | None:
    if request.ray is not None:  # the node that runs the server finds its own nsys, or checks the --nsys path
        from bench.distributed.placement import NSYS_ON_NODE

        return request.nsys or NSYS_ON_NODE
    from bench.profiling.session import find_nsys

    return find_nsys(request.nsys)


def choose_point(plan: Plan, prefix: str | None, num_prompts: int | None) -> Point:
    """The first runnable point (whose id starts with `prefix`), with `num_prompts` measured requests (at
    least its concurrency) when given. Raises BenchError naming why nothing can run."""
    if prefix:
        plan = plan.select([prefix])
    if not plan.runnable:
        reasons = "; ".join(f"{p.id}: {p.skip_reason}" for p in plan.skipped) or "no points"
        raise BenchError(f"nothing to profile in {plan.profile.name} on this machine ({reasons})")
    point = plan.runnable[0]
    if num_prompts:
        point = dataclasses.replace(point, num_prompts=max(num_prompts, point.concurrency or 1))
    return point


def run_profile(job: ProfileJob) -> ProfileOutcome:
    """Run the job's point with a capture attached, build its report, and check what each capture produced."""
    from bench.commands.sweep import SweepOptions, build_report_safely, run_sweep
    from bench.profiling.session import Capture, capture_problem

    capture = Capture(job.out / "profile", job.nsys)
    store = run_sweep(job.plan, job.out, SweepOptions(quiet=job.quiet, capture=capture, ray=job.ray))
    summary = build_report_safely(store.root)  # a report that fails to build must not hide the exit code
    report_html = summary.parent / "report.html" if summary else None
    record = store.records().get(job.point.id)
    if record is None:
        point_error: str | None = "missing (no record)"
    else:
        detail = f": {record.detail}" if record.detail else ""
        point_error = None if record.status == "ok" else f"{record.status} ({record.reason}{detail})"
    failed = next((i for i, item in enumerate(capture.outputs) if item.get("error")), len(capture.outputs))
    problem = capture_problem(capture.outputs, set() if point_error else {job.point.engine.id})
    return ProfileOutcome(store.root, report_html, capture.outputs[:failed], problem, point_error)
