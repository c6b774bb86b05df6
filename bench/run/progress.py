"""What a run says while it runs, and the fields every point record starts with. One progress system for a local
sweep, `bench load --url` and a sweep spread over a Ray cluster: a `Tracker` holds the state (one lane per engine
configuration in flight: its node, phase, points done) and the ETA from the start-up and point times measured so
far, and a view renders it: rich's live table when stderr is a terminal, one plain line per change otherwise (logs,
CI), nothing when quiet. `Progress` is the executor's calls (a server starting, a point running, a point done) on
them; the Ray driver drives the tracker from its workers' events. The tracker takes its clock as a parameter, so
the arithmetic is tested with a scripted clock; the views only render it. Also the record's identity (point, engine,
config, labels); its UTC timestamps come from bench.core.clock."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, TextIO

from bench.config.plan import Point


def base_record(point: Point) -> dict:
    return {
        "point_id": point.id,
        "engine_id": point.engine.id,
        "config": point.to_dict(),
        "label": {"engine": point.engine.label(), "shape": point.label, "workload": point.workload.id},
    }


@dataclass
class Lane:
    """One unit of work (an engine configuration's attempt) as the view shows it."""

    label: str  # the engine config
    points: int  # points it runs
    node: str = "-"
    phase: str = "queued"
    index: int = 0  # point being run (1-based) once running
    done: int = 0
    since: float | None = None  # when the current phase began
    started: float | None = None  # when loading began (its start-up is measured from there)
    profiled: bool = False  # its points run with a capture attached (bench profile, sweep --profile-points)


@dataclass
class Tracker:
    total: int  # points to run (grows when lost points are re-queued)
    lanes_max: int  # engine configs that can run at once (nodes)
    clock: Callable[[], float] = time.monotonic
    lanes: dict[str, Lane] = field(default_factory=dict)
    startups: list[float] = field(default_factory=list)
    point_times: list[float] = field(default_factory=list)
    finished: int = 0

    def add(self, key: str, label: str, points: int) -> None:
        self.lanes[key] = Lane(label, points)

    def node(self, key: str, node: str) -> None:
        self.lanes[key].node = node

    def phase(self, key: str, phase: str, index: int = 0, profiled: bool = False) -> None:
        """`capturing` is the server's CUDA graph capture, part of its start-up; `exporting` is a profile capture's
        export after the server stopped."""
        lane, now = self.lanes[key], self.clock()
        lane.profiled = lane.profiled or profiled
        if phase == "loading" and lane.started is None:
            lane.started = now
        if phase == "running" and lane.phase in ("loading", "capturing") and lane.started is not None:
            self.startups.append(now - lane.started)
        lane.phase, lane.index, lane.since = phase, index, now

    def point_done(self, key: str) -> None:
        lane, now = self.lanes[key], self.clock()
        if lane.phase == "running" and lane.since is not None:
            self.point_times.append(now - lane.since)
        lane.done += 1
        self.finished += 1

    def end(self, key: str, lost_points: int = 0, requeued: int = 0) -> None:
        """The lane is over; `lost_points` of it failed without running, `requeued` will run again elsewhere."""
        self.lanes.pop(key, None)
        self.finished += lost_points
        self.total += requeued

    def phase_text(self, lane: Lane) -> str:
        if lane.phase == "running" and lane.done >= lane.index:  # its point is over: never reads "running" again
            return f"point {lane.index} of {lane.points} done"
        if lane.phase == "running":
            return f"running point {lane.index} of {lane.points}" + (", profiled" if lane.profiled else "")
        if lane.phase == "exporting":
            return "exporting the profile"
        return lane.phase

    def eta_s(self) -> float | None:
        """Seconds left: each lane's remaining start-up and points, spread over the lanes that run at once (never
        less than the longest lane). None until a start-up and a point have been measured."""
        if not self.startups or not self.point_times:
            return None
        startup, per_point, now = mean(self.startups), mean(self.point_times), self.clock()
        left = []
        for lane in self.lanes.values():
            wait = startup if lane.phase in ("queued", "loading", "capturing") else 0.0
            if lane.started is not None and lane.phase in ("loading", "capturing"):
                wait = max(0.0, startup - (now - lane.started))
            left.append(wait + (lane.points - lane.done) * per_point)
        if not left:
            return 0.0
        return max(max(left), sum(left) / max(1, self.lanes_max))

    def headline(self) -> str:
        eta = self.eta_s()
        return f"{self.finished}/{self.total} points, ETA " + ("?" if eta is None else f"{eta / 60:.1f} min")


class PlainView:
    """One line per change: `[TAG 3/8 points, ETA 2.1 min] NODE ENGINE: PHASE [note]` (TAG: ray or sweep)."""

    def __init__(self, tracker: Tracker, stream: TextIO | None = None, tag: str = "ray"):
        self.tracker, self.stream, self.tag = tracker, stream or sys.stderr, tag

    def changed(self, key: str, note: str = "") -> None:
        lane = self.tracker.lanes.get(key)
        what = f"{lane.node} {lane.label}: {self.tracker.phase_text(lane)}" if lane else ""
        text = f"[{self.tag} {self.tracker.headline()}] {what}{(' ' + note) if note else ''}".rstrip()
        print(text, file=self.stream, flush=True)

    def say(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def tick(self) -> None:
        pass

    def close(self) -> None:
        pass


class RichView(PlainView):
    """A table redrawn in place: one row per engine configuration in flight, the ETA in the title. The table
    appears with the first lane (lines said before it print as they are), so two views of one process (a sweep's,
    then the Ray driver's) never hold the terminal at once."""

    def __init__(self, tracker: Tracker, stream: TextIO | None = None, tag: str = "ray"):
        from rich.console import Console

        super().__init__(tracker, stream, tag)
        self.console = Console(file=self.stream)
        self.live: Any = None  # rich.live.Live once the first lane is there

    def _table(self):  # -> rich.table.Table
        from rich.table import Table

        table = Table(title=f"{self.tag}: {self.tracker.headline()}", expand=False)
        for column in ("node", "engine config", "phase", "done"):
            table.add_column(column)
        for lane in self.tracker.lanes.values():
            table.add_row(lane.node, lane.label, self.tracker.phase_text(lane), f"{lane.done}/{lane.points}")
        return table

    def changed(self, key: str, note: str = "") -> None:
        if note:
            self.console.print(note)
        self.tick()

    def say(self, text: str) -> None:
        self.console.print(text)

    def tick(self) -> None:
        if self.live is None and self.tracker.lanes:
            from rich.live import Live

            self.live = Live(self._table(), console=self.console, refresh_per_second=2, transient=False)
            self.live.start()
        if self.live is not None:
            self.live.update(self._table())

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


class QuietView(PlainView):
    def changed(self, key: str, note: str = "") -> None:
        pass

    def say(self, text: str) -> None:
        pass


def make_view(tracker: Tracker, quiet: bool, stream: TextIO | None = None, tag: str = "ray") -> PlainView:
    """Rich's live table on a terminal, plain lines otherwise (logs, CI, a pipe), nothing when quiet."""
    stream = stream or sys.stderr
    if quiet:
        return QuietView(tracker, stream, tag)
    return RichView(tracker, stream, tag) if stream.isatty() else PlainView(tracker, stream, tag)


class Progress:
    """The executor's progress calls on the tracker and its view (tag "sweep"): one lane per engine config whose
    server is up, on this machine."""

    def __init__(
        self,
        total: int,
        quiet: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        node: str = "local",
    ):
        self.quiet, self.node = quiet, node
        self.tracker = Tracker(total, lanes_max=1, clock=clock)
        self.view = make_view(self.tracker, quiet, stream, tag="sweep")

    @property
    def total(self) -> int:
        return self.tracker.total

    def say(self, text: str) -> None:
        self.view.say(text)

    def _lane(self, point: Point, points: int | None = None) -> str:
        key = point.engine.id
        if key not in self.tracker.lanes:  # points unknown (a server already up): at most what is left
            self.tracker.add(key, point.engine.label(), points or self.tracker.total - self.tracker.finished)
            self.tracker.node(key, self.node)
        return key

    def starting(self, point: Point, command: str, points: int | None = None) -> None:
        """The server for `point` and its engine's later points (`points` of them) is starting with `command`."""
        key = self._lane(point, points)
        self.tracker.phase(key, "loading")
        self.view.changed(key, f"starting server ({command})")

    def running(self, point: Point) -> None:
        key = self._lane(point)
        self.tracker.phase(key, "running", self.tracker.lanes[key].done + 1)
        self.view.changed(key, f"{point.id} {point.label}")

    def finished(self, point: Point, status: str, summary: str = "") -> None:
        key = self._lane(point)
        self.tracker.point_done(key)
        self.view.changed(key, f"{point.id} {status} {summary}".rstrip())
        lane = self.tracker.lanes[key]
        if lane.done >= lane.points:
            self.tracker.end(key)
            self.view.tick()

    def close(self) -> None:
        self.view.close()
