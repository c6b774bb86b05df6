"""Noise measured per profile and machine (bench/commands/calibration.py): the CV arithmetic, the store, and what a plan
says with and without a calibration."""

from __future__ import annotations

import numpy as np
import pytest

from bench.cli import main
from bench.commands import calibration as C
from bench.core.hardware import Machine

CPU = Machine("cpu", cpu="Test CPU", cpu_count=2)
H200 = Machine("gpu", 1, "sm90", "NVIDIA H200", driver="580")


def starts(values, metric="output_throughput"):
    return [{metric: [v], "tpot_ms": [10.0]} for v in values]


def test_measure_by_hand():
    # three rounds (the gate's MIN_STARTS: the paired sd comes from bench.verdicts.stats.compare_servers, as the gate's does)
    sides = {"p1": starts([100, 110, 95, 90, 100, 105]), "p2": starts([200] * 6)}
    rounds = {"p1": (starts([100, 110, 95]), starts([90, 100, 105])), "p2": (starts([200] * 3), starts([200] * 3))}
    entry = C.measure(sides, ("output_throughput", "tpot_ms"), rounds)
    cv1 = float(np.std([100, 110, 95, 90, 100, 105], ddof=1) / 100)
    thr = entry["metrics"]["output_throughput"]
    assert thr["max_cv"] == pytest.approx(cv1) and thr["median_cv"] == pytest.approx(cv1 / 2) and thr["points"] == 2
    assert entry["metrics"]["tpot_ms"]["max_cv"] == 0.0 and entry["starts_per_point"] == 6 and entry["points"] == 2
    d = np.log([90 / 100, 100 / 110, 105 / 95])  # p1's three rounds' log ratios; p2's are 0
    assert thr["sd_log_ratio"] == pytest.approx(np.std(d, ddof=1)) and thr["sd_log_ratio_df"] == 2
    chi2 = 0.44628710  # chi2.ppf(0.2, 2) = -2 ln 0.8 (2 df: cdf 1 - exp(-x / 2)); the bound is sd sqrt(df / chi2)
    assert thr["sd_log_ratio_upper"] == pytest.approx(np.std(d, ddof=1) * np.sqrt(2 / chi2), rel=1e-5)
    assert (
        thr["sd_log"] == pytest.approx(np.std(np.log([100, 110, 95, 90, 100, 105]), ddof=1)) and thr["sd_log_df"] == 5
    )
    assert C.measure({"p": starts([100])}, ("output_throughput",))["metrics"] == {}  # one start: no CV


def test_store_and_plan(tmp_path):
    noise, why = C.planning_noise("tiny", CPU, 0.063, tmp_path)
    assert (
        noise == pytest.approx(np.sqrt(2) * 0.063)
        and "no calibration of tiny on this machine (Test CPU (2 cores))" in why
    )
    assert C.planning_noise("tiny", CPU, 0.063, tmp_path, paired=False)[0] == 0.063
    values = [100, 104, 96, 100, 100, 103]
    rounds = {"p": (starts(values[:3]), starts(values[3:]))}
    C.save(
        "tiny", CPU, {"profile": "tiny", **C.measure({"p": starts(values)}, ("output_throughput",), rounds)}, tmp_path
    )
    noise, why = C.planning_noise("tiny", CPU, 0.063, tmp_path)
    d = np.log([100 / 100, 100 / 104, 103 / 96])
    assert noise == pytest.approx(C.sd_upper_bound(float(np.std(d, ddof=1)), 2)) and noise > np.std(d, ddof=1)
    assert "this machine's calibration" in why and "6 starts a point" in why and "80% upper bound" in why
    assert C.load("tiny", H200, tmp_path) is None and C.load("other", CPU, tmp_path) is None  # per profile and machine
    assert C.key("tiny", H200) == "tiny @ 1 x NVIDIA H200 (driver 580)"
    C.save("old", CPU, {"profile": "old", "metrics": {"output_throughput": {"max_cv": 0.05, "points": 1}}}, tmp_path)
    noise, why = C.planning_noise("old", CPU, 0.063, tmp_path)  # an older entry: its CV, no bound
    assert noise == pytest.approx(np.sqrt(2) * 0.05) and "an older one with no upper bound" in why


def test_ab_needs_a_candidate_unless_calibrating(capsys):
    assert main(["ab", "tiny", "--baseline", ".venv"]) == 1
    assert "--candidate ENV is required (or --calibrate" in capsys.readouterr().err


def test_the_key_names_the_profiles_content_and_repeat_not_only_its_name():
    """Found in review: the key was the profile's `name`, so an edited copy under the same name, or a plan with
    another --repeat (a start's mean over more trials varies less), reused a calibration that did not measure it."""
    from bench.config.profile import load_profile

    tiny = load_profile("tiny", "cpu")
    edited = tiny.model_copy(update={"run": tiny.run.model_copy(update={"num_prompts": tiny.run.num_prompts + 1})})
    keys = {C.profile_key(tiny, 1), C.profile_key(tiny, 3), C.profile_key(edited, 1)}
    assert len(keys) == 3 and all(k.startswith("tiny (") for k in keys)
    assert C.profile_key(tiny, 1) == C.profile_key(load_profile("tiny", "cpu"), 1), "stable for the same profile"
