import subprocess
import sys

import pytest

from bench.cli import main


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True, check=True).stdout
    for name in ("patch", "sweep", "profile", "report", "compare", "models"):
        assert name in out


def test_user_errors_are_one_line_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "patch", "status", "--vllm-root", str(tmp_path / "x")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: --vllm-root")
    debug = subprocess.run([sys.executable, "-m", "bench", "--debug", "patch", "status", "--vllm-root",
                            str(tmp_path / "x")], capture_output=True, text=True)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
