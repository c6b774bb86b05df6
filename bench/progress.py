"""What a sweep says while it runs and the fields every point record starts with: the progress lines on stderr
(points done / total, the current point, an ETA), the record's identity (point, engine, config, labels) and its
UTC timestamps. Shared by the local executor, the Ray driver and `bench load --url`."""

from __future__ import annotations

import datetime as dt
import sys
import time

from bench.plan import Point


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def base_record(point: Point) -> dict:
    return {
        "point_id": point.id,
        "engine_id": point.engine.id,
        "config": point.to_dict(),
        "label": {"engine": point.engine.label(), "shape": point.label, "workload": point.workload.id},
    }


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
        self.say(f"[{self.done}/{self.total}{eta}] {point.id} {point.engine.label()} {point.label}: {what}")

    def starting(self, point: Point, command: str) -> None:
        """The server for `point` (and its engine's later points) is starting with `command`."""
        self.point(point, f"starting server ({command})")

    def running(self, point: Point) -> None:
        self.point(point, "running")

    def finished(self, point: Point, status: str, summary: str = "") -> None:
        self.done += 1
        self.say(f"[{self.done}/{self.total}] {point.id} {status} {summary}".rstrip())
