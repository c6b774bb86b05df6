"""The phases a node reports and the live view shows: `capturing` (the server's CUDA graph capture, seen in its log:
part of the start-up), `running point i of n, profiled` when a capture is attached, and `exporting` while the
capture is exported after the server stopped."""

from __future__ import annotations

import io
import json
import queue

from bench.distributed import worker
from bench.distributed.node_runner import EventCapture, EventProgress
from bench.run.progress import PlainView, Tracker
from tests.unit.test_distributed import Clock
from tests.unit.test_ray_driver import plan_for


class Runner:
    def wait(self):
        return 0


def test_a_cuda_graph_capture_in_the_server_log_is_the_capturing_phase(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "SYNC_S", 0.01)
    log = tmp_path / "logs" / "server-e1.log"
    log.parent.mkdir()
    log.write_bytes(b"INFO loading weights\n")
    events: queue.Queue = queue.Queue()
    stream = worker._stream(tmp_path, events, Runner())
    assert next(stream) == {
        "event": "sync",
        "files": [],
        "appends": [("logs/server-e1.log", b"INFO loading weights\n")],
    }
    with open(log, "ab") as fh:
        fh.write(b"INFO Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%\n")
    assert next(stream) == {"event": "phase", "phase": "capturing", "point": None}
    assert next(stream)["event"] == "sync"
    events.put({"event": "phase", "phase": "running", "point": "p1", "index": 1, "profiled": True})
    assert next(stream)["phase"] == "running"
    with open(log, "ab") as fh:  # graphs captured again later (a new shape) is no new start-up phase
        fh.write(b"Capturing CUDA graph\n")
    events.put({"event": "exited"})
    assert [e["event"] for e in stream] == ["sync", "end"]


def test_the_view_counts_capturing_as_start_up_and_shows_profiled_points_and_the_export():
    clock = Clock()
    tracker = Tracker(total=2, lanes_max=1, clock=clock)
    tracker.add("a", "A", 2)
    tracker.phase("a", "loading")
    clock.t = 30.0
    tracker.phase("a", "capturing")
    assert tracker.phase_text(tracker.lanes["a"]) == "capturing"
    clock.t = 50.0
    tracker.phase("a", "running", 1, profiled=True)
    assert tracker.startups == [50.0], "start-up runs from loading through capturing"
    out = io.StringIO()
    PlainView(tracker, out).changed("a")
    assert out.getvalue() == "[ray 0/2 points, ETA ?] - A: running point 1 of 2, profiled\n"
    tracker.phase("a", "exporting")
    assert tracker.phase_text(tracker.lanes["a"]) == "exporting the profile"


def test_the_node_runner_reports_profiled_points_and_the_export(tmp_path):
    out = io.StringIO()
    engine, points = plan_for().groups[0]
    progress = EventProgress(2, out, profiled=True)
    progress.starting(points[0], "...")  # the calls bench.run.executor makes
    progress.running(points[0])
    capture = EventCapture(tmp_path / "profile", None, out)
    result = capture.finalize(engine.id)  # timing mode, nothing recorded: an error in the result, not raised
    assert "error" in result and capture.outputs == [result]
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {"event": "phase", "phase": "loading", "point": None},
        {"event": "phase", "phase": "running", "point": points[0].id, "index": 1, "profiled": True},
        {"event": "phase", "phase": "exporting", "point": None},
    ]
