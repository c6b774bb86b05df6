"""The report's server table: per engine config, how its server started and what memory it had, from the point
records (`server.ready_s` of each start that served points) and vLLM's own start-up lines in the server log (model
load, engine init and compile times, CUDA graph capture, KV cache memory and tokens). A log that holds several
starts (a resumed sweep appends; bench.engine.server heads each with a "# bench: " line) shows every start's value when
they differ, in start order joined by "/", with "-" for a start that did not log it (one that died before): the
values of one start line up across the columns.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd

from bench.core.fmt import fmt
from bench.results.records import PointRecord
from bench.results.store import SweepStore

#: column -> the vLLM log line's pattern (its first group is the value); the same lines in vLLM 0.26 and 0.32-cpu
LOG_FIGURES: dict[str, re.Pattern[str]] = {
    "model_gib": re.compile(r"Model loading took ([\d.]+) GiB"),
    "load_s": re.compile(r"Model loading took [\d.]+ GiB(?: memory)? and ([\d.]+) seconds"),
    "init_s": re.compile(r"init engine .* took ([\d.]+) s"),
    "compile_s": re.compile(r"init engine .* \(compilation: ([\d.]+) s\)"),
    "graphs_s": re.compile(r"Graph capturing finished in (\d+) secs"),
    "graphs_gib": re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB"),
    "kv_gib": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "kv_tokens": re.compile(r"GPU KV cache size: ([\d,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for ([\d,]+ tokens per request: [\d.]+x)"),
}
_START = "# bench: "  # bench.engine.server's first line of each start in the log
# torch.compile in one start: it compiled a graph, or loaded them from vLLM's compile cache (a start's speed could
# depend on which: docs/measurement.md); neither line: eager, or a start that died first. Judged per compiled unit
# (the target, the draft: each ends at vLLM's "torch.compile took" line), because vLLM 0.26 logs "Compiling a graph
# ... takes 2 s" also for a unit it then loads from its AOT cache, and "saved AOT compiled function" also for one
# whose graphs it loaded from the cache.
COMPILE_UNIT_END = re.compile(r"torch\.compile took [\d.]+ s in total")
COMPILED = re.compile(r"Compiling a graph for ")
CACHE_LOADED = re.compile(r"Directly load (?:AOT compilation|the compiled graph)")

# Where a start's time goes before vLLM's own timed phases, from the log's own clock (vLLM's "MM-DD hh:mm:ss" stamps,
# whole seconds; never compared with bench's clock, whose zone may differ): from the API server's first line to the
# engine process's first line (the API server resolving its config, then spawning the engine process, which imports
# vLLM and torch before it logs: bench's plugin line is its first), and from the API server's first line to
# "Starting vLLM server" (the start as the log sees it). `ready s` minus the latter is the API server's own launch
# and imports, before it logs anything, plus the second or so from serving to /health answering. These columns have a
# value for every start in the log (a --warm-start launch included), `ready s` one for each start that served points.
LOG_STAMP = re.compile(r"^\((APIServer|EngineCore)[^)]*\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d)", re.M)
SERVING = re.compile(r"^\(APIServer[^)]*\) \w+ (\d\d-\d\d \d\d:\d\d:\d\d).*Starting vLLM server", re.M)
PHASES = ("logged_s", "spawn_s")

SERVER_COLUMNS = ["engine", "engine_id", "starts", "ready_s", *PHASES, "torch_compile", *LOG_FIGURES]
#: column -> header, for summary.md and report.html (the logged text, its numbers through bench.core.fmt: `shown`)
SERVER_HEADERS = {
    "engine": "engine config",
    "starts": "starts",
    "ready_s": "ready s (each start)",
    "logged_s": "first log line to serving s",
    "spawn_s": "to engine process s",
    "torch_compile": "torch.compile",
    "model_gib": "model GiB",
    "load_s": "load s",
    "init_s": "engine init s",
    "compile_s": "compile s",
    "graphs_s": "graph capture s",
    "graphs_gib": "graphs GiB",
    "kv_gib": "KV cache GiB",
    "kv_tokens": "KV tokens",
    "max_concurrency": "max concurrency at max length",
}
SERVER_NOTE = (
    "One row per engine config with a server log. `ready s`: from the server's start to /health answering, per "
    "start that served points (bench's clock); the rest is vLLM's own start-up lines in the log, one value per "
    "start in start order where they differ (`-`: that start did not log it, e.g. it died first; numbers rounded, "
    "servers.csv has them as logged). `first log line to serving s`: from the API server's first log line to its "
    "'Starting vLLM server' (the log's clock; `ready s` minus it is the API server's launch and imports before it "
    "logs, and the second or so to /health answering); `to engine process s`: from that first line to the engine "
    "process's first (config, spawn, imports); both for every start in the log, a warm start included. "
    "Under DCP N the KV "
    "tokens are the group's (N x the rank's local slots)."
)


def server_table(sweep_dir: Path, records: dict[str, PointRecord]) -> pd.DataFrame:
    """One row per engine config that has a server log, in engine-label order."""
    by_engine: dict[str, list[PointRecord]] = {}
    for record in records.values():
        by_engine.setdefault(record.engine_id, []).append(record)
    rows, store = [], SweepStore(sweep_dir)
    for engine_id, points in by_engine.items():
        stored = points[0].server.log  # as the sweep wrote it, relative to the results directory
        log = Path(sweep_dir) / stored if stored else store.log_path(engine_id)
        if not log.is_file():
            continue
        starts = _starts(log.read_text(errors="replace"))
        ready = {p.server.started: p.server.ready_s for p in points if p.server.ready_s is not None}
        phases = [log_phases(start) for start in starts]
        rows.append(
            {
                "engine": points[0].label.get("engine"),
                "engine_id": engine_id,
                "starts": len(starts),
                "ready_s": "/".join(f"{ready[t]:.0f}" for t in sorted(ready, key=str)) or None,
                **{column: _values([p[column] for p in phases]) for column in PHASES},
                "torch_compile": _values([[state] if (state := compile_state(start)) else [] for start in starts]),
                **{
                    column: _values([pattern.findall(start) for start in starts])
                    for column, pattern in LOG_FIGURES.items()
                },
            }
        )
    df = pd.DataFrame(rows, columns=SERVER_COLUMNS)
    return df.sort_values(["engine", "engine_id"], kind="stable").reset_index(drop=True)


def log_phases(start_log: str) -> dict[str, list[str]]:
    """One start's PHASES in whole seconds of the log's clock ([] where a line is missing: a start that died
    first, or a log without vLLM's stamps)."""
    stamps: dict[str, dt.datetime] = {}
    for m in LOG_STAMP.finditer(start_log):
        stamps.setdefault(m.group(1), _stamp(m.group(2)))
    serving = SERVING.search(start_log)
    api, engine = stamps.get("APIServer"), stamps.get("EngineCore")

    def since_api(t: dt.datetime | None) -> list[str]:
        gap = (t - api).total_seconds() if t is not None and api is not None else -1.0
        return [f"{gap:.0f}"] if gap >= 0 else []  # negative: a year's turn between the stamps

    return {"logged_s": since_api(_stamp(serving.group(1)) if serving else None), "spawn_s": since_api(engine)}


def _stamp(text: str) -> dt.datetime:
    return dt.datetime.strptime(f"2000-{text}", "%Y-%m-%d %H:%M:%S")  # a leap year: 02-29 parses


def compile_state(start_log: str) -> str | None:
    """How torch.compile ran in one start's log: "compiled" (at least one unit compiled afresh: it logged a compile
    and loaded nothing from the cache), "cache-loaded" (every unit loaded from vLLM's compile cache), None (no unit
    logged either: eager)."""
    states = []
    for unit in COMPILE_UNIT_END.split(start_log):
        if CACHE_LOADED.search(unit):
            states.append("cache-loaded")
        elif COMPILED.search(unit):
            states.append("compiled")
    if not states:
        return None
    return "compiled" if "compiled" in states else "cache-loaded"


_LOGGED_NUMBER = re.compile(r"\d[\d,]*\.\d+")


def shown(servers: pd.DataFrame) -> pd.DataFrame:
    """The server table as the reports show it: every decimal number in the logged values (a start's "6.184323",
    each of "9.824195/6.282417", the "140.28x" of a concurrency) through bench.core.fmt, at most two decimals and
    SIGNIFICANT digits; servers.csv keeps them as logged."""

    def reformat(value):
        if not isinstance(value, str):
            return value
        return _LOGGED_NUMBER.sub(lambda m: fmt(float(m.group().replace(",", "")), ",.2f"), value)

    figures = [c for c in servers.columns if c in LOG_FIGURES]
    return servers.assign(**{c: servers[c].map(reformat) for c in figures})


def _starts(text: str) -> list[str]:
    """The log cut into its starts (what comes before the first header, if anything, belongs to the first)."""
    cut = re.split(rf"^(?={re.escape(_START)})", text, flags=re.M)
    if len(cut) > 1 and not cut[0].startswith(_START):
        cut = [cut[0] + cut[1], *cut[2:]]
    return [c for c in cut if c] or [text]


def _values(per_start: list[list[str]]) -> str | None:
    """One value when every start logged the same one, else each start's in start order ("-": not logged, "+"
    between a start's several); None when no start logged it."""
    if not any(per_start):
        return None
    shown = ["+".join(found) or "-" for found in per_start]
    return shown[0] if len(set(shown)) == 1 else "/".join(shown)
