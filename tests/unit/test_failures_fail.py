"""Failures fail: the exit-code table (one place, in --help and docs/cli.md), `profile` and
`sweep --profile-points` exit non-zero on a failed point, a capture error or a capture with no bench.* range,
with the executor scripted (no vLLM) and the capture real (timing files, or a stand-in nsys analysis)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.cli import build_parser, main
from bench.commands import sweep as sweep_module
from bench.commands.profile_point import ProfileJob, ProfileOutcome, choose_point, run_profile
from bench.commands.sweep import SweepOutcome
from bench.config.plan import Plan, make_plan
from bench.config.profile import parse_profile
from bench.core.errors import EXIT_CODE_MEANINGS, ExitCode
from bench.core.hardware import Machine
from bench.engine.server import ServerSpec
from bench.profiling.session import Capture, bench_range_count
from bench.profiling.timing import TimingRecorder
from bench.run import executor, trial
from tests.helpers.scripted_load import fake_closed_loop
from tests.unit.test_executor import FakeServer

REPO = Path(__file__).resolve().parents[2]
PROFILE = {
    "name": "scripted-profile",
    "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
    "axes": {
        "draft_attention_backend": ["CPU_MLA"],
        "draft_kv_cache_dtype": ["auto"],
        "num_speculative_tokens": [2],
        "shapes": ["1x8x4"],
    },
    "run": {"num_prompts": 2, "warmup_prompts": 1},
}


def test_the_exit_code_table_is_in_help_and_the_cli_reference(capsys):
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 130] and set(EXIT_CODE_MEANINGS) == set(ExitCode)
    epilog = build_parser().format_help().split("exit codes:")[1]
    reference = (REPO / "docs" / "cli.md").read_text()  # the README links it
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"{int(code):<4} {meaning}" in epilog
        assert f"| {int(code)} |" in reference, f"docs/cli.md lacks exit code {int(code)}"


class ProfilingServer(FakeServer):
    """A scripted server whose "plugin" writes `script["ranges"]` timer records (domain, name) into the capture's
    timing folder, as the real plugin does inside vLLM's processes."""

    def start(self, timeout_s: float) -> float:
        ready = super().start(timeout_s)
        folder = self.spec.env.get("BENCH_TIMING_DIR")
        for domain, name in self.script.get("ranges", []):
            rec = TimingRecorder(folder, domain=domain)
            rec.add(name, 7, 1000, 1400)
            rec.close()
        return ready


@pytest.fixture
def profiled(monkeypatch, tmp_path):
    """(script, job): `bench profile`'s one point on a scripted server, load and /metrics."""
    script: dict = {"loads": []}

    def fake_spec(engine, store, flavor, extra_env=None, draft_keys="legacy"):
        return ServerSpec(["python", "-m", "vllm"], dict(extra_env or {}), store.log_path(engine.id), 9), range(3, 9)

    monkeypatch.setattr(executor, "server_spec", fake_spec)
    monkeypatch.setattr(executor, "Server", lambda spec: ProfilingServer(spec, script))
    monkeypatch.setattr(trial, "run_closed_loop", fake_closed_loop(script["loads"]))
    monkeypatch.setattr(trial.http_client, "scrape", lambda url, timeout=10: "vllm:spec_decode_num_drafts_total 5\n")
    plan = make_plan(parse_profile(PROFILE, "cpu", "scripted.toml"), Machine("cpu"))
    point = choose_point(plan, None, None)
    single = Plan(plan.profile, plan.machine, [(point.engine, [point])], [])
    return script, ProfileJob(single, point, tmp_path / "out", None, True)


def test_profile_of_an_ok_point_with_bench_ranges_passes(profiled):
    script, job = profiled
    script["ranges"] = [("bench", "bench.model.execute"), ("other", "torch.op")]
    outcome = run_profile(job)
    assert outcome.point_error is None and outcome.capture_error is None
    (capture,) = outcome.captures
    assert (capture["ranges"], capture["bench_ranges"]) == (2, 1)


def test_profile_fails_when_no_bench_range_was_captured(profiled):
    script, job = profiled
    script["ranges"] = [("other", "torch.op")]  # e.g. the plugin inactive: vLLM's own ranges only
    outcome = run_profile(job)
    assert outcome.point_error is None
    assert outcome.capture_error.startswith(f"capture of {job.point.engine.id}: no bench.* range captured")
    assert outcome.captures == []


def test_profile_of_a_failed_point_reports_the_point_not_its_empty_capture(profiled):
    script, job = profiled
    script["start_fails"] = True
    outcome = run_profile(job)
    assert outcome.point_error == "failed (out-of-memory: scripted start failure)"
    assert outcome.capture_error is None and script["loads"] == []


def test_capture_check_reads_the_plugin_domain_of_an_nsys_summary():
    summary = pd.DataFrame(
        {"domain": ["bench", "", "bench", "CCCL"], "name": ["bench:decode", "bench.engine.step", "x", "scan"]}
    ).assign(count=[5, 2, 1, 46])
    assert bench_range_count(summary) == 8
    assert bench_range_count(summary[summary.domain == "CCCL"]) == 0 and bench_range_count(summary.iloc[:0]) == 0


def test_an_nsys_capture_without_bench_ranges_is_an_error(monkeypatch, tmp_path):
    def fake_analyze(sqlite, out_dir):
        Path(out_dir).mkdir(parents=True)
        path = Path(out_dir) / "nsys_summary.parquet"
        pd.DataFrame({"domain": [""], "name": ["torch_range"], "count": [5]}).to_parquet(path)
        return {"paths": {"summary_parquet": path}, "headline": {}, "warnings": []}

    monkeypatch.setattr("bench.profiling.nsys_analysis.analyze", fake_analyze)
    monkeypatch.setattr("bench.profiling.session.subprocess.run", lambda *a, **k: None)
    cap = Capture(tmp_path / "profile", nsys="/x/nsys")
    report = cap.report_base("e1").with_suffix(".nsys-rep")
    report.parent.mkdir(parents=True)
    report.write_bytes(b"rep")
    out = cap.finalize("e1")
    assert out["reports"][0]["bench_ranges"] == 0 and out["bench_ranges"] == 0
    assert out["error"].startswith("no bench.* range captured")


class Job:
    def __init__(self, point_id: str = "p1"):
        self.nsys, self.point = None, type("P", (), {"id": point_id})


def cli_profile(monkeypatch, outcome: ProfileOutcome) -> int:
    monkeypatch.setattr("bench.commands.profile_point.prepare_profile", lambda request: Job())
    monkeypatch.setattr("bench.commands.profile_point.run_profile", lambda job: outcome)
    return main(["profile", "tiny", "--no-nsys"])


def test_profile_exit_codes(monkeypatch, capsys, tmp_path):
    good = {"engine_id": "e1", "mode": "timing", "ranges": 3, "bench_ranges": 3}
    html = tmp_path / "report.html"
    assert cli_profile(monkeypatch, ProfileOutcome(tmp_path, html, [good], None)) == ExitCode.OK
    failed = ProfileOutcome(tmp_path, html, [], None, "failed (crash: server exited with code 2)")
    assert cli_profile(monkeypatch, failed) == ExitCode.POINTS_FAILED == 3
    err = capsys.readouterr().err
    assert f"error: point p1 failed (crash: server exited with code 2); results: {tmp_path}" in err
    empty = ProfileOutcome(tmp_path, html, [], "capture of e1: no bench.* range captured: ...")
    assert cli_profile(monkeypatch, empty) == ExitCode.CAPTURE_FAILED == 5
    assert "error: capture failed: capture of e1: no bench.* range captured" in capsys.readouterr().err


def test_sweep_profile_points_exit_codes(monkeypatch, capsys, tmp_path):
    def run(counts: dict, capture_error: str | None) -> int:
        outcome = SweepOutcome(tmp_path, None, counts, capture_error)
        monkeypatch.setattr(sweep_module, "sweep", lambda request: outcome)
        return main(["sweep", "tiny", "--profile-points"])

    assert run({"ok": 2, "failed": 0, "skipped": 0}, None) == ExitCode.OK
    assert run({"ok": 2, "failed": 0, "skipped": 0}, "capture of e1: nsys wrote no report") == 5
    assert "error: capture of e1: nsys wrote no report" in capsys.readouterr().err
    assert run({"ok": 1, "failed": 1, "skipped": 0}, "capture of e1: nsys wrote no report") == 3


def test_sweep_outcome_carries_the_capture_problem_of_measured_engines(profiled, monkeypatch):
    """sweep() with --profile-points: an empty capture of a server whose point finished ok is the problem."""
    _, job = profiled
    monkeypatch.setattr(sweep_module, "_plan", lambda request, dry_run: job.plan)
    monkeypatch.setattr(sweep_module, "build_report_safely", lambda root: None)
    request = sweep_module.SweepRequest(profile=None, out=job.out, profile_points=True, quiet=True)
    monkeypatch.setattr("bench.profiling.session.find_nsys", lambda explicit=None: None)
    outcome = sweep_module.sweep(request)
    assert outcome.counts["ok"] == 1
    assert outcome.capture_error.startswith(f"capture of {job.point.engine.id}: no bench.* range captured")
