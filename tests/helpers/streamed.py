"""Run a command and read its output line by line, with a deadline that fires even while the loop waits for the
next line (a timeout on wait() after reading to EOF never would): past `timeout_s` the process is killed and the
test fails, saying so."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Sequence

import pytest


def stream(
    argv: Sequence[str],
    *,
    timeout_s: float,
    on_line: Callable[[str, subprocess.Popen], None] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, list[str], subprocess.Popen]:
    """(exit code, output lines, the process); stderr goes into stdout."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    expired = threading.Event()

    def kill() -> None:
        expired.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            if on_line:
                on_line(line, proc)
    finally:
        timer.cancel()
    rc = proc.wait(timeout=60)
    if expired.is_set():
        pytest.fail(f"{' '.join(argv[:4])}...: still running after {timeout_s:.0f} s, killed; last lines: {lines[-5:]}")
    return rc, lines, proc
