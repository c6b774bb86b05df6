"""`ab --resume` keeps each round a pair on one machine (bench.commands.ab.set_aside_other_machine): a round left
unfinished by a lease that ended, resumed on another machine, runs both sides again there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.commands import ab
from bench.results.environment import host_identity

ROUND = (
    Path(__file__).resolve().parents[2]
    / "reports"
    / "examples"
    / "kimi-rank-h100-l40-ab-sleep"
    / "baseline"
    / "round-0"
)


def _copy_round(out: Path, side: str, host: dict | None) -> Path:
    dest = out / side / "round-0"
    shutil.copytree(ROUND, dest, ignore=shutil.ignore_patterns("report"))
    manifest = json.loads((dest / "manifest.json").read_text())
    for session in manifest["sessions"]:
        if host is None:
            session.pop("host", None)
        else:
            session["host"] = host
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_a_side_measured_on_another_machine_is_set_aside_when_its_round_is_unfinished(tmp_path):
    _copy_round(tmp_path, "baseline", {"name": "gpu-a", "boot_id": "0000-other-boot"})
    moved = ab.set_aside_other_machine(tmp_path, 0)
    assert len(moved) == 1 and moved[0].parent == tmp_path / "set-aside" / "baseline"
    assert not (tmp_path / "baseline" / "round-0").exists() and (moved[0] / "manifest.json").exists()


def test_a_side_measured_here_or_of_unknown_machine_stays(tmp_path):
    _copy_round(tmp_path, "baseline", host_identity())
    assert ab.set_aside_other_machine(tmp_path, 0) == []
    shutil.rmtree(tmp_path / "baseline")
    _copy_round(tmp_path, "baseline", None)  # sessions before host identities: cannot tell, so kept
    assert ab.set_aside_other_machine(tmp_path, 0) == []


def test_a_finished_round_stays_whatever_machine_ran_it(tmp_path):
    other = {"name": "gpu-a", "boot_id": "0000-other-boot"}
    _copy_round(tmp_path, "baseline", other)
    _copy_round(tmp_path, "candidate", other)
    assert ab.set_aside_other_machine(tmp_path, 0) == []
    assert (tmp_path / "baseline" / "round-0").exists()


def test_warm_start_goes_to_each_sides_first_run_in_this_call(tmp_path, monkeypatch):
    """`ab --warm-start`: each side's first sweep this call runs gets `sweep --warm-start` (a finished side starts no
    server, so it is passed over: the sides may differ in what vLLM's compile cache hashes), no later one."""
    calls = []
    monkeypatch.setattr(ab, "_run", lambda env, args: calls.append(args) or 0)
    _copy_round(tmp_path, "baseline", host_identity())  # round 0's baseline finished here
    env = ab.Env(python="python", patch=None)
    warm = {"baseline": True, "candidate": True}
    for r in range(3):
        ab._round(r, 3, env, env, tmp_path, "p.toml", 1, None, warm)
    sides = [(c[c.index("--out") + 1].split("/")[-2:], "--warm-start" in c) for c in calls]
    assert sides == [
        (["baseline", "round-0"], False),
        (["candidate", "round-0"], True),
        (["candidate", "round-1"], False),
        (["baseline", "round-1"], True),
        (["baseline", "round-2"], False),
        (["candidate", "round-2"], False),
    ]
    assert warm == {"baseline": False, "candidate": False}
