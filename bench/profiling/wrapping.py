"""The plugin's wrappers and its per-process state: what is wrapped, how to swap it back, what is missing.

A wrapper is an NVTX push/pop and/or a timer around the original function, built as one closure per combination
so that the hot path has no branches on configuration. Wrapping sets the attribute on the class a table row
names (even when the method is inherited there, so a subclass can be timed apart from its base), so instances
created earlier see it too; only code that saved a bound method before the wrap (none in the tables) would not.

Idempotence: a wrapper carries `__bench_range__` (MARK), so a function is never wrapped twice, even by a second
copy of this module or after a fork.

Missing targets: a row whose attributes are absent (or are not plain functions) is logged once as a WARNING
naming everything looked for; the mark `_BENCH_PROFILING_WARNED` in the environment keeps child processes from
repeating it.

Runs inside vLLM's processes: imports nothing from the suite but `bench.profiling.targets` (for types).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter_ns
from types import ModuleType
from typing import Any

from bench.profiling.targets import Target

MARK = "__bench_range__"
ENV_WARNED = "_BENCH_PROFILING_WARNED"
logger = logging.getLogger("vllm.bench_profiling.wrapping")  # a child of plugin.LOGGER_NAME
_ABSENT = object()  # the attribute was inherited, not in the class's own __dict__: restore by deleting


def make_wrapper(fn: Callable, name: str, domain: Any = None, recorder: Any = None) -> Callable:
    """fn wrapped in an NVTX push/pop (domain) and/or a timer (recorder); marked with MARK = name."""
    if domain is not None and recorder is not None:
        wrapper = _nvtx_and_timer(fn, name, domain, recorder)
    elif recorder is not None:
        wrapper = _timer(fn, name, recorder)
    elif domain is not None:
        wrapper = _nvtx(fn, name, domain)
    else:  # BENCH_NVTX=1 with no tool attached: nothing to emit, keep the call path (and the checks) alike

        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, MARK, name)
    return wrapper


def _nvtx_and_timer(fn: Callable, name: str, domain: Any, rec: Any) -> Callable:
    attrs, push, pop = domain.get_event_attributes(message=name), domain.push_range, domain.pop_range
    gpu_begin, gpu_end, add, get_tid = rec.gpu_begin, rec.gpu_end, rec.add, threading.get_native_id

    def wrapper(*args, **kwargs):
        push(attrs)
        rec.depth += 1
        ev0 = gpu_begin()
        t0 = perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = perf_counter_ns()
            ev1 = gpu_end(ev0)
            rec.depth -= 1
            pop()
            add(name, get_tid(), t0, t1, ev0, ev1)

    return wrapper


def _timer(fn: Callable, name: str, rec: Any) -> Callable:
    gpu_begin, gpu_end, add, get_tid = rec.gpu_begin, rec.gpu_end, rec.add, threading.get_native_id

    def wrapper(*args, **kwargs):
        rec.depth += 1
        ev0 = gpu_begin()
        t0 = perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = perf_counter_ns()
            ev1 = gpu_end(ev0)
            rec.depth -= 1
            add(name, get_tid(), t0, t1, ev0, ev1)

    return wrapper


def _nvtx(fn: Callable, name: str, domain: Any) -> Callable:
    attrs, push, pop = domain.get_event_attributes(message=name), domain.push_range, domain.pop_range

    def wrapper(*args, **kwargs):
        push(attrs)
        try:
            return fn(*args, **kwargs)
        finally:
            pop()

    return wrapper


def _resolve(module: ModuleType, qualname: str) -> tuple[Any, str, Any] | None:
    """(owner to set the attribute on, attribute name, raw attribute as stored) or None when absent."""
    parts = qualname.split(".")
    owner: Any = module
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    try:
        raw = inspect.getattr_static(owner, parts[-1])
    except AttributeError:
        return None
    return owner, parts[-1], raw


def _plain_function(func: Any) -> bool:
    return inspect.isfunction(func) and not (
        inspect.iscoroutinefunction(func) or inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func)
    )


@dataclass
class Profiler:
    """What one process has set up: the rows, where each stands, and how to undo it (tests)."""

    rows: list[Target]
    domain: Any = None
    recorder: Any = None
    version: str = "unknown"
    line: str = ""
    # Builds the wrapper of a row instead of the NVTX / timer one (the effective-configuration record's hook);
    # it must mark what it returns with MARK, like make_wrapper.
    wrap: Callable[[Callable, str], Callable] | None = None
    wrapped: dict[tuple[str, str], str] = field(default_factory=dict)  # (module, qualname) -> range name
    # (owner, attr, raw as it was or _ABSENT, wrapper set): to restore, or to swap in and out
    originals: list[tuple[Any, str, Any, Any]] = field(default_factory=list)
    waiting: dict[str, list[Target]] = field(default_factory=dict)  # module name -> rows to wrap on import
    deferred: dict[str, list[Target]] = field(default_factory=dict)  # module half-imported at register
    missing: list[Target] = field(default_factory=list)  # rows reported missing
    finder: Any = None  # the import_hook.PatchOnImport in sys.meta_path, while modules are waited for
    lock: threading.RLock = field(default_factory=threading.RLock)

    def wrap_module(self, module: ModuleType, rows: list[Target]) -> None:
        for row in rows:
            try:
                self._wrap_row(module, row)
            except Exception:
                logger.exception("bench profiling: could not wrap %s", " / ".join(row.names()))

    def _wrap_row(self, module: ModuleType, row: Target) -> None:
        for qualname in row.attrs:
            found = _resolve(module, qualname)
            if found is None:
                continue
            owner, attr, raw = found
            func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if getattr(func, MARK, None) is not None:  # already wrapped (register twice, or a fork's parent)
                self.wrapped[(row.module, qualname)] = getattr(func, MARK)
                return
            if not _plain_function(func):
                warn_missing(row, f"{row.module}:{qualname} is a {type(raw).__name__}, not a plain function", self)
                return
            wrapper: Any = (
                self.wrap(func, row.range) if self.wrap else make_wrapper(func, row.range, self.domain, self.recorder)
            )
            if isinstance(raw, staticmethod):
                wrapper = staticmethod(wrapper)
            elif isinstance(raw, classmethod):
                wrapper = classmethod(wrapper)
            self.originals.append((owner, attr, owner.__dict__.get(attr, _ABSENT), wrapper))
            setattr(owner, attr, wrapper)
            self.wrapped[(row.module, qualname)] = row.range
            return
        warn_missing(row, "attribute not found", self)

    def module_loaded(self, module: ModuleType) -> None:
        """The finder's callback: `module` has just run its code."""
        with self.lock:
            rows = self.waiting.pop(module.__name__, None)
        if rows:
            self.wrap_module(module, rows)
        self._drop_finder_when_done()

    def retry_deferred(self) -> None:
        """Modules that were half-imported when register() ran: wrap them once they have finished."""
        for name in list(self.deferred):
            module = sys.modules.get(name)
            if module is None or not getattr(getattr(module, "__spec__", None), "_initializing", False):
                rows = self.deferred.pop(name, None)
                if module is not None and rows:
                    self.wrap_module(module, rows)
                elif rows:
                    self.waiting.setdefault(name, []).extend(rows)  # its import failed: wait for the next one
        self._drop_finder_when_done()

    def _drop_finder_when_done(self) -> None:
        with self.lock:
            if not self.waiting and not self.deferred and self.finder in sys.meta_path:
                sys.meta_path.remove(self.finder)

    def set_enabled(self, on: bool) -> None:
        """Swap every wrapped attribute back to the original (off) or to its wrapper (on), in place: for
        measuring the wrappers' cost inside one engine (benchmarks/plugin_overhead.py). Call it between steps,
        never while the engine runs one; vLLM never calls it."""
        with self.lock:
            for owner, attr, raw, wrapper in self.originals:
                if on:
                    setattr(owner, attr, wrapper)
                elif raw is _ABSENT:
                    if attr in owner.__dict__:
                        delattr(owner, attr)
                else:
                    setattr(owner, attr, raw)

    def restore(self) -> None:
        """Undo every wrap (tests; vLLM never calls it)."""
        self.set_enabled(False)
        self.originals.clear()
        self.wrapped.clear()
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)


def warn_missing(row: Target, why: str, prof: Profiler | None = None) -> None:
    """One WARNING per row, per process tree (the environment mark is inherited by children)."""
    if prof is not None:
        prof.missing.append(row)
    key = f"{row.range}={row.module}:{'|'.join(row.attrs)}"
    seen = os.environ.get(ENV_WARNED, "")
    if key in seen.split(";"):
        return
    os.environ[ENV_WARNED] = f"{seen};{key}" if seen else key
    version = f" in vLLM {prof.version} (table {prof.line})" if prof is not None else ""
    lost = "The range will be absent from profiles"
    if row.runner == "record":
        lost = "The effective-configuration record will not be written"
    logger.warning(
        "bench profiling: range %r has no target%s (%s); looked for: %s. %s; update bench/profiling/targets.py.",
        row.range,
        version,
        why,
        ", ".join(row.names()),
        lost,
    )
