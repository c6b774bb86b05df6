"""A local sweep's progress (bench.run.progress.Progress) on the shared tracker and views, with a scripted clock."""

from __future__ import annotations

import io

from bench.run.progress import Progress, RichView
from tests.unit.test_distributed import Clock
from tests.unit.test_ray_driver import plan_for


def test_plain_lines_with_a_measured_eta_and_lanes_that_end():
    plan, clock, out = plan_for(), Clock(), io.StringIO()
    (e1, pts1), (e2, pts2) = plan.groups
    progress = Progress(4, quiet=False, stream=out, clock=clock)
    progress.starting(pts1[0], "vllm serve ...", len(pts1))
    clock.t = 30.0  # 30 s to start
    progress.running(pts1[0])
    clock.t = 40.0  # 10 s per point
    progress.finished(pts1[0], "ok", "100.0 tok/s")
    progress.running(pts1[1])
    clock.t = 50.0
    progress.finished(pts1[1], "FAILED", "engine-dead: gone")
    assert not progress.tracker.lanes, "the engine's lane ends with its last point"
    progress.starting(pts2[0], "vllm serve ...", len(pts2))
    progress.close()
    lines = out.getvalue().splitlines()
    label = e1.label()
    assert lines[0] == f"[sweep 0/4 points, ETA ?] local {label}: loading starting server (vllm serve ...)"
    assert lines[1] == f"[sweep 0/4 points, ETA ?] local {label}: running point 1 of 2 {pts1[0].id} {pts1[0].label}"
    # measured: 30 s start-up, 10 s a point; left: this lane's second point
    assert lines[2] == f"[sweep 1/4 points, ETA 0.2 min] local {label}: point 1 of 2 done {pts1[0].id} ok 100.0 tok/s"
    assert not any(": running" in line for line in (lines[2], lines[4])), "a finished point's line never says running"
    assert lines[4].startswith("[sweep 2/4 points") and "FAILED engine-dead: gone" in lines[4]
    # the next server: its start-up and two points, 30 + 2 x 10 s
    assert lines[5] == f"[sweep 2/4 points, ETA 0.8 min] local {e2.label()}: loading starting server (vllm serve ...)"


def test_a_server_already_up_gets_a_lane_with_the_points_left():
    plan, out = plan_for(), io.StringIO()
    _, pts = plan.groups[0]
    progress = Progress(2, quiet=False, stream=out, clock=Clock())
    progress.running(pts[0])  # bench load --url: no start
    assert "running point 1 of 2" in out.getvalue()


def test_quiet_says_nothing_and_a_terminal_view_draws_only_once_a_lane_exists():
    plan = plan_for()
    _, pts = plan.groups[0]
    quiet = io.StringIO()
    progress = Progress(2, quiet=True, stream=quiet)
    progress.say("hello")
    progress.starting(pts[0], "cmd", 2)
    progress.close()
    assert quiet.getvalue() == ""
    out = io.StringIO()
    view = RichView(Progress(2, quiet=True).tracker, out, tag="sweep")
    view.say("before any lane")
    view.tick()
    assert view.live is None, "no live table yet: a second view (the Ray driver's) may still take the terminal"
    view.tracker.add("a", "ENGINE", 2)
    view.tick()
    assert view.live is not None
    view.close()
    assert view.live is None and "sweep: 0/2 points" in out.getvalue()
