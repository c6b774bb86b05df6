"""The CLI only turns argv into a request, calls the library and prints: what `sweep` and `profile` print and
return for a given outcome, with the library replaced by stand-ins that record what they were asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import NO_NSYS, main
from bench.commands import profile_point as point_module
from bench.commands import sweep as sweep_module
from bench.commands.profile_point import ProfileOutcome
from bench.commands.sweep import SweepOutcome


@pytest.fixture
def sweep_calls(monkeypatch):
    calls: dict = {}

    def fake_sweep(request):
        calls["request"] = request
        return calls["outcome"]

    monkeypatch.setattr(sweep_module, "sweep", fake_sweep)
    return calls


def test_sweep_request_from_argv_and_exit_codes(sweep_calls, capsys, tmp_path):
    sweep_calls["outcome"] = SweepOutcome(
        tmp_path, tmp_path / "report" / "summary.md", {"ok": 2, "failed": 1, "skipped": 4}
    )
    argv = ["sweep", "tiny", "--out", str(tmp_path), "--points", " a1, ,b2 ", "--repeat", "2", "--resume"]
    assert main([*argv, "--rerun-failed", "--quiet", "--draft-keys", "upstream"]) == 3
    request = sweep_calls["request"]
    assert (request.profile, request.out, request.points, request.repeat) == ("tiny", tmp_path, ["a1", "b2"], 2)
    assert request.resume and request.rerun_failed and request.quiet and request.draft_keys == "upstream"
    assert not request.profile_points and request.platform is None
    assert capsys.readouterr().out.splitlines() == [
        f"report: {tmp_path / 'report' / 'summary.md'}",
        f"results: {tmp_path}  (2 ok, 1 failed, 4 skipped)",
    ]
    sweep_calls["outcome"] = SweepOutcome(tmp_path, None, {"ok": 2, "failed": 0, "skipped": 0})
    assert main(["sweep"]) == 0
    assert sweep_calls["request"].profile is None and sweep_calls["request"].points is None
    assert capsys.readouterr().out.splitlines() == [f"results: {tmp_path}  (2 ok, 0 failed, 0 skipped)"]
    sweep_calls["outcome"] = SweepOutcome(tmp_path, None, {"ok": 2, "failed": 0, "skipped": 0}, left=3)
    assert main(["sweep", "--time-budget", "90"]) == 7, "points left by the budget: not a success"
    assert sweep_calls["request"].time_budget_s == 90.0
    assert "3 not run: time budget spent, --resume runs them" in capsys.readouterr().out
    sweep_calls["outcome"] = SweepOutcome(tmp_path, None, {"ok": 2, "failed": 1, "skipped": 0}, left=3)
    assert main(["sweep", "--time-budget", "90"]) == 3, "failed points win"


@pytest.fixture
def profile_calls(monkeypatch, tmp_path):
    calls: dict = {}

    def fake_prepare(request):
        calls["request"] = request
        return calls["job"]

    def fake_run(job):
        calls["ran"] = job
        return calls["outcome"]

    monkeypatch.setattr(point_module, "prepare_profile", fake_prepare)
    monkeypatch.setattr(point_module, "run_profile", fake_run)
    return calls


class Job:
    def __init__(self, nsys):
        self.nsys = nsys


def test_profile_prints_captures_and_fails_on_a_failed_one(profile_calls, capsys, tmp_path):
    good = {"engine_id": "e1", "mode": "timing", "ranges": 3}
    profile_calls["job"] = Job(None)
    profile_calls["outcome"] = ProfileOutcome(tmp_path, tmp_path / "report" / "report.html", [good], None)
    assert main(["profile", "tiny", "--point", "ab", "--no-nsys", "--num-prompts", "4", "--quiet"]) == 0
    request = profile_calls["request"]
    assert (request.profile, request.point, request.no_nsys, request.num_prompts, request.quiet) == (
        "tiny",
        "ab",
        True,
        4,
        True,
    )
    out, err = capsys.readouterr()
    assert err.strip() == NO_NSYS
    assert out == f"report: {tmp_path / 'report' / 'report.html'}\n{json.dumps(good, indent=2)}\nresults: {tmp_path}\n"

    profile_calls["job"] = Job("/usr/bin/nsys")
    profile_calls["outcome"] = ProfileOutcome(tmp_path, tmp_path / "r.html", [good], "nsys wrote no report")
    assert main(["profile", "tiny"]) == 5  # ExitCode.CAPTURE_FAILED
    out, err = capsys.readouterr()
    assert err == "error: capture failed: nsys wrote no report\n"
    assert "results:" not in out and json.dumps(good, indent=2) in out


def test_profile_analyze_needs_a_file(capsys):
    assert main(["profile", "analyze"]) == 1
    assert "profile analyze needs one FILE" in capsys.readouterr().err


def test_profile_analyze_default_out(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_analyze(path, out, plot=True, verify=False):
        seen["args"] = (Path(path), Path(out))
        seen["options"] = (plot, verify)
        return {"paths": {"summary": Path(out) / "summary.csv"}, "warnings": ["few ranges"], "headline": {}}

    monkeypatch.setattr("bench.profiling.nsys_analysis.analyze", fake_analyze)
    export = tmp_path / "capture-e1.sqlite.xz"
    assert main(["profile", "analyze", str(export)]) == 0
    assert seen["args"] == (export, tmp_path / "capture-e1-analysis") and seen["options"] == (True, False)
    out, err = capsys.readouterr()
    assert out == f"summary: {tmp_path / 'capture-e1-analysis' / 'summary.csv'}\n" and err == "warning: few ranges\n"
    assert main(["profile", "analyze", str(export), "--no-plot", "--verify"]) == 0
    assert seen["options"] == (False, True)
