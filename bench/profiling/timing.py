"""In-process range timers (the plugin's BENCH_TIMING=1 mode) and the loader that turns their files into the
same ranges table the Nsight Systems analysis produces (`nsys_analysis` module docstring).

Why: an nsys capture is heavy (and needs a working nsys); a timer file per process answers "how long does
each wrapped phase take, on the host and on the GPU" with no tool attached, and the same summary code
(`nsys_analysis.summarize_ranges`) reads both.

Recording (inside vLLM's processes, so: standard library only, torch only if the process already imported it):
- CPU time: `time.perf_counter_ns()` around the call (CLOCK_MONOTONIC: one clock for all processes of a host).
- GPU time, where the process has initialized CUDA: a `torch.cuda.Event(enable_timing=True)` recorded on the
  current stream before and after the call. Nothing synchronizes on the hot path: events are read with
  `query()` in batches (every GPU_INTERVAL_S, between ranges); unfinished ones wait for the next batch. No
  event is recorded while the current stream is capturing a CUDA graph (it would be captured, not timed).
  gpu_span_ns = elapsed time between the two events: the stream's wall time from reaching the start marker
  to finishing the work queued before the end marker, idle gaps included (like nsys's gpu_span_ns, not its
  gpu_busy_ns). gpu_start_ns/gpu_end_ns are put on the CPU clock by one anchor event synchronized once per
  process at first use (error ~10 us), then chained from resolved events every second (elapsed_time is
  float32 milliseconds).
- Writing: after each outermost wrapped call returns (so never inside a range; every FLUSH_INTERVAL_S when
  that is raised above 0), the finished ranges are appended with os.write to `timing-<pid>.jsonl` in
  BENCH_TIMING_DIR. Write-through is deliberate: on SIGTERM, vLLM's API server (default --shutdown-timeout 0)
  SIGKILLs the EngineCore and workers within milliseconds, so exit hooks never run there; what os.write
  handed to the kernel survives. GPU times follow in their own lines once their events have completed;
  at a clean exit (atexit, and multiprocessing's Finalize for forked children) the GPU is synchronized and
  the rest written.
- File format: the first line is a header {"format": "bench-timing", "version": 1, "fields": [...],
  "gpu_fields": [...], "pid": ..., ...}; then one JSON array per line: a range [seq, name, tid, start_ns,
  end_ns], or its GPU times ["gpu", seq, gpu_start_ns, gpu_end_ns, gpu_span_ns]. A torn line is skipped.

Why one module of ~400 lines: the writer (standard library only, it runs inside vLLM) and the reader (pandas, in
the suite) of this one file format stay side by side, so that a change of the format is one diff, with its
VERSION bump, that a reviewer sees whole.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

FORMAT = "bench-timing"
VERSION = 1
FIELDS = ("seq", "name", "tid", "start_ns", "end_ns")
GPU_FIELDS = ("seq", "gpu_start_ns", "gpu_end_ns", "gpu_span_ns")
FLUSH_INTERVAL_S = 0.0  # write after every outermost range (see the module docstring for why)
GPU_INTERVAL_S = 0.5  # how often completed CUDA events are read
FLUSH_RECORDS = 8192  # write anyway when this many ranges wait (a very long outer range)
TID_MASK = 0xFFFFFF  # nsys globalTid = pid << 24 | tid (what nsys_readers.pid_of undoes)
REANCHOR_MS = 1000.0
# The ranges table of bench.profiling.nsys_analysis, column for column.
RANGE_COLUMNS = [
    "range_id",
    "domain",
    "name",
    "kind",
    "pid",
    "tid",
    "global_tid",
    "start_ns",
    "end_ns",
    "cpu_ns",
    "api_calls",
    "launches",
    "kernels",
    "memcpys",
    "memsets",
    "graphs",
    "gpu_sum_ns",
    "gpu_busy_ns",
    "gpu_start_ns",
    "gpu_end_ns",
    "gpu_span_ns",
]
COUNT_COLUMNS = ["api_calls", "launches", "kernels", "memcpys", "memsets", "graphs"]
GPU_NS_COLUMNS = ["gpu_sum_ns", "gpu_busy_ns", "gpu_start_ns", "gpu_end_ns", "gpu_span_ns"]


logger = logging.getLogger("vllm.bench_profiling.timing")  # under "vllm": printed by vLLM's handler


class TimingFormatError(ValueError):
    """A timing file this version cannot read (the CLI shows the message)."""


class _GpuClock:
    """CUDA events for one process: a pool, the stream lookup, the anchor that maps event times to the CPU
    clock, and resolution."""

    def __init__(self, torch_mod):
        self.torch = torch_mod
        self.pool: list = []
        self.ref = None  # an event whose time on the CPU clock is known
        self.ref_ns = 0
        self.streams: dict = {}
        # torch.cuda.current_stream() builds a Stream object per call (~4 us on an H200 host, most of an
        # Event.record()); look the current stream up by its raw id instead and keep the objects.
        c = torch_mod._C
        self._raw = (
            (lambda: c._cuda_getCurrentStream(c._cuda_getDevice()))
            if hasattr(c, "_cuda_getCurrentStream") and hasattr(c, "_cuda_getDevice")
            else None
        )

    def ready(self) -> bool:
        """Events may be recorded now: CUDA is up and the current stream is not capturing a graph."""
        cuda = self.torch.cuda
        if cuda.is_current_stream_capturing():
            return False
        if self.ref is None:  # one synchronize per process, at the first use
            ev = cuda.Event(enable_timing=True)
            ev.record()
            ev.synchronize()
            self.ref, self.ref_ns = ev, time.perf_counter_ns()
        return True

    def event(self):
        ev = self.pool.pop() if self.pool else self.torch.cuda.Event(enable_timing=True)
        if self._raw is None:
            ev.record()
            return ev
        key = self._raw()
        stream = self.streams.get(key)
        if stream is None:
            if len(self.streams) > 256:
                self.streams.clear()
            stream = self.streams[key] = self.torch.cuda.current_stream()
        ev.record(stream)
        return ev

    def resolve(self, ev0, ev1):
        """(gpu_start_ns, gpu_end_ns, gpu_span_ns) when both events have completed, else None."""
        if not ev1.query():
            return None
        off_ms = self.ref.elapsed_time(ev0)
        span_ns = round(ev0.elapsed_time(ev1) * 1e6)
        start_ns = self.ref_ns + round(off_ms * 1e6)
        if off_ms > REANCHOR_MS:  # keep offsets short: elapsed_time is float32 milliseconds
            self.pool.append(self.ref)
            self.ref, self.ref_ns = ev0, start_ns
            self.pool.append(ev1)
        else:
            self.pool.extend((ev0, ev1))
        return start_ns, start_ns + span_ns, span_ns


class TimingRecorder:
    """Collects the ranges of one process and appends them to `<out_dir>/timing-<pid>.jsonl`.

    The plugin's wrappers call `gpu_begin` / `gpu_end` (None when there is no GPU timing) and `add`; `depth`
    counts wrapped calls in progress, so that writing happens between ranges, never inside one."""

    def __init__(
        self,
        out_dir: str | os.PathLike,
        domain: str = "bench",
        meta: dict | None = None,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        gpu_interval_s: float = GPU_INTERVAL_S,
        flush_records: int = FLUSH_RECORDS,
    ):
        self.out_dir = Path(out_dir)
        self.domain = domain
        self.meta = dict(meta or {})
        self.flush_interval_ns = int(flush_interval_s * 1e9)
        self.gpu_interval_ns = int(gpu_interval_s * 1e9)
        self.flush_records = flush_records
        self._lock = threading.RLock()
        self._names: dict[str, str] = {}
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        """Fresh state for this process (also in a forked child: the parent's records are the parent's)."""
        self.pid = os.getpid()
        self.path = self.out_dir / f"timing-{self.pid}.jsonl"
        self.depth = 0
        self._seq = itertools.count(1)  # next() is atomic: ranges may close on several threads
        self.done: list = []  # (seq, name, tid, start_ns, end_ns) not yet written
        self.pending: list = []  # (seq, ev0, ev1) whose GPU times are not yet known
        now = time.perf_counter_ns()
        self.next_flush_ns = now
        self.next_gpu_ns = now + self.gpu_interval_ns
        self._gpu: _GpuClock | bool | None = None  # None: not decided yet; False: no GPU timing here
        self._fd: int | None = None
        self._exit_hooked = False
        self._write_failed = False

    # --- hot path -------------------------------------------------------------------------------------------

    def gpu_begin(self):
        gpu = self._gpu
        if gpu is None:
            gpu = self._decide_gpu()
        if gpu is False or not gpu.ready():
            return None
        return gpu.event()

    def gpu_end(self, ev0):
        return None if ev0 is None else self._gpu.event()

    def add(self, name: str, tid: int, start_ns: int, end_ns: int, ev0=None, ev1=None) -> None:
        seq = next(self._seq)
        self.done.append((seq, name, tid, start_ns, end_ns))
        if ev0 is not None:
            self.pending.append((seq, ev0, ev1))
        if (self.depth == 0 and end_ns >= self.next_flush_ns) or len(self.done) >= self.flush_records:
            self.flush(now_ns=end_ns)

    # --- the rest -------------------------------------------------------------------------------------------

    def _decide_gpu(self):
        """GPU timing only where this process has already initialized CUDA (never initialize it here)."""
        torch_mod = sys.modules.get("torch")
        try:
            if torch_mod is None or not torch_mod.cuda.is_available():
                self._gpu = False
            elif torch_mod.cuda.is_initialized():
                self._gpu = _GpuClock(torch_mod)
            else:
                return False  # undecided: ask again on the next range
        except Exception:
            self._gpu = False
        return self._gpu

    def flush(self, now_ns: int | None = None, wait: bool = False) -> None:
        """Append the finished ranges, and the GPU times of those whose events have completed (every
        gpu_interval_s; all of them, after a device synchronize, when wait=True)."""
        now_ns = time.perf_counter_ns() if now_ns is None else now_ns
        if not self._lock.acquire(blocking=False):
            return  # another thread is writing; these rows go with the next flush
        try:
            self.next_flush_ns = now_ns + self.flush_interval_ns
            rows, self.done = self.done, []
            lines = [f"[{seq},{self._name(name)},{tid},{t0},{t1}]" for seq, name, tid, t0, t1 in rows]
            if self.pending and (wait or now_ns >= self.next_gpu_ns):
                self.next_gpu_ns = now_ns + self.gpu_interval_ns
                lines += self._resolve(wait)
            if lines:
                self._write("\n".join(lines) + "\n")
        finally:
            self._lock.release()

    def _name(self, name: str) -> str:
        quoted = self._names.get(name)
        if quoted is None:
            quoted = self._names[name] = json.dumps(name)
        return quoted

    def _resolve(self, wait: bool) -> list[str]:
        gpu = self._gpu
        out: list[str] = []
        if not isinstance(gpu, _GpuClock):
            self.pending = []
            return out
        try:
            if gpu.torch.cuda.is_current_stream_capturing():
                return out
            if wait:
                gpu.torch.cuda.synchronize()
            keep = []
            for seq, ev0, ev1 in self.pending:
                got = gpu.resolve(ev0, ev1)
                if got is None:
                    keep.append((seq, ev0, ev1))
                else:
                    out.append(f'["gpu",{seq},{got[0]},{got[1]},{got[2]}]')
            self.pending = [] if wait else keep
        except Exception:  # a broken CUDA context (at exit): the CPU times are written already
            self.pending = []
        return out

    def _write(self, text: str) -> None:
        """os.write on an O_APPEND descriptor: the bytes are in the page cache at once, so they survive the
        SIGKILL that vLLM's default shutdown (--shutdown-timeout 0) sends to the EngineCore and workers."""
        try:
            if self._fd is None:
                self.out_dir.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                text = json.dumps(self._header()) + "\n" + text
                self._hook_exit()
            data = text.encode()
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError as exc:
            if not self._write_failed:
                logger.error("bench timing: cannot write %s (%s); timings of this process are lost", self.path, exc)
            self._write_failed = True

    def _hook_exit(self) -> None:
        if self._exit_hooked:
            return
        self._exit_hooked = True
        atexit.register(self.close)
        try:
            from multiprocessing import util

            util.Finalize(None, self.close, exitpriority=10)  # forked multiprocessing children skip atexit
        except Exception:
            pass

    def close(self) -> None:
        """At a clean exit: wait for the GPU, write everything. Only in the process that recorded."""
        if os.getpid() != self.pid:
            return
        self.flush(wait=True)
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _header(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "fields": list(FIELDS),
            "gpu_fields": list(GPU_FIELDS),
            "domain": self.domain,
            "pid": self.pid,
            "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)",
            "gpu_timing": isinstance(self._gpu, _GpuClock),
            "wall_time_ns": time.time_ns(),
            "perf_counter_ns": time.perf_counter_ns(),
            "argv": sys.argv[:8],
            **self.meta,
        }


# --- reading ---------------------------------------------------------------------------------------------------


def read_timing_file(path: str | os.PathLike) -> list[tuple[dict, list[list]]]:
    """[(header, rows)] for each header in the file (a pid reused by a later process appends a new header);
    each row is [seq, name, tid, start_ns, end_ns, gpu_start_ns, gpu_end_ns, gpu_span_ns] (GPU None when
    unknown). A torn or unparseable line is skipped."""
    parts: list[tuple[dict, dict]] = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            _check_header(path, item)
            parts.append((item, {}))
        elif parts and isinstance(item, list) and item:
            rows = parts[-1][1]
            if item[0] == "gpu" and len(item) == len(GPU_FIELDS) + 1 and item[1] in rows:
                rows[item[1]][5:8] = item[2:5]
            elif isinstance(item[0], int) and len(item) == len(FIELDS):
                rows[item[0]] = list(item) + [None, None, None]
    return [(head, list(rows.values())) for head, rows in parts]


def _check_header(path, head: dict) -> None:
    if head.get("format") != FORMAT:
        raise TimingFormatError(f"{path}: not a bench timing file (format {head.get('format')!r})")
    if head.get("version") != VERSION:
        raise TimingFormatError(
            f"{path}: timing format version {head.get('version')} is not supported (this "
            f"suite reads version {VERSION}); record again with this suite's plugin"
        )
    if tuple(head.get("fields", ())) != FIELDS or tuple(head.get("gpu_fields", ())) != GPU_FIELDS:
        raise TimingFormatError(f"{path}: unexpected fields {head.get('fields')} / {head.get('gpu_fields')}")


def load_timing_dir(path: str | os.PathLike):
    """Every `timing-*.jsonl` under `path` as one ranges DataFrame in the nsys analysis schema (RANGE_COLUMNS).

    Unknowns are null: the CUDA API/activity counts are NaN (float64, so that summarize_ranges can average
    them), gpu_sum_ns / gpu_busy_ns are <NA>, and the other GPU columns are <NA> for ranges without GPU times.
    range_id = pid * 2**32 + the per-process sequence number (unique in the directory, like NVTX_EVENTS.rowid
    in an export). df.attrs["headers"] holds the files' headers."""
    import numpy as np
    import pandas as pd

    recs, headers = [], []
    for file in sorted(Path(path).glob("timing-*.jsonl")):
        for head, rows in read_timing_file(file):
            headers.append({**head, "file": str(file)})
            recs += [row + [int(head["pid"]), str(head.get("domain", ""))] for row in rows]
    raw = pd.DataFrame(recs, columns=list(FIELDS) + ["gpu_start_ns", "gpu_end_ns", "gpu_span_ns", "pid", "domain"])
    pid = raw["pid"].astype(np.int64)
    tid = raw["tid"].astype(np.int64) % (TID_MASK + 1)
    out = pd.DataFrame(
        {
            "range_id": pid * 2**32 + raw["seq"].astype(np.int64),
            "domain": raw["domain"].astype(str),
            "name": raw["name"].astype(str),
            "kind": "push_pop",
            "pid": pid,
            "tid": tid,
            "global_tid": pid * (TID_MASK + 1) + tid,
            "start_ns": raw["start_ns"].astype(np.int64),
            "end_ns": raw["end_ns"].astype(np.int64),
        }
    )
    out["cpu_ns"] = out["end_ns"] - out["start_ns"]
    for col in COUNT_COLUMNS:
        out[col] = np.full(len(out), np.nan)
    for col in ("gpu_sum_ns", "gpu_busy_ns"):
        out[col] = pd.array([pd.NA] * len(out), dtype="Int64")
    for col in ("gpu_start_ns", "gpu_end_ns", "gpu_span_ns"):
        out[col] = pd.array(raw[col].tolist(), dtype="Int64")
    out = out[RANGE_COLUMNS].sort_values(["start_ns", "range_id"], kind="stable").reset_index(drop=True)
    out.attrs["headers"] = headers
    out.attrs["source"] = FORMAT
    return out
