"""Provenance every result embeds: vLLM version, path and patch state, machine, Python, the suite's git sha."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

from bench import __version__
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.results.records import PointRecord

REPO = Path(__file__).resolve().parents[2]


def suite_git() -> dict:
    """The suite's commit. BENCH_GIT_SHA, when set, names it and wins: a copy of the tree on another host (the GPU
    machine) may carry a .git of another commit (seen: the H200 copy's .git said b1240fb while 5dfe406 ran)."""
    if named := os.environ.get("BENCH_GIT_SHA", "").strip():
        return {"sha": named, "dirty": None}

    def git(*args):
        try:
            proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    if sha is None:
        return {"sha": None, "dirty": None}
    return {"sha": sha, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def vllm_provenance() -> dict:
    from bench.patching import locate_vllm, patch_report

    try:
        return patch_report(locate_vllm())
    except BenchError as exc:
        return {"problem": str(exc)}


# The variables that change what bench or vLLM does; names that may hold a secret are never recorded.
VARIABLE_PREFIXES = ("BENCH_", "VLLM_")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def run_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The BENCH_* and VLLM_* environment variables set (an `ab` side's --candidate-env, a step delay), by name;
    any whose name says it may be a secret left out."""
    env = os.environ if environ is None else environ
    return {
        k: v
        for k, v in sorted(env.items())
        if k.startswith(VARIABLE_PREFIXES) and not any(w in k.upper() for w in SECRET_WORDS)
    }


def host_identity() -> dict:
    """Which machine this is: its host name and this boot's id (Linux), so that a start resumed on another machine
    (a new GPU lease) can be told apart from one that stayed (bench.report.starts)."""
    try:
        boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot_id = None
    return {"name": platform.node(), "boot_id": boot_id}


def collect_environment(machine: Machine) -> dict:
    return {
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "bench_version": __version__,
        "suite_git": suite_git(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "host": host_identity(),
        "machine": machine.to_dict(),
        "vllm": vllm_provenance(),
        "variables": run_variables(),
    }


def point_sessions(manifest: dict, points: dict[str, PointRecord]) -> dict[str, int]:
    """{point id: the index of the session that measured it}: a resume appends a session, and a point belongs to the
    last session started before it (points never measured are left out)."""
    starts = [s.get("time") or "" for s in manifest.get("sessions") or []]
    out = {}
    for pid, record in points.items():
        when = record.started or record.finished  # a point failed at its server's start has no `started`
        if record.status in ("ok", "failed") and when and starts:
            out[pid] = max([0] + [i for i, t in enumerate(starts) if t and t <= when])
    return out


def machine_id(session: dict) -> str:
    """Which machine a session ran on: its host name and boot id (`host_identity`, recorded from 2026-12-07), else
    (older records) its OS build and driver, which tell two machines apart only when they differ."""
    host = session.get("host") or {}
    if host.get("boot_id"):
        return f"{host.get('name') or '?'} boot {host['boot_id'][:8]}"
    return f"{session.get('platform') or '?'} driver {(session.get('machine') or {}).get('driver') or '?'}"


def same_machine(session: dict, here: dict) -> bool | None:
    """Whether two sessions' environments ran on one machine (its host name and boot id); None when either lacks them
    (records from before 2026-12-07)."""
    a, b = session.get("host") or {}, here.get("host") or {}
    if not a.get("boot_id") or not b.get("boot_id"):
        return None
    return (a.get("name"), a["boot_id"]) == (b.get("name"), b["boot_id"])
