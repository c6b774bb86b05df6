"""Several server starts of one point (`sweep --starts`): the estimate and interval over starts, whether the starts
agree within their stated precision (Cochran's Q), the excess spread, speedups paired by start; on constructed
figures with known answers and on the committed pair of H200 starts of one lease."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.report import starts as S

REPO = Path(__file__).resolve().parents[2]
LEASE = REPO / "reports" / "examples" / "kimi-rank-h200-one-lease"


def test_the_interval_over_starts_is_t_on_logs():
    out = S.over_starts([100.0, 110.0, 121.0])
    logs = [math.log(v) for v in (100.0, 110.0, 121.0)]
    mean, sd = sum(logs) / 3, 0.0953101798043249  # log 1.1 steps: sd of (0, l, 2l) = l
    assert out.estimate == pytest.approx(110.0)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert out.low == pytest.approx(math.exp(mean - half)) and out.high == pytest.approx(math.exp(mean + half))
    assert out.low < out.estimate < out.high


def test_one_start_is_insufficient_data():
    out = S.over_starts([100.0], [0.02], [9])
    assert out.estimate == pytest.approx(100.0) and out.low is None and out.verdict == "insufficient data"


def test_starts_within_their_stated_precision_agree():
    out = S.over_starts([100.0, 101.0, 99.5], [0.03, 0.03, 0.03], [9, 9, 9])
    assert out.verdict == "consistent" and out.q_p > 0.5
    assert out.beyond_cv == 0.0


def test_starts_further_apart_than_their_precision_disagree_and_the_excess_is_sized():
    out = S.over_starts([100.0, 114.0, 100.0, 114.0], [0.02] * 4, [9] * 4)
    assert out.verdict == "starts disagree" and out.q_p < 0.001
    assert 0.05 < out.beyond_cv < 0.09, "about half the 13% log gap, less the stated spread"


def test_a_start_without_precision_weighs_nothing_in_the_agreement():
    out = S.over_starts([100.0, 150.0, 101.0], [0.02, None, 0.02], [9, None, 9])
    assert out.verdict == "consistent", "the start without precision (a short one) cannot disagree"
    assert out.estimate == pytest.approx((100.0 * 150.0 * 101.0) ** (1 / 3)), "it still counts in the estimate"


@pytest.fixture(scope="module")
def two_starts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("starts")
    for k in (1, 2):
        shutil.copytree(LEASE / f"lease-{k}", root / f"start-{k}")
    return root


def test_the_committed_one_lease_pair_flags_no_spec_and_not_flashmla(two_starts):
    summary = S.summarize_starts(two_starts)
    assert summary["starts"] == ["start-1", "start-2"]
    by_label = {p["label"]: p for p in summary["points"]}
    nospec = next(p for label, p in by_label.items() if label.startswith("no-spec"))
    flash = next(p for label, p in by_label.items() if label.startswith("FLASHMLA"))
    assert nospec["output_throughput"]["verdict"] == "starts disagree", "11-14% apart at +-2%"
    assert flash["output_throughput"]["verdict"] == "consistent"
    assert "speedup" not in nospec, "k = 0 has no speedup over itself"
    sp = flash["speedup"]
    assert sp["low"] < sp["estimate"] < sp["high"] and len(sp["values"]) == 2


def test_the_starts_report_leads_with_the_answer(two_starts):
    paths = S.build_starts_report(two_starts)
    text = paths["starts_md"].read_text()
    lines = text.splitlines()
    assert lines[0] == "# Over 2 server starts"
    assert "intervals between 2 starts" in lines[2], "the decision view first, its figures over the starts"
    assert re.search(r"fastest: 1\.\d\dx no-spec \[0\.\d\d, \d\.\d\d\] between 2 starts", lines[4]), lines[4]
    agree = lines[lines.index("## Do the starts agree?") + 2]
    assert agree.startswith("1 of 3 points differ between starts") and "no-spec" in agree
    assert "## Noise budget (CV)" in text
    assert paths["starts_png"].stat().st_size > 10_000
    assert S.start_dirs(two_starts) == [two_starts / "start-1", two_starts / "start-2"]


def test_the_agreement_test_holds_its_level_when_each_start_has_three_blocks():
    """Starts that share one mean, each stating a se from 3 blocks (2 degrees of freedom): Welch's test says
    "disagree" about 5% of the time; Cochran's Q, which takes each se as known, far more often (the CPU example's
    three starts within 4% of each other at +-4.4% were flagged by it)."""
    rng = np.random.default_rng(7)
    welch, cochran, n = 0, 0, 4000
    for _ in range(n):
        blocks = rng.normal(0.0, 0.03, size=(3, 3))  # 3 starts x 3 blocks, logs
        y = blocks.mean(axis=1)
        se = blocks.std(axis=1, ddof=1) / math.sqrt(3)
        welch += S.welch_p(y, se, [2, 2, 2]) < 0.05
        cochran += S.welch_p(y, se, [None, None, None]) < 0.05
    assert 0.02 < welch / n < 0.075, welch / n  # 3.4% at this seed
    assert cochran / n > 0.15, cochran / n


def test_a_start_cut_short_keeps_the_points_the_others_measured(tmp_path):
    """A lease that runs out mid-start leaves the last start without some points: the decision view must still
    name them, with their intervals over the starts that measured them (a bug once said "no no-spec point ran")."""
    for k, lease in ((1, 1), (2, 2), (3, 2)):
        shutil.copytree(LEASE / f"lease-{lease}", tmp_path / f"start-{k}")
    for point in (tmp_path / "start-3" / "points").glob("*.json"):
        if '"engine": "no-spec' not in point.read_text():
            point.unlink()
    assert len(list((tmp_path / "start-3" / "points").glob("*.json"))) == 1
    read = S.read_starts(tmp_path)
    assert read.last_points is not None and set(read.last_points.point_id) == set(read.table.point_id)
    assert len(read.last_points) == len(set(read.table.point_id)), "one row a point"
    text = S.build_starts_report(tmp_path)["starts_md"].read_text()
    lines = text.splitlines()
    assert "intervals between 2-3 starts" in lines[2], lines[2]
    assert re.search(r"FLASHMLA/fp8 draft k=3 is fastest: 1\.\d\dx no-spec \[.*\] between 2 starts", lines[4]), lines[4]


def test_a_start_whose_server_was_launched_twice_is_marked_by_the_launch_that_measured():
    """The committed H100 starts: start 3's FLASHMLA server was launched by a lease that ran out before it served,
    then again by the next lease, which compiled and measured; the servers table says "-/compiled" for that start and
    the starts view must mark the figure " c" (it showed no mark)."""
    root = REPO / "reports" / "examples" / "kimi-rank-h100-l40-starts"
    read = S.read_starts(root)
    flashmla = read.table[read.table.draft_attention_backend == "FLASHMLA"].set_index("start")
    assert list(flashmla.torch_compile.loc[[1, 2, 3]]) == ["compiled", "cache-loaded", "compiled"]
    row = next(line for line in (root / "starts.md").read_text().splitlines() if line.startswith("| FLASHMLA"))
    assert re.search(r"1,023 \(12\.2%\) c \|", row), row


def test_starts_on_two_machines_are_said_so_and_a_start_spread_over_both_is_named():
    """The committed H100 starts: starts 1-2 and start 3's no-spec on one lease's machine, start 3's FLASHMLA on the
    next lease's (another kernel build: the manifests before host identities tell machines apart by it). The
    report must say the starts span two machines and that start 3's paired speedup crosses them."""
    root = REPO / "reports" / "examples" / "kimi-rank-h100-l40-starts"
    summary = S.summarize_starts(root)
    machines = summary["machines"]
    assert len(machines["distinct"]) == 2
    assert [len(machines["by_start"][k]) for k in ("1", "2", "3")] == [1, 1, 2]
    lines = S.machine_lines(summary)
    assert "2 machines (start 1: A; start 2: A; start 3: A+B)" in lines[0]
    assert lines[1].startswith("Start 3 measured its points on more than one machine")
    text = (root / "starts.md").read_text()
    assert "2 machines)" in text.splitlines()[2], "the opening sentence names the machines among its caveats"


def test_one_machine_adds_no_machine_lines():
    assert S.machine_lines({"machines": {"distinct": ["m"], "by_start": {"1": ["m"], "2": ["m"]}}}) == []
    assert S.machine_lines({"points": []}) == []
