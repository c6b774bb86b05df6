import re
import subprocess
import sys

import pytest

COMMANDS = {"patch", "sweep", "load", "profile", "report", "compare", "ab", "models", "migrate"}


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "bench", "--help"], capture_output=True, text=True, check=True).stdout
    # Each command is the first word of a line indented by exactly 4 spaces (argparse's subcommand list);
    # matching words anywhere would let "ab" pass on "tables".
    assert set(re.findall(r"^ {4}(\w+)\b", out, flags=re.MULTILINE)) == COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_has_its_own_help(command, capsys):
    from bench.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: python -m bench {command} ")


def test_user_errors_are_one_line_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "patch", "status", "--vllm-root", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and proc.stderr.startswith("error: --vllm-root")
    debug = subprocess.run(
        [sys.executable, "-m", "bench", "--debug", "patch", "status", "--vllm-root", str(tmp_path / "x")],
        capture_output=True,
        text=True,
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_sweep_refuses_to_run_for_other_hardware_but_plans_for_it(capsys, monkeypatch):
    from bench.cli import main
    from bench.core.hardware import Machine

    monkeypatch.setattr(
        "bench.config.plan.detect_machine", lambda: Machine("cpu", cpu="(test)", cpu_count=2)
    )  # any host

    assert main(["sweep", "kimi-k2.6-eagle3-tp8", "--platform", "gpu"]) == 1
    assert "only --dry-run can plan for another platform" in capsys.readouterr().err
    assert main(["sweep", "kimi-k2.6-eagle3-tp8"]) == 1
    assert "needs gpu x8; this machine is cpu" in capsys.readouterr().err
    assert main(["sweep", "kimi-k2.6-eagle3-tp8", "--dry-run"]) == 0
    assert "counts: points 288, runnable 288, skipped 0, servers 24" in capsys.readouterr().out


def test_sweep_points_selects_by_id_prefix(capsys):
    from bench.cli import main

    assert main(["sweep", "tiny-dcp", "--dry-run"]) == 0
    full = capsys.readouterr().out
    ids = [line.split()[1] for line in full.splitlines() if line.strip().startswith("point ")]
    assert len(ids) == 16
    assert main(["sweep", "tiny-dcp", "--dry-run", "--points", f"{ids[0][:5]}, {ids[5]}"]) == 0
    out = capsys.readouterr().out
    assert "counts: points 2, runnable 2, skipped 0" in out and ids[0] in out and ids[5] in out
    assert sum(line.strip().startswith("point ") for line in out.splitlines()) == 2
    assert main(["sweep", "tiny-dcp", "--dry-run", "--points", "nope"]) == 1
    assert "no point 'nope' in tiny-dcp" in capsys.readouterr().err
