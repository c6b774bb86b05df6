"""A measured memory-bandwidth ceiling for the roofline: a device-to-device copy on one GPU, timed with CUDA events.

The roofline (bench.report.roofline) divides a decode step's bytes by the datasheet bandwidth (the H200's 4.8 TB/s);
what the GPU streams in practice is less. This measures what a plain copy reaches: two buffers well above L2
(2 GiB each), `copies` back-to-back `dst.copy_(src)` (cudaMemcpyAsync, device to device) between two CUDA events,
`repeats` times after a warm-up. Bytes moved count the read and the write: 2 x size_bytes per copy.
`bytes_per_s` is the best repeat (the ceiling); the median and every sample are kept beside it.

A sweep on a GPU records it in its manifest as environment["bandwidth"] (`manifest_entry`): measured once per
machine (GPU name + driver) and cached in ~/.cache/bench/bandwidth.json (`BENCH_CACHE_DIR` moves the folder), in a
child process, so the sweep's driver never holds a CUDA context or the buffers while vLLM servers start. A failure
is recorded as {"bytes_per_s": None, "reason": ...}; it never ends a sweep.

    python -m bench.engine.bandwidth [--device 0] [--size-gib 2] [--repeats 10] [--copies 10]   # JSON on stdout
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.core.files import atomic_write_json, default_cache_dir

if TYPE_CHECKING:
    from bench.core.hardware import Machine

GIB = 1024**3
METHOD = (
    "torch Tensor.copy_ between two uint8 buffers on one GPU (cudaMemcpyAsync device to device), "
    "CUDA events around back-to-back copies"
)
BYTES_COUNTED = "read + write: 2 x size_bytes per copy"
CACHE_FILE = "bandwidth.json"
CHILD_TIMEOUT_S = 300
REPO = Path(__file__).resolve().parents[2]


def measure(
    device_index: int = 0, size_bytes: int = 2 * GIB, repeats: int = 10, copies: int = 10, warmup: int = 3
) -> dict | None:
    """The device-to-device copy bandwidth of GPU `device_index`, in bytes/s (read + write); None without torch or
    CUDA. Errors (out of memory, a bad device index) are raised."""
    if size_bytes <= 0 or repeats < 1 or copies < 1:
        raise ValueError("size_bytes, repeats and copies must be positive")
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", device_index)
    rates: list[float] = []
    with torch.cuda.device(device):
        src = torch.ones(size_bytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        for _ in range(warmup):
            dst.copy_(src)
        torch.cuda.synchronize(device)
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(copies):
                dst.copy_(src)
            end.record()
            end.synchronize()
            rates.append(2 * size_bytes * copies / (start.elapsed_time(end) / 1e3))
        del src, dst
        torch.cuda.empty_cache()
    return {
        "bytes_per_s": max(rates),
        "statistic": "best of repeats",
        "median_bytes_per_s": statistics.median(rates),
        "samples_bytes_per_s": rates,
        "bytes_counted": BYTES_COUNTED,
        "size_bytes": size_bytes,
        "copies_per_repeat": copies,
        "repeats": repeats,
        "warmup_copies": warmup,
        "device_index": device_index,
        "gpu_name": torch.cuda.get_device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "method": METHOD,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def not_measured(reason: str) -> dict:
    """What is recorded when there is no measurement: the ceiling unknown, and why."""
    return {"bytes_per_s": None, "reason": reason}


def measure_in_child(timeout_s: float = CHILD_TIMEOUT_S) -> dict:
    """`python -m bench.engine.bandwidth` in a child process (its CUDA context and buffers die with it): its JSON, or
    not_measured with the reason it gave none."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.engine.bandwidth"], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except subprocess.TimeoutExpired:
        return not_measured(f"python -m bench.engine.bandwidth did not finish in {timeout_s:g} s")
    except OSError as exc:
        return not_measured(f"python -m bench.engine.bandwidth did not start: {exc}")
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return not_measured(f"python -m bench.engine.bandwidth exited {proc.returncode}: {tail}")
    return result if isinstance(result, dict) else not_measured(f"unexpected output: {proc.stdout[:200]!r}")


def machine_key(machine: Machine) -> str:
    """The cache key of a machine: its GPU name and driver (another driver may copy at another speed)."""
    return f"{machine.gpu_name or 'unknown GPU'} | driver {machine.driver or 'unknown'}"


def cached_measure(
    cache_dir: Path, machine_key: str, measure_fn: Callable[[], dict | None] | None = None
) -> dict | None:
    """The measurement cached in cache_dir/bandwidth.json under machine_key, else a new one (`measure_fn`, default
    measure_in_child), cached when it has a number. An entry of another METHOD is measured again; an unreadable
    cache file is measured over. The result says where it came from (`source`)."""
    path = Path(cache_dir) / CACHE_FILE
    try:
        cache = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        cache = {}
    cache = cache if isinstance(cache, dict) else {}
    entry = cache.get(machine_key)
    if isinstance(entry, dict) and entry.get("method") == METHOD and entry.get("bytes_per_s"):
        return {**entry, "source": f"cached in {path}"}
    result = (measure_fn or measure_in_child)()
    if result and result.get("bytes_per_s"):
        atomic_write_json(path, {**cache, machine_key: result})
        return {**result, "source": f"measured now (cached in {path})"}
    return result


def manifest_entry(machine: Machine, *, on_cluster: bool = False, cache_dir: Path | None = None) -> dict | None:
    """environment["bandwidth"] of a sweep's manifest: None on a CPU machine (nothing is run); on a GPU the measured
    ceiling (cached per machine) or not_measured with the reason. Never raises."""
    if machine.platform != "gpu":
        return None
    if on_cluster:
        return not_measured("a Ray sweep: the engines run on the cluster's nodes, not on this driver's GPU")
    if not machine.gpu_name:  # a machine planned for, not one nvidia-smi described
        return not_measured("no GPU detected here (nvidia-smi named none)")
    try:
        result = cached_measure(cache_dir or default_cache_dir(), machine_key(machine))
    except Exception as exc:  # the ceiling is context for the report; the sweep goes on without it
        return not_measured(f"{type(exc).__name__}: {exc}")
    return result if result is not None else not_measured("no CUDA device visible to torch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.engine.bandwidth", description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device index (default 0)")
    parser.add_argument("--size-gib", type=float, default=2.0, help="size of each of the two buffers (default 2)")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats (default 10)")
    parser.add_argument("--copies", type=int, default=10, help="copies per timed repeat (default 10)")
    args = parser.parse_args(argv)
    try:
        result = measure(args.device, int(args.size_gib * GIB), args.repeats, args.copies)
    except Exception as exc:
        result = not_measured(f"{type(exc).__name__}: {exc}")
    if result is None:
        result = not_measured("torch is not installed or sees no CUDA device")
    print(json.dumps(result, indent=2))
    return 0 if result.get("bytes_per_s") else 1


if __name__ == "__main__":
    sys.exit(main())
