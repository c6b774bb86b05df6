"""Parent-death guard for a server process group: `python guard.py FD GRACE_S -- ARGV...`.

The guard leads the server's process group and runs ARGV (the API server) as its child. It holds the read end of
a pipe whose write end only the driver (the `bench` process) holds: when the driver dies, however it dies (SIGKILL
included), the pipe reads EOF and the guard stops the whole group. A parent-death signal (prctl
PR_SET_PDEATHSIG) would reach only one process, and vLLM's engine core and workers can outlive the API server
(docs/facts.md); the group is what must go.

Stopping is ordered (stop_group): SIGTERM to the API server alone, so that it shuts its engine down itself; the
rest of the group only after part of the grace period; SIGKILL at its end. Signalled all at once, the EngineCore
could die before the API server, which then logged an EngineDeadError traceback at every clean stop. A SIGTERM
to the guard (the driver's own Server.stop) is forwarded to its child, for the same reason.

When the child exits on its own, the guard exits with the child's code, so the driver sees the server's exit as
before. Standard library only: this file runs by path, before any of the suite is importable.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

FIRST_SHARE = 0.5  # of the grace period, for the API server to stop its engine before the group gets SIGTERM


def group_members(pgid: int) -> list[int]:
    """The pids of process group `pgid`, sorted (psutil's process list; one that exits meanwhile is skipped)."""
    out = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                out.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return sorted(out)


def group_gone(pgid: int, but: int | None = None) -> bool:
    """No process of group `pgid` is left (`but`: not counting that one, the caller itself)."""
    return all(pid == but for pid in group_members(pgid))


def wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop_group(first: Callable[[], None], pgid: int, grace_s: float, gone: Callable[[], bool]) -> bool:
    """`first()` (SIGTERM to the API server), up to FIRST_SHARE of `grace_s` for the group to go; then SIGTERM
    and SIGCONT to the whole group (a stopped process handles SIGTERM only once continued), the rest of the
    grace; then SIGKILL. True when it went without SIGKILL."""
    first()
    if wait_until(gone, grace_s * FIRST_SHARE):
        return True
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
    if wait_until(gone, grace_s * (1 - FIRST_SHARE)):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return False


def main(argv: list[str]) -> int:
    fd, grace_s, sep, cmd = int(argv[1]), float(argv[2]), argv[3], argv[4:]
    if sep != "--" or not cmd:
        print("usage: guard.py FD GRACE_S -- ARGV...", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
    pgid, me = os.getpgid(0), os.getpid()
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready and not os.read(fd, 1):  # EOF: the driver is gone
            print(f"bench guard: driver gone, stopping process group {pgid}", file=sys.stderr, flush=True)
            stop_group(child.terminate, pgid, grace_s, lambda: child.poll() is not None and group_gone(pgid, me))
            os.killpg(pgid, signal.SIGKILL)  # the guard goes with it
        code = child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
