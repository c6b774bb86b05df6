"""Server axes (bench/config/axes.py): one declaration makes a `vllm serve` flag a sweep axis, and everything downstream
(profile validation, the plan's product, point ids, the launch command, the dry run, the engine label, the
report's columns and speedup baselines, `load --url`'s check) follows from it. Existing profiles keep their ids."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.config.plan import make_plan
from bench.config.profile import load_profile, parse_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.engine.launch import describe_plan
from bench.report import markdown
from bench.report.speedup import speedups
from bench.report.tables import POINT_COLUMNS, axis_column
from tests.helpers.extras import needs_vllm

BASE = {
    "name": "axes",
    "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
    "axes": {"draft_attention_backend": ["CPU_MLA"], "num_speculative_tokens": [0, 2], "shapes": ["2x16x8"]},
}


def plan_of(axes: dict, **extra):
    data = {**BASE, "axes": {**BASE["axes"], **axes}, **extra}
    return make_plan(parse_profile(data, "cpu", "axes.toml"), Machine("cpu"))


def test_existing_profiles_keep_their_point_ids():
    """Ids written before server axes existed (reports/examples/kimi-rank-h200-staggered, tiny sweeps)."""
    kimi = make_plan(
        load_profile("profiles/kimi-k2.6-rank-h200-steady.toml", "gpu"), Machine("gpu", gpus=1, arch="sm90")
    )
    ids = {(p.engine.label(), p.shape.label): p.id for p in kimi.runnable}
    assert ids[("FLASHMLA/fp8 dcp1 k3", "8x1024x256")] == "992aa38f2237"
    assert ids[("no-spec dcp1 k0", "8x1024x256")] == "75ee180c014a"
    tiny = make_plan(load_profile("tiny", "cpu"), Machine("cpu"))
    assert {"3eeeb2af1df4", "ca6cc3f6ee7b"} <= {p.id for p in tiny.runnable}
    assert all(not e.axes and "axes" not in e.to_dict() for e, _ in tiny.groups)


def test_a_declared_axis_is_crossed_launched_labelled_and_hashed():
    plan = plan_of({"max_num_batched_tokens": [2048, 8192]})
    engines = [e for e, _ in plan.groups]
    assert len(engines) == 4, "k in {0, 2} x two values"
    assert sorted(e.label() for e in engines) == [
        "CPU_MLA/auto dcp1 k2 mbt=2048",
        "CPU_MLA/auto dcp1 k2 mbt=8192",
        "no-spec dcp1 k0 mbt=2048",
        "no-spec dcp1 k0 mbt=8192",
    ]
    assert len({p.id for p in plan.runnable}) == 4, "the value is part of the point id"
    assert all(e.serve_args["max_num_batched_tokens"] in (2048, 8192) for e in engines)
    text = describe_plan(plan)
    assert "--max-num-batched-tokens 2048" in text and "--max-num-batched-tokens 8192" in text
    assert "[no-spec dcp1 k0 mbt=2048]" in text


def test_any_vllm_serve_flag_can_be_swept_under_axes_server():
    plan = plan_of({"server": {"enable_prefix_caching": [True, False]}})
    labels = sorted(e.label() for e, _ in plan.groups)
    assert labels[0].endswith("enable_prefix_caching=False") and labels[-1].endswith("enable_prefix_caching=True")
    text = describe_plan(plan)
    assert "--enable-prefix-caching" in text and "--no-enable-prefix-caching" in text


@pytest.mark.parametrize(
    ("axes", "extra", "why"),
    [
        ({"max_num_batched_tokens": [0]}, {}, "values must be >= 1"),
        ({"max_num_batched_tokens": ["big"]}, {}, "is not int"),
        ({"max_num_batched_tokens": [64, 64]}, {}, "distinct"),
        ({"max_num_batched_tokens": []}, {}, "at least one value"),
        ({"max_num_batched_tokens": [64]}, {"server": {"max_num_batched_tokens": 128}}, "keep one"),
        ({"server": {"port": [1, 2]}}, {}, "set by the suite"),
        ({"server": {"Bad-Flag": [1]}}, {}, "not a vllm serve flag name"),
        ({"server": {"max_num_seqs": [0, 4]}}, {}, "values must be >= 1"),
        ({"server": {"max_num_seqs": [4, "x"]}}, {}, "is not int"),
        ({"server": {"max_num_batched_tokens": [64]}, "max_num_batched_tokens": [32]}, {}, "given twice"),
    ],
)
def test_server_axis_values_are_checked(axes, extra, why):
    with pytest.raises(BenchError, match=why):
        plan_of(axes, **extra)


def point_row(pid: str, k: int, tok_s: float, **columns) -> dict:
    """An ok point at 2x16x8 in the points table's columns, with `columns` set beside."""
    base = dict.fromkeys(POINT_COLUMNS) | {"point_id": pid, "status": "ok", "num_speculative_tokens": k}
    shape = {"dcp_size": 1, "concurrency": 2, "input_len": 16, "output_len": 8}
    return base | shape | {"output_throughput": tok_s, "tpot_p50_ms": 1000 / tok_s} | columns


def test_report_shows_the_axis_and_matches_baselines_on_it():
    def row(pid, k, mbt, tok_s):
        return point_row(pid, k, tok_s, server_axes=f"mbt={mbt}", **{axis_column("max_num_batched_tokens"): mbt})

    points = pd.DataFrame([row("a", 0, 2048, 100.0), row("b", 0, 8192, 200.0), row("c", 2, 8192, 300.0)])
    found = speedups(points).set_index("point_id")
    assert found.loc["c", "baseline_point_id"] == "b", "the baseline has the same server-axis value"
    assert found.loc["c", "speedup_output"] == pytest.approx(1.5)
    columns = markdown._result_columns(points)
    keys = list(columns)
    assert columns[axis_column("max_num_batched_tokens")][0] == "max batched tokens"
    assert keys.index(axis_column("max_num_batched_tokens")) == keys.index("num_speculative_tokens") + 1


def test_a_baseline_shares_the_server_settings_not_only_the_axes():
    """A results directory resumed with a changed [server] (max_num_seqs 8, then 64) holds a k = 0 point of one and
    a k = 3 point of the other: no speedup across them (it was 2.5x across 8 vs 64 sequences)."""
    from bench.results.records import EngineSettings

    def row(pid, k, seqs, tok_s):
        eng = EngineSettings(num_speculative_tokens=k, target="tiny", weights="dummy", server={"max_num_seqs": seqs})
        return point_row(pid, k, tok_s, engine_base=eng.base_id())

    found = speedups(pd.DataFrame([row("a", 0, 8, 100.0), row("b", 3, 64, 250.0)])).set_index("point_id")
    assert pd.isna(found.loc["b", "baseline_point_id"]) and np.isnan(found.loc["b", "speedup_output"])
    found = speedups(pd.DataFrame([row("a", 0, 64, 100.0), row("b", 3, 64, 250.0)])).set_index("point_id")
    assert found.loc["b", "speedup_output"] == pytest.approx(2.5)


def test_list_values_reach_vllm_as_separate_arguments_and_the_dry_run_quotes_for_a_shell():
    import shlex

    from bench.engine.launch import _quote
    from bench.engine.server import server_argv

    argv = server_argv(
        "/t", "m", 1, {"cudagraph_capture_sizes": [1, 2, 4], "compilation_config": {"a": 1}}, None, 1, None
    )
    i = argv.index("--cudagraph-capture-sizes")
    assert argv[i + 1 : i + 4] == ["1", "2", "4"]  # vLLM's nargs="+" flags; JSON '[1, 2, 4]' fails its int parse
    assert argv[argv.index("--compilation-config") + 1] == '{"a": 1}'  # dict-valued flags stay JSON
    for arg in ("it's a template", "$HOME", "*.pt", '{"a": 1}'):
        assert shlex.split(_quote(arg)) == [arg]


@needs_vllm
def test_the_dry_run_checks_each_command_with_vllms_own_parser(tmp_path):
    """A store_true flag swept over [true, false] gives --no-<flag>, which vLLM's parser refuses; the dry run says
    so under that server, with the installed vLLM's words, and passes the other."""
    from bench.engine import vllm_argv

    text = '[axes]\nshapes = ["1x16x8"]\n[axes.server]\ndisable_log_stats = [true, false]\n'
    (tmp_path / "b.toml").write_text('name = "b"\n' + text)
    plan = make_plan(load_profile(str(tmp_path / "b.toml"), "cpu"), Machine("cpu"))
    out = describe_plan(plan)
    version = vllm_argv.version()
    assert version, "vLLM's parser is importable where the suite is installed"
    assert f"! vLLM {version} refuses it: unrecognized arguments: --no-disable-log-stats" in out
    assert out.count("refuses it") == 1
    assert vllm_argv.check(["python", "-m", vllm_argv.ENTRY, "--max-num-seqs", "x"])[1].endswith("'x'")


@needs_vllm
def test_a_sweep_refuses_a_command_vllms_parser_refuses_before_any_server_starts(tmp_path):
    """An undeclared server axis has no value check but its type: vLLM's own parser is the check, run on every
    planned server before a sweep starts one (bench.engine.launch.refused_commands; issue 41)."""
    from bench.commands.sweep import SweepRequest, sweep
    from bench.engine.launch import refused_commands

    text = '[axes]\nshapes = ["1x16x8"]\n[axes.server]\nmax_logprobs = [5, "two"]\n'
    (tmp_path / "b.toml").write_text('name = "b"\n' + text)
    plan = make_plan(load_profile(str(tmp_path / "b.toml"), "cpu"), Machine("cpu"))
    refused = refused_commands(plan)
    assert len(refused) == 1 and "max_logprobs=two" in refused[0] and "'two'" in refused[0], refused
    out = tmp_path / "out"
    with pytest.raises(BenchError, match="refuses the command of server .*'two'.*Nothing was started"):
        sweep(SweepRequest(profile=str(tmp_path / "b.toml"), out=out))
    assert not out.exists()
    (tmp_path / "g.toml").write_text('name = "g"\n' + text.replace('"two"', "6"))
    good = make_plan(load_profile(str(tmp_path / "g.toml"), "cpu"), Machine("cpu"))
    assert refused_commands(good) == [], "values vLLM's parser takes"
