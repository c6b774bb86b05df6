"""Parent-death guard for a server process group: `python guard.py FD GRACE_S -- ARGV...`.

The guard leads the server's process group and runs ARGV as its child. It holds the read end of a pipe whose
write end only the driver (the `bench` process) holds: when the driver dies, however it dies (SIGKILL included),
the pipe reads EOF and the guard stops the whole group: SIGTERM, GRACE_S seconds, SIGKILL. A parent-death signal
(prctl PR_SET_PDEATHSIG) would reach only one process, and vLLM's engine core and workers can outlive the API
server (docs/facts.md); the group is what must go.

When the child exits on its own, the guard exits with the child's code, so the driver sees the server's exit as
before. SIGTERM sent to the group by the driver's own stop reaches the child directly; the guard ignores it and
waits for the child. Standard library only: this file runs by path, before any of the suite is importable.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time


def _group_empty_but_me(pgid: int) -> bool:
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != me:
            try:
                if os.getpgid(int(entry)) == pgid:
                    return False
            except (ProcessLookupError, PermissionError):
                continue
    return True


def _stop_group(pgid: int, grace_s: float) -> None:
    os.killpg(pgid, signal.SIGTERM)
    os.killpg(pgid, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not _group_empty_but_me(pgid):
        time.sleep(0.2)
    os.killpg(pgid, signal.SIGKILL)  # the guard goes with it


def main(argv: list[str]) -> int:
    fd, grace_s, sep, cmd = int(argv[1]), float(argv[2]), argv[3], argv[4:]
    if sep != "--" or not cmd:
        print("usage: guard.py FD GRACE_S -- ARGV...", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # after the spawn: an ignored signal would be inherited
    pgid = os.getpgid(0)
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready and not os.read(fd, 1):  # EOF: the driver is gone
            print(f"bench guard: driver gone, stopping process group {pgid}", file=sys.stderr, flush=True)
            _stop_group(pgid, grace_s)
        code = child.poll()
        if code is not None:
            return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
