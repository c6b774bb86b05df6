"""Statistics on data with a known answer: A/A gives no change, a 10% slowdown is found with its size."""

from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.compare import bootstrap_ratio_ci, compare_dirs, compare_markdown, compare_metric, regressions
from bench.store import SweepStore


def write_side(root: Path, throughputs: list[float], tpot_ms: float, rng, point_id="p1") -> Path:
    """A minimal results directory: one point with one trial per throughput and 16 requests per trial."""
    store = SweepStore(root)
    store.write_manifest(
        {"created": "t", "profile": {"name": "synthetic"}, "plan": [], "counts": {}, "environment": {}}
    )
    rows, trials = [], []
    for t, thr in enumerate(throughputs):
        for i in range(16):
            send = 100.0 * t + i
            first = send + 0.05
            step = rng.normal(tpot_ms, tpot_ms * 0.01) / 1e3
            times = [first + step * 4 * k for k in range(8)]
            rows.append(
                {
                    "index": i,
                    "phase": "measure",
                    "prompt_len": 8,
                    "max_tokens": 29,
                    "send_time": send,
                    "end_time": times[-1],
                    "chunk_times": times,
                    "chunk_tokens": [1] + [4] * 7,
                    "prompt_tokens": 8,
                    "output_tokens": 29,
                    "status": "ok",
                    "error": None,
                    "trial": t,
                }
            )
        trials.append(
            {
                "trial": t,
                "metrics": {"output_throughput": thr, "request_throughput": thr / 29},
                "spec_decode": {"mean_acceptance_length": 4.0},
            }
        )
    store.save_raw(point_id, rows)
    store.save_point(
        {
            "point_id": point_id,
            "engine_id": "e",
            "status": "ok",
            "config": {"shape": {}},
            "label": {"engine": "CPU_MLA/auto dcp1 k3", "shape": "4x8x29"},
            "metrics": {},
            "spec_decode": {},
            "trials": trials,
        }
    )
    return root


@pytest.fixture
def rng():
    return np.random.default_rng(1)


def test_a_a_is_no_change(tmp_path, rng):
    base = write_side(tmp_path / "a", list(rng.normal(1000, 10, 8)), 10.0, rng)
    cand = write_side(tmp_path / "b", list(rng.normal(1000, 10, 8)), 10.0, rng)
    result = compare_dirs(base, cand)
    t = result["table"].set_index("metric")
    assert set(t.verdict) == {"no change"}
    assert 0.97 < t.loc["output_throughput", "ratio"] < 1.03
    assert t.loc["output_throughput", "ci_low"] < 1.0 < t.loc["output_throughput", "ci_high"]
    assert regressions(result).empty


def test_ten_percent_slowdown_is_found_with_its_size(tmp_path, rng, capsys):
    base = write_side(tmp_path / "a", list(rng.normal(1000, 10, 8)), 10.0, rng)
    cand = write_side(tmp_path / "b", list(rng.normal(900, 9, 8)), 11.0, rng)
    result = compare_dirs(base, cand)
    t = result["table"].set_index("metric")
    assert t.loc["output_throughput", "verdict"] == "slower"
    assert t.loc["output_throughput", "ratio"] == pytest.approx(0.9, abs=0.015)
    assert t.loc["output_throughput", "ci_high"] < 0.95
    assert t.loc["tpot_ms", "verdict"] == "slower" and t.loc["tpot_ms", "ratio"] == pytest.approx(1.1, abs=0.01)
    assert t.loc["mean_acceptance_length", "verdict"] == "no change"  # same acceptance: the slowdown is system time
    d = result["decomposition"].iloc[0]
    assert d.acceptance_factor == 1.0 and d.system_factor == pytest.approx(d.throughput_ratio)
    md = compare_markdown(result)
    assert (
        md.splitlines()[2].startswith("Baseline") and ": 4 slower, 0 faster, 2 no change" in md.splitlines()[2]
    )  # throughput x2, TPOT, E2E
    row = next(line for line in md.splitlines() if line.startswith("| CPU_MLA/auto dcp1 k3 4x8x29 | 0."))
    assert row.endswith("| slower |") and float(row.split("|")[2].split()[0]) == pytest.approx(0.9, abs=0.015)
    # The CLI gates on it, and --no-gate does not.
    assert main(["compare", str(base), str(cand)]) == 4
    assert main(["compare", str(base), str(cand), "--no-gate"]) == 0
    assert main(["compare", str(cand), str(base)]) == 0  # the reverse is faster, not a regression


def test_small_but_significant_change_below_min_effect_is_no_change():
    base = [100.0, 100.1, 99.9, 100.05, 99.95, 100.02]
    cand = [101.0, 101.1, 100.9, 101.05, 100.95, 101.02]  # +1%, clearly significant
    r = compare_metric(base, cand, True, min_effect=0.02, alpha=0.05)
    assert r["p_value"] < 0.01 and r["verdict"] == "no change"
    assert compare_metric(base, cand, True, min_effect=0.005, alpha=0.05)["verdict"] == "faster"


def test_one_trial_per_side_gives_no_verdict():
    r = compare_metric([100.0], [50.0], True, min_effect=0.02, alpha=0.05)
    assert r["verdict"] == "insufficient data" and r["ratio"] == 0.5


def test_bootstrap_ci_brackets_known_ratio():
    rng = np.random.default_rng(0)
    lo, hi = bootstrap_ratio_ci(rng.normal(100, 1, 50), rng.normal(120, 1.2, 50), np.mean)
    assert lo < 1.2 < hi and hi - lo < 0.02


def test_folder_of_rounds_pools_trials(tmp_path, rng):
    for r in range(3):
        write_side(tmp_path / "a" / f"round-{r}", [1000.0 + r], 10.0, rng)
        write_side(tmp_path / "b" / f"round-{r}", [1000.0 - r], 10.0, rng)
    t = compare_dirs(tmp_path / "a", tmp_path / "b")["table"].set_index("metric")
    assert t.loc["output_throughput", "n_base"] == 3 and t.loc["tpot_ms", "n_base"] == 3  # one median per trial
